"""The in-container runner (sandboxes/runner.py) driven directly over pipes, on the
host with a temporary workspace: its protocol and guards, with no Docker engine.
(``--kill-all`` is left off: outside a container it would kill the host's processes.)"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentenv.sandboxes import runner
from agentenv.sandboxes.runner import FRAME, PROTOCOL


class Runner:
    def __init__(self, workspace: Path, tmp: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, runner.__file__, "--workspace", str(workspace), "--tmp", str(tmp)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def call(self, header: dict[str, Any], blob: bytes = b"") -> tuple[dict[str, Any], bytes]:
        data = json.dumps(header).encode()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(FRAME.pack(len(data), len(blob)) + data + blob)
        self.proc.stdin.flush()
        header_len, blob_len = FRAME.unpack(self.proc.stdout.read(FRAME.size))
        body = self.proc.stdout.read(header_len + blob_len)
        return json.loads(body[:header_len]), body[header_len:]

    def run(self, **request: Any) -> dict[str, Any]:
        return self.call({"op": "run", "timeout_s": 5, "output_bytes": 1000, **request})[0]


@pytest.fixture
def rn(tmp_path: Path) -> Iterator[Runner]:
    (tmp_path / "ws").mkdir()
    (tmp_path / "tmp").mkdir()
    r = Runner(tmp_path / "ws", tmp_path / "tmp")
    yield r
    r.proc.kill()
    r.proc.wait()


def test_ping_answers_with_the_protocol(rn: Runner) -> None:
    assert rn.call({"op": "ping"})[0]["protocol"] == PROTOCOL


def test_python_runs_like_python_c(rn: Runner) -> None:
    out = rn.run(python="import sys; print(sys.argv, __name__, input()); sys.exit(4)", stdin="in\n")
    assert (out["stdout"], out["exit_code"]) == ("['-c'] __main__ in\n", 4)


def test_timeout_and_output_cap(rn: Runner) -> None:
    slow = rn.run(argv=["sh", "-c", "sleep 30 & sleep 30"], timeout_s=0.3)
    assert slow["timed_out"] and slow["exit_code"] is None
    loud = rn.run(python="print('x' * 100_000)")
    assert len(loud["stdout"]) == 1000 and loud["stdout_truncated"]


def test_files_refuse_symlinks_out_of_the_workspace(rn: Runner, tmp_path: Path) -> None:
    (tmp_path / "ws" / "out").symlink_to(tmp_path / "tmp")
    answer, _ = rn.call({"op": "write_files", "files": [["out/planted", 1]]}, b"x")
    assert answer["kind"] == "refused" and not (tmp_path / "tmp" / "planted").exists()
    assert rn.call({"op": "read_file", "path": "absent"})[0]["kind"] == "not_found"


def test_restore_refuses_members_that_leave_the_workspace(rn: Runner, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    answer, _ = rn.call({"op": "restore"}, buf.getvalue())
    assert answer["kind"] == "refused" and not (tmp_path / "escaped").exists()


def test_snapshot_restore_and_reset_wipe(rn: Runner, tmp_path: Path) -> None:
    rn.call({"op": "write_files", "files": [["d/a.txt", 2]]}, b"hi")
    (tmp_path / "tmp" / "t").write_text("t")
    _, archive = rn.call({"op": "snapshot"})
    assert rn.call({"op": "reset"})[0]["ok"]
    assert not any((tmp_path / "ws").iterdir()) and not any((tmp_path / "tmp").iterdir())
    assert rn.call({"op": "restore"}, archive)[0]["ok"]
    assert (tmp_path / "ws" / "d" / "a.txt").read_text() == "hi"

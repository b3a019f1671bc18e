"""The fs world's 32 tasks: goals in JSON Logic and golden actions with the shell's answers.

Level 0: one command; 1: two; 2: a read, then a write of what was read; 3: four or more.
The helpers build the RFC 6902 operations a faithful shell's answer holds and the rules
the goals are made of, over the world's flat map of paths (`agentenv.envs.world.worlds.fs_state`).
"""

from __future__ import annotations

import fnmatch
import posixpath
from typing import Any

from agentenv import Task
from agentenv.envs.world.paths import escape
from agentenv.envs.world.world import Response, respond, world_task
from agentenv.envs.world.worlds.fs_state import INITIAL_STATE

__all__ = ["tasks"]

INITIAL: dict[str, dict[str, str]] = INITIAL_STATE.model_dump(mode="json")["files"]


def _ptr(path: str) -> str:
    return "/files/" + escape(path)


def add_dir(path: str) -> dict[str, Any]:
    return {"op": "add", "path": _ptr(path), "value": {"kind": "dir", "content": ""}}


def add_file(path: str, content: str = "") -> dict[str, Any]:
    return {"op": "add", "path": _ptr(path), "value": {"kind": "file", "content": content}}


def remove(path: str) -> dict[str, Any]:
    return {"op": "remove", "path": _ptr(path)}


def move(src: str, dst: str) -> dict[str, Any]:
    return {"op": "move", "from": _ptr(src), "path": _ptr(dst)}


def is_dir(path: str) -> dict[str, Any]:
    return {"==": [{"val": ["files", path, "kind"]}, "dir"]}


def is_file(path: str, content: str | None = None) -> dict[str, Any]:
    kind = {"==": [{"val": ["files", path, "kind"]}, "file"]}
    if content is None:
        return kind
    return {"and": [kind, {"==": [{"val": ["files", path, "content"]}, content]}]}


def gone(path: str) -> dict[str, Any]:
    return {"!": [{"val": ["files", path]}]}


def every(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"and": list(rules)}


def _text(path: str) -> str:
    return INITIAL[path]["content"]


def _grep(pattern: str, path: str) -> str:
    return "".join(line + "\n" for line in _text(path).splitlines() if pattern in line)


def _wc(path: str) -> str:
    text = _text(path)
    return f"{len(text.splitlines())} {len(text.split())} {len(text.encode())} {path}"


def _find(root: str, name: str, files: dict[str, Any] | None = None) -> str:
    keys = sorted(
        k for k in (files or INITIAL) if k.startswith(root + "/") and fnmatch.fnmatch(k.rsplit("/", 1)[1], name)
    )
    return "".join(k + "\n" for k in keys)


def _head(path: str, lines: int) -> str:
    return "".join(line + "\n" for line in _text(path).splitlines()[:lines])


def ok(*patch: dict[str, Any]) -> Response:
    """A silent success (as coreutils are) with this change."""
    return respond("", *patch)


H = "/home/user"
NOTES, TODO, REPORT = f"{H}/notes.txt", f"{H}/todo.txt", f"{H}/docs/report.md"
APP, OLD = f"{H}/logs/app.log", f"{H}/logs/old.log"


def tasks() -> list[Task]:
    t = world_task
    errors = _grep("ERROR", APP)
    return [
        # -- level 0: one command ----------------------------------------------------------
        t(
            "fs-mkdir-projects",
            f"Create the directory {H}/projects.",
            goal=is_dir(f"{H}/projects"),
            golden=[("mkdir", {"path": f"{H}/projects"}, ok(add_dir(f"{H}/projects")))],
            family="fs-create",
        ),
        t(
            "fs-touch-empty",
            f"Create an empty file {H}/empty.txt.",
            goal=is_file(f"{H}/empty.txt", ""),
            golden=[("touch", {"path": f"{H}/empty.txt"}, ok(add_file(f"{H}/empty.txt")))],
            family="fs-create",
        ),
        t(
            "fs-write-hello",
            f"Write the text 'hello world' followed by a newline to {H}/hello.txt.",
            goal=is_file(f"{H}/hello.txt", "hello world\n"),
            golden=[
                (
                    "write_file",
                    {"path": f"{H}/hello.txt", "content": "hello world\n"},
                    ok(add_file(f"{H}/hello.txt", "hello world\n")),
                )
            ],
            family="fs-write",
        ),
        t(
            "fs-rm-scratch",
            "Delete /tmp/scratch.txt.",
            goal=gone("/tmp/scratch.txt"),
            golden=[("rm", {"path": "/tmp/scratch.txt"}, ok(remove("/tmp/scratch.txt")))],
            family="fs-remove",
        ),
        t(
            "fs-append-notes",
            f"Add the line 'buy eggs' to the end of {NOTES}.",
            goal=is_file(NOTES, _text(NOTES) + "buy eggs\n"),
            golden=[
                (
                    "append_file",
                    {"path": NOTES, "content": "buy eggs\n"},
                    ok({"op": "replace", "path": _ptr(NOTES) + "/content", "value": _text(NOTES) + "buy eggs\n"}),
                )
            ],
            family="fs-write",
        ),
        t(
            "fs-mkdir-backup",
            f"Make a directory called backup in {H}.",
            goal=is_dir(f"{H}/backup"),
            golden=[("mkdir", {"path": f"{H}/backup"}, ok(add_dir(f"{H}/backup")))],
            family="fs-create",
        ),
        t(
            "fs-rm-old-log",
            f"Remove the old log file {OLD}.",
            goal=gone(OLD),
            golden=[("rm", {"path": OLD}, ok(remove(OLD)))],
            family="fs-remove",
        ),
        t(
            "fs-rename-todo",
            f"Rename {TODO} to {H}/tasks.txt.",
            goal=every(gone(TODO), is_file(f"{H}/tasks.txt", _text(TODO))),
            golden=[("mv", {"src": TODO, "dst": f"{H}/tasks.txt"}, ok(move(TODO, f"{H}/tasks.txt")))],
            family="fs-move",
        ),
        # -- level 1: two commands -----------------------------------------------------------
        t(
            "fs-archive-old-log",
            f"Create {H}/archive and move {OLD} into it (keeping its name).",
            goal=every(gone(OLD), is_file(f"{H}/archive/old.log", _text(OLD))),
            subgoals={"archive_exists": is_dir(f"{H}/archive")},
            golden=[
                ("mkdir", {"path": f"{H}/archive"}, ok(add_dir(f"{H}/archive"))),
                ("mv", {"src": OLD, "dst": f"{H}/archive/old.log"}, ok(move(OLD, f"{H}/archive/old.log"))),
            ],
            family="fs-move",
            difficulty=1,
        ),
        t(
            "fs-project-readme",
            f"Create the directory {H}/projects with a file README.md in it that says '# Projects'"
            " followed by a newline.",
            goal=is_file(f"{H}/projects/README.md", "# Projects\n"),
            subgoals={"dir": is_dir(f"{H}/projects")},
            golden=[
                ("mkdir", {"path": f"{H}/projects"}, ok(add_dir(f"{H}/projects"))),
                (
                    "write_file",
                    {"path": f"{H}/projects/README.md", "content": "# Projects\n"},
                    ok(add_file(f"{H}/projects/README.md", "# Projects\n")),
                ),
            ],
            family="fs-create",
            difficulty=1,
        ),
        t(
            "fs-copy-then-append",
            f"Copy {NOTES} to {H}/docs/notes.txt, then add the line 'copied' to the copy.",
            goal=every(is_file(f"{H}/docs/notes.txt", _text(NOTES) + "copied\n"), is_file(NOTES, _text(NOTES))),
            subgoals={"copied": is_file(f"{H}/docs/notes.txt")},
            golden=[
                ("cp", {"src": NOTES, "dst": f"{H}/docs/notes.txt"}, ok(add_file(f"{H}/docs/notes.txt", _text(NOTES)))),
                (
                    "append_file",
                    {"path": f"{H}/docs/notes.txt", "content": "copied\n"},
                    ok(
                        {
                            "op": "replace",
                            "path": _ptr(f"{H}/docs/notes.txt") + "/content",
                            "value": _text(NOTES) + "copied\n",
                        }
                    ),
                ),
            ],
            family="fs-copy",
            difficulty=1,
        ),
        t(
            "fs-version-report",
            f"Rename {REPORT} to {H}/docs/report-v1.md, then create a new {REPORT} holding "
            "'# Quarterly report' and a newline.",
            goal=every(is_file(f"{H}/docs/report-v1.md", _text(REPORT)), is_file(REPORT, "# Quarterly report\n")),
            subgoals={"kept": is_file(f"{H}/docs/report-v1.md")},
            golden=[
                ("mv", {"src": REPORT, "dst": f"{H}/docs/report-v1.md"}, ok(move(REPORT, f"{H}/docs/report-v1.md"))),
                (
                    "write_file",
                    {"path": REPORT, "content": "# Quarterly report\n"},
                    ok(add_file(REPORT, "# Quarterly report\n")),
                ),
            ],
            family="fs-move",
            difficulty=1,
        ),
        t(
            "fs-reset-logs",
            f"Empty the directory {H}/logs: remove it with everything in it and create it again.",
            goal=every(is_dir(f"{H}/logs"), gone(APP), gone(OLD)),
            subgoals={"app_gone": gone(APP)},
            golden=[
                ("rm", {"path": f"{H}/logs", "recursive": True}, ok(remove(APP), remove(OLD), remove(f"{H}/logs"))),
                ("mkdir", {"path": f"{H}/logs"}, ok(add_dir(f"{H}/logs"))),
            ],
            family="fs-remove",
            difficulty=1,
        ),
        t(
            "fs-two-files",
            "Create two empty files, /tmp/a.txt and /tmp/b.txt.",
            goal=every(is_file("/tmp/a.txt", ""), is_file("/tmp/b.txt", "")),
            subgoals={"a": is_file("/tmp/a.txt")},
            golden=[
                ("touch", {"path": "/tmp/a.txt"}, ok(add_file("/tmp/a.txt"))),
                ("touch", {"path": "/tmp/b.txt"}, ok(add_file("/tmp/b.txt"))),
            ],
            family="fs-create",
            difficulty=1,
        ),
        t(
            "fs-backup-hosts",
            f"Copy /etc/hosts to {H}/hosts.bak, then add the line '10.0.0.2 db' to /etc/hosts.",
            goal=every(
                is_file(f"{H}/hosts.bak", _text("/etc/hosts")),
                is_file("/etc/hosts", _text("/etc/hosts") + "10.0.0.2 db\n"),
            ),
            subgoals={"backed_up": is_file(f"{H}/hosts.bak")},
            golden=[
                (
                    "cp",
                    {"src": "/etc/hosts", "dst": f"{H}/hosts.bak"},
                    ok(add_file(f"{H}/hosts.bak", _text("/etc/hosts"))),
                ),
                (
                    "append_file",
                    {"path": "/etc/hosts", "content": "10.0.0.2 db\n"},
                    ok(
                        {
                            "op": "replace",
                            "path": _ptr("/etc/hosts") + "/content",
                            "value": _text("/etc/hosts") + "10.0.0.2 db\n",
                        }
                    ),
                ),
            ],
            family="fs-copy",
            difficulty=1,
        ),
        t(
            "fs-nested-dirs",
            f"Create {H}/src and inside it {H}/src/lib.",
            goal=is_dir(f"{H}/src/lib"),
            subgoals={"src": is_dir(f"{H}/src")},
            golden=[
                ("mkdir", {"path": f"{H}/src"}, ok(add_dir(f"{H}/src"))),
                ("mkdir", {"path": f"{H}/src/lib"}, ok(add_dir(f"{H}/src/lib"))),
            ],
            family="fs-create",
            difficulty=1,
        ),
        # -- level 2: read, then write what was read -------------------------------------------
        t(
            "fs-extract-errors",
            f"Write the ERROR lines of {APP}, in order, to {H}/errors.txt.",
            goal=is_file(f"{H}/errors.txt", errors),
            golden=[
                ("cat", {"path": APP}),
                ("write_file", {"path": f"{H}/errors.txt", "content": errors}, ok(add_file(f"{H}/errors.txt", errors))),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-count-errors",
            f"Count the lines of {APP} that contain ERROR and write the number and a newline to {H}/error_count.txt.",
            goal=is_file(f"{H}/error_count.txt", "2\n"),
            golden=[
                ("grep", {"pattern": "ERROR", "path": APP}, respond(errors)),
                (
                    "write_file",
                    {"path": f"{H}/error_count.txt", "content": "2\n"},
                    ok(add_file(f"{H}/error_count.txt", "2\n")),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-first-note",
            f"Write the first line of {NOTES} (with its newline) to {H}/first.txt.",
            goal=is_file(f"{H}/first.txt", _head(NOTES, 1)),
            golden=[
                ("head", {"path": NOTES, "lines": 1}, respond(_head(NOTES, 1))),
                (
                    "write_file",
                    {"path": f"{H}/first.txt", "content": _head(NOTES, 1)},
                    ok(add_file(f"{H}/first.txt", _head(NOTES, 1))),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-index-docs",
            f"Write the listing of {H}/docs (as ls prints it) and a newline to {H}/docs-index.txt.",
            goal=is_file(f"{H}/docs-index.txt", "report.md\n"),
            golden=[
                ("ls", {"path": f"{H}/docs"}),
                (
                    "write_file",
                    {"path": f"{H}/docs-index.txt", "content": "report.md\n"},
                    ok(add_file(f"{H}/docs-index.txt", "report.md\n")),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-count-lines",
            f"Find how many lines {NOTES} has and write that number and a newline to {H}/lines.txt.",
            goal=is_file(f"{H}/lines.txt", f"{len(_text(NOTES).splitlines())}\n"),
            golden=[
                ("wc", {"path": NOTES}, respond(_wc(NOTES))),
                (
                    "write_file",
                    {"path": f"{H}/lines.txt", "content": f"{len(_text(NOTES).splitlines())}\n"},
                    ok(add_file(f"{H}/lines.txt", f"{len(_text(NOTES).splitlines())}\n")),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-list-logs",
            f"Write the paths of every .log file under {H}, one per line, sorted, to {H}/logs.txt.",
            goal=is_file(f"{H}/logs.txt", _find(H, "*.log")),
            golden=[
                ("find", {"path": H, "name": "*.log"}, respond(_find(H, "*.log"))),
                (
                    "write_file",
                    {"path": f"{H}/logs.txt", "content": _find(H, "*.log")},
                    ok(add_file(f"{H}/logs.txt", _find(H, "*.log"))),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-report-title",
            f"Write the title line of {REPORT} (its first line, with the newline) to {H}/title.txt.",
            goal=is_file(f"{H}/title.txt", _head(REPORT, 1)),
            golden=[
                ("cat", {"path": REPORT}),
                (
                    "write_file",
                    {"path": f"{H}/title.txt", "content": _head(REPORT, 1)},
                    ok(add_file(f"{H}/title.txt", _head(REPORT, 1))),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        t(
            "fs-copy-todo-upper",
            f"Read {TODO} and write its lines in upper case to {H}/TODO.txt.",
            goal=is_file(f"{H}/TODO.txt", _text(TODO).upper()),
            golden=[
                ("cat", {"path": TODO}),
                (
                    "write_file",
                    {"path": f"{H}/TODO.txt", "content": _text(TODO).upper()},
                    ok(add_file(f"{H}/TODO.txt", _text(TODO).upper())),
                ),
            ],
            family="fs-extract",
            difficulty=2,
        ),
        # -- level 3: four or more commands -----------------------------------------------------
        t(
            "fs-archive-logs",
            f"Create {H}/archive, move both files of {H}/logs into it (same names), then remove the "
            "empty logs directory.",
            goal=every(
                is_file(f"{H}/archive/app.log", _text(APP)),
                is_file(f"{H}/archive/old.log", _text(OLD)),
                gone(f"{H}/logs"),
            ),
            subgoals={
                "archive": is_dir(f"{H}/archive"),
                "app": is_file(f"{H}/archive/app.log"),
                "old": is_file(f"{H}/archive/old.log"),
            },
            golden=[
                ("mkdir", {"path": f"{H}/archive"}, ok(add_dir(f"{H}/archive"))),
                ("mv", {"src": APP, "dst": f"{H}/archive/app.log"}, ok(move(APP, f"{H}/archive/app.log"))),
                ("mv", {"src": OLD, "dst": f"{H}/archive/old.log"}, ok(move(OLD, f"{H}/archive/old.log"))),
                ("rm", {"path": f"{H}/logs", "recursive": True}, ok(remove(f"{H}/logs"))),
            ],
            family="fs-organise",
            difficulty=3,
        ),
        t(
            "fs-scaffold-project",
            f"Create {H}/projects/demo (both directories), with README.md saying '# Demo' and "
            "main.py saying \"print('hi')\", each followed by a newline.",
            goal=every(
                is_file(f"{H}/projects/demo/README.md", "# Demo\n"),
                is_file(f"{H}/projects/demo/main.py", "print('hi')\n"),
            ),
            subgoals={
                "projects": is_dir(f"{H}/projects"),
                "demo": is_dir(f"{H}/projects/demo"),
                "readme": is_file(f"{H}/projects/demo/README.md"),
            },
            golden=[
                ("mkdir", {"path": f"{H}/projects"}, ok(add_dir(f"{H}/projects"))),
                ("mkdir", {"path": f"{H}/projects/demo"}, ok(add_dir(f"{H}/projects/demo"))),
                (
                    "write_file",
                    {"path": f"{H}/projects/demo/README.md", "content": "# Demo\n"},
                    ok(add_file(f"{H}/projects/demo/README.md", "# Demo\n")),
                ),
                (
                    "write_file",
                    {"path": f"{H}/projects/demo/main.py", "content": "print('hi')\n"},
                    ok(add_file(f"{H}/projects/demo/main.py", "print('hi')\n")),
                ),
            ],
            family="fs-organise",
            difficulty=3,
        ),
        t(
            "fs-backup-texts",
            f"Create {H}/backup and copy notes.txt, todo.txt and docs/report.md of {H} into it (same file names).",
            goal=every(*(is_file(f"{H}/backup/{posixpath.basename(p)}", _text(p)) for p in (NOTES, TODO, REPORT))),
            subgoals={
                "dir": is_dir(f"{H}/backup"),
                "notes": is_file(f"{H}/backup/notes.txt"),
                "todo": is_file(f"{H}/backup/todo.txt"),
            },
            golden=[
                ("mkdir", {"path": f"{H}/backup"}, ok(add_dir(f"{H}/backup"))),
                *(
                    (
                        (
                            "cp",
                            {"src": p, "dst": f"{H}/backup/{posixpath.basename(p)}"},
                            ok(add_file(f"{H}/backup/{posixpath.basename(p)}", _text(p))),
                        )
                    )
                    for p in (NOTES, TODO, REPORT)
                ),
            ],
            family="fs-copy",
            difficulty=3,
        ),
        t(
            "fs-swap-files",
            f"Swap the contents of {NOTES} and {TODO} (use /tmp/swap.txt in between and leave nothing there).",
            goal=every(is_file(NOTES, _text(TODO)), is_file(TODO, _text(NOTES)), gone("/tmp/swap.txt")),
            subgoals={"notes_has_todo": is_file(NOTES, _text(TODO))},
            golden=[
                ("mv", {"src": NOTES, "dst": "/tmp/swap.txt"}, ok(move(NOTES, "/tmp/swap.txt"))),
                ("mv", {"src": TODO, "dst": NOTES}, ok(move(TODO, NOTES))),
                ("mv", {"src": "/tmp/swap.txt", "dst": TODO}, ok(move("/tmp/swap.txt", TODO))),
            ],
            family="fs-move",
            difficulty=3,
        ),
        t(
            "fs-errors-then-clean",
            f"Save the ERROR lines of {APP} to {H}/errors.txt, then delete {APP} and {OLD}.",
            goal=every(is_file(f"{H}/errors.txt", errors), gone(APP), gone(OLD)),
            subgoals={"saved": is_file(f"{H}/errors.txt", errors), "app_gone": gone(APP)},
            golden=[
                ("grep", {"pattern": "ERROR", "path": APP}, respond(errors)),
                ("write_file", {"path": f"{H}/errors.txt", "content": errors}, ok(add_file(f"{H}/errors.txt", errors))),
                ("rm", {"path": APP}, ok(remove(APP))),
                ("rm", {"path": OLD}, ok(remove(OLD))),
            ],
            family="fs-organise",
            difficulty=3,
        ),
        t(
            "fs-deep-file",
            f"Create {H}/a/b/c/deep.txt holding 'deep' and a newline (make the directories first).",
            goal=is_file(f"{H}/a/b/c/deep.txt", "deep\n"),
            subgoals={"a": is_dir(f"{H}/a"), "b": is_dir(f"{H}/a/b"), "c": is_dir(f"{H}/a/b/c")},
            golden=[
                ("mkdir", {"path": f"{H}/a"}, ok(add_dir(f"{H}/a"))),
                ("mkdir", {"path": f"{H}/a/b"}, ok(add_dir(f"{H}/a/b"))),
                ("mkdir", {"path": f"{H}/a/b/c"}, ok(add_dir(f"{H}/a/b/c"))),
                (
                    "write_file",
                    {"path": f"{H}/a/b/c/deep.txt", "content": "deep\n"},
                    ok(add_file(f"{H}/a/b/c/deep.txt", "deep\n")),
                ),
            ],
            family="fs-create",
            difficulty=3,
        ),
        t(
            "fs-done-list",
            f"Move every line of {TODO} to {H}/done.txt, each prefixed with 'done: ', then delete {TODO}.",
            goal=every(is_file(f"{H}/done.txt", "".join(f"done: {x}\n" for x in _text(TODO).splitlines())), gone(TODO)),
            subgoals={"written": is_file(f"{H}/done.txt")},
            golden=[
                ("cat", {"path": TODO}),
                (
                    "write_file",
                    {"path": f"{H}/done.txt", "content": "".join(f"done: {x}\n" for x in _text(TODO).splitlines())},
                    ok(add_file(f"{H}/done.txt", "".join(f"done: {x}\n" for x in _text(TODO).splitlines()))),
                ),
                ("rm", {"path": TODO}, ok(remove(TODO))),
            ],
            family="fs-organise",
            difficulty=3,
        ),
        t(
            "fs-tidy-tmp",
            "Tidy /tmp: delete scratch.txt, create an empty /tmp/.keep and a directory /tmp/cache.",
            goal=every(gone("/tmp/scratch.txt"), is_file("/tmp/.keep", ""), is_dir("/tmp/cache")),
            subgoals={"scratch_gone": gone("/tmp/scratch.txt"), "keep": is_file("/tmp/.keep")},
            golden=[
                ("ls", {"path": "/tmp"}),
                ("rm", {"path": "/tmp/scratch.txt"}, ok(remove("/tmp/scratch.txt"))),
                ("touch", {"path": "/tmp/.keep"}, ok(add_file("/tmp/.keep"))),
                ("mkdir", {"path": "/tmp/cache"}, ok(add_dir("/tmp/cache"))),
            ],
            family="fs-organise",
            difficulty=3,
        ),
    ]

"""Running domain services: one subprocess per domain per process, shared by every env.

`acquire(domain_path)` returns the live `Service` of a domain, starting it on first
use: a data directory with the seed database, ``python -m agentenv.envs.tools.serve``
on a free loopback port, a health check. Envs `release` it on close; the last
release stops it after a short linger (so a loop of make/close does not restart it
each time), and an atexit hook stops whatever is left. A dead service (killed,
crashed) is replaced on the next acquire; the envs still holding it see
`InfraError` on their next call.

A subprocess rather than a thread: a route that hangs or crashes cannot take the
trainer down, and "the service died" is a real, testable event (kill the pid).
Left out: several replicas per domain, remote services.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agentenv import InfraError
from agentenv.envs.tools.app import EPISODE_HEADER
from agentenv.envs.tools.domain import Domain, load_domain

__all__ = ["Reply", "Service", "acquire", "release", "shutdown_all"]

START_TIMEOUT_S = 30.0
LINGER_S = 5.0


@dataclass(frozen=True, slots=True)
class Reply:
    """A service answer: ``status`` 200 with ``result``, or an error ``kind`` and ``message``."""

    status: int
    result: Any = None
    kind: str | None = None
    message: str = ""
    rule: str | None = None


@dataclass(eq=False)
class Service:
    """A live domain service and the directory of its episode databases."""

    path: str
    domain: Domain
    data_dir: Path
    process: subprocess.Popen[str]
    base_url: str
    client: httpx.Client
    users: int = 0
    gold_hashes: dict[str, str] = field(default_factory=dict)  # task key -> hash of its gold final state
    _linger: threading.Timer | None = None

    @property
    def seed_db(self) -> Path:
        return self.data_dir / "seed.sqlite"

    def alive(self) -> bool:
        return self.process.poll() is None

    def new_episode(self) -> str:
        """A fresh episode id with a copy of the seed database."""
        episode = uuid.uuid4().hex
        self.reset_episode(episode)
        return episode

    def reset_episode(self, episode: str) -> None:
        tmp = self.db_path(episode).with_suffix(".tmp")
        shutil.copyfile(self.seed_db, tmp)  # a few KB: far cheaper than re-running the seed
        os.replace(tmp, self.db_path(episode))  # atomic: the service never sees half a file

    def write_episode(self, episode: str, data: bytes) -> None:
        tmp = self.db_path(episode).with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.db_path(episode))

    def drop_episode(self, episode: str) -> None:
        self.db_path(episode).unlink(missing_ok=True)

    def db_path(self, episode: str) -> Path:
        return self.data_dir / f"{episode}.sqlite"

    def call(self, episode: str, tool: str, body: bytes, timeout_s: float) -> Reply:
        """POST one tool call; transport failures and timeouts raise `InfraError`."""
        if self.client.is_closed:  # stopped after a crash while this env still held it
            raise InfraError(f"the {self.domain.name} service was stopped")
        try:
            resp = self.client.post(
                f"/call/{tool}", content=body, timeout=timeout_s,
                headers={EPISODE_HEADER: episode, "content-type": "application/json"},
            )
        except httpx.TimeoutException:
            raise InfraError(f"the {self.domain.name} service did not answer {tool!r} within {timeout_s} s") from None
        except httpx.TransportError as e:
            raise InfraError(f"the {self.domain.name} service is unreachable: {type(e).__name__}: {e}") from None
        try:
            data = resp.json()
        except ValueError:
            raise InfraError(f"the {self.domain.name} service sent a non-JSON reply ({resp.status_code})") from None
        if resp.status_code == 200:
            return Reply(200, result=data["result"])
        if data.get("error") == "unknown_episode":
            raise InfraError(f"the {self.domain.name} service lost the episode database: {data.get('message')}")
        return Reply(resp.status_code, kind=data.get("error"), message=data.get("message", ""), rule=data.get("rule"))

    def stop(self) -> None:
        self.client.close()
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdin:
            self.process.stdin.close()
        if self.process.stdout:
            self.process.stdout.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)


_lock = threading.Lock()
_services: dict[str, Service] = {}
_atexit_registered = False


def acquire(path: str) -> Service:
    """The live service of the domain at ``path`` ("module:attr"), started if needed."""
    global _atexit_registered
    with _lock:
        service = _services.get(path)
        if service is not None and not service.alive():
            service.stop()
            service = None
        if service is None:
            service = _start(path)
            _services[path] = service
            if not _atexit_registered:
                atexit.register(shutdown_all)
                _atexit_registered = True
        if service._linger is not None:
            service._linger.cancel()
            service._linger = None
        service.users += 1
        return service


def release(service: Service) -> None:
    """One env is done with ``service``; the last one stops it after `LINGER_S`."""
    with _lock:
        service.users -= 1
        if service.users > 0:
            return
        if _services.get(service.path) is not service:  # already replaced after a crash
            service.stop()
            return
        timer = threading.Timer(LINGER_S, _stop_if_unused, args=(service,))
        timer.daemon = True
        service._linger = timer
        timer.start()


def shutdown_all() -> None:
    """Stop every service now (atexit; tests)."""
    with _lock:
        services = list(_services.values())
        _services.clear()
    for service in services:
        if service._linger is not None:
            service._linger.cancel()
        service.stop()


def _stop_if_unused(service: Service) -> None:
    with _lock:
        if service.users > 0 or _services.get(service.path) is not service:
            return
        del _services[service.path]
    service.stop()


def _start(path: str) -> Service:
    domain = load_domain(path)
    data_dir = Path(tempfile.mkdtemp(prefix=f"agentenv-tools-{domain.name}-"))
    domain.create_seed(str(data_dir / "seed.sqlite"))
    # The child imports the domain by name, so it gets this process's import path.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    process = subprocess.Popen(
        [sys.executable, "-m", "agentenv.envs.tools.serve", "--domain", path, "--data-dir", str(data_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, text=True, env=env,
    )
    try:
        port = _read_port(process)
        base_url = f"http://127.0.0.1:{port}"
        # TCP_NODELAY: httpx writes headers and body apart, and Nagle + delayed ACK would add 40 ms a call.
        transport = httpx.HTTPTransport(
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        )
        client = httpx.Client(base_url=base_url, transport=transport)
        _wait_healthy(client, process, domain.name)
    except BaseException:
        process.kill()
        process.wait()
        shutil.rmtree(data_dir, ignore_errors=True)
        raise
    return Service(path, domain, data_dir, process, base_url, client)


def _read_port(process: subprocess.Popen[str]) -> int:
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(START_TIMEOUT_S)
    if not line or not line[0]:
        raise InfraError(f"the domain service did not start (exit code {process.poll()}); see its stderr above")
    return int(json.loads(line[0])["port"])


def _wait_healthy(client: httpx.Client, process: subprocess.Popen[str], name: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise InfraError(f"the {name} service exited with code {process.returncode} while starting")
        try:
            if client.get("/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.02)
    raise InfraError(f"the {name} service failed its health check for {START_TIMEOUT_S} s")

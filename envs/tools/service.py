"""Running domain services: one subprocess per domain per process, shared by every env.

`acquire(domain_path)` returns the live `Service` of a domain, starting it on first
use: a data directory holding the read-only seed database and an ``episodes/``
directory, a fresh secret handed to ``python -m agentenv.envs.tools.serve`` over its
stdin, a free loopback port, a signed health check. Envs `release` it on close; the
last release stops it after a short linger (so a loop of make/close does not
restart it each time), and an atexit hook stops whatever is left. A dead service
(killed, crashed) is replaced on the next acquire; the envs still holding it see
`InfraError` on their next call.

Every call is bounded as a whole by its ``timeout_s`` (connecting, sending, and the
whole answer: a service that trickles its headers or body is late, not slow) and
signed, and every answer must prove it came from the process this env started
(auth.py) and have the wire shape (`{"result": ...}` on 200, `{"error", "message",
"rule"?}` otherwise); anything else (an impostor on a dead service's port, a garbled
answer, a lost episode file) is `InfraError`, never a crash. The
episode databases are files the env writes; the service only opens them. A snapshot's
database is written only with the seed's schema (`Service.write_episode`).

A subprocess rather than a thread: a route that hangs or crashes cannot take the
trainer down, and "the service died" is a real, testable event (kill the pid).
Left out: several replicas per domain, remote services.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from agentenv import InfraError
from agentenv.envs._sqlite import check_same_schema
from agentenv.envs.tools import auth
from agentenv.envs.tools.app import EPISODE_HEADER, MAX_BODY_BYTES
from agentenv.envs.tools.domain import Domain, load_domain

__all__ = ["KEEPALIVE_EXPIRY_S", "MAX_REPLY_BYTES", "Reply", "Service", "acquire", "db_hash", "release", "shutdown_all"]

START_TIMEOUT_S = 30.0
LINGER_S = 5.0
MAX_REPLY_BYTES = 8 * 1024 * 1024
MAX_CONNECTIONS = 64
"""Calls to one service in flight at once (connections, and the threads that make them)."""
KEEPALIVE_EXPIRY_S = 2.0
"""How long the client keeps an idle connection for reuse. It must be well below the
server's keep-alive (`serve.SERVER_KEEP_ALIVE_S`): were they equal, a busy host could
send a request on a connection the server is closing that instant, and the reset
(RemoteProtocolError) would end an innocent episode as infra. A request is never
retried instead: writes are not idempotent on this wire."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A service answer: ``status`` 200 with ``result``, or an error ``kind`` and ``message``."""

    status: int
    result: Any = None
    kind: str | None = None
    message: str = ""
    rule: str | None = None


class _Ok(BaseModel):
    model_config = ConfigDict(extra="forbid")
    result: Any


class _Error(BaseModel):
    model_config = ConfigDict(extra="forbid")
    error: str
    message: str
    rule: str | None = None
    field: str | None = None


@dataclass(eq=False)
class Service:
    """A live domain service, its secret and the directory of its episode databases."""

    path: str
    domain: Domain
    data_dir: Path
    process: subprocess.Popen[str]
    base_url: str
    client: httpx.Client
    secret: bytes = field(repr=False)
    users: int = 0
    gold_hashes: dict[str, str] = field(default_factory=dict)  # task key -> hash of its gold final state
    _linger: threading.Timer | None = None
    _calls: concurrent.futures.ThreadPoolExecutor = field(default_factory=lambda: _call_pool(), repr=False)
    """Where calls run, so that `send` can give up on one at its deadline (threads made as
    needed and reused: a thread per call would cost more than the call on a busy host)."""

    @property
    def seed_db(self) -> Path:
        """The seed database: read-only, outside `episodes_dir`, so no episode id names it."""
        return self.data_dir / "seed.sqlite"

    @property
    def episodes_dir(self) -> Path:
        return self.data_dir / "episodes"

    def alive(self) -> bool:
        return self.process.poll() is None

    # -- episode databases (files this process writes; the service only opens them) --

    def new_episode(self) -> str:
        """A fresh episode id with a copy of the seed database."""
        episode = uuid.uuid4().hex
        self.reset_episode(episode)
        return episode

    def reset_episode(self, episode: str) -> None:
        with self._files("copy the seed database"):
            tmp = self.db_path(episode).with_suffix(".tmp")
            shutil.copyfile(self.seed_db, tmp)  # a few KB: far cheaper than re-running the seed
            os.replace(tmp, self.db_path(episode))  # atomic: the service never sees half a file

    def write_episode(self, episode: str, data: bytes) -> None:
        """Put a saved database (a snapshot's) in place; `ValueError` when it is not SQLite or its
        schema is not the seed's: a snapshot on disk may have been edited, and a trigger or a view
        put there would run in the service as the routes or the verifier read and write."""
        with self._files("read the seed database"):
            seed = self.seed_db.read_bytes()
        check_same_schema(data, seed, f"the snapshot's {self.domain.name} database")
        with self._files("write an episode database"):
            tmp = self.db_path(episode).with_suffix(".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, self.db_path(episode))

    def read_episode(self, episode: str) -> bytes:
        """The episode database, serialised (for snapshots)."""
        with self._files("read an episode database"):
            db = sqlite3.connect(f"{self.db_path(episode).as_uri()}?mode=ro", uri=True)
            try:
                return db.serialize()
            finally:
                db.close()

    def episode_hash(self, episode: str) -> str:
        """`db_hash` of the episode database over the domain's compared tables."""
        with self._files("hash an episode database"):
            return db_hash(self.db_path(episode), self.domain.compare)

    def drop_episode(self, episode: str) -> None:
        self.db_path(episode).unlink(missing_ok=True)

    def db_path(self, episode: str) -> Path:
        return self.episodes_dir / f"{episode}.sqlite"

    @contextmanager
    def _files(self, what: str) -> Iterator[None]:
        try:
            yield
        except (OSError, sqlite3.Error) as e:  # the data directory went with a stopped service
            raise InfraError(f"could not {what} of the {self.domain.name} service: {type(e).__name__}: {e}") from None

    # -- calls ---------------------------------------------------------------------

    def call(self, episode: str, tool: str, body: bytes, timeout_s: float) -> Reply:
        """POST one tool call. Transport failures, timeouts, unsigned or malformed
        answers and a lost episode database raise `InfraError`. A ``tool`` that is not a
        route is refused unsent: it goes into the URL, and ``/``, ``?``, ``#`` or ``..``
        there would get an unsigned answer from the router, which reads as an impostor."""
        if tool not in self.domain.routes:
            return Reply(404, kind="unknown_tool", message=f"no tool {tool!r}")
        if len(body) > MAX_BODY_BYTES:  # the service's 413 cannot be signed, so refuse here
            return Reply(
                413, kind="too_large", message=f"the request is {len(body)} bytes; the limit is {MAX_BODY_BYTES}"
            )
        status, data = self.send("POST", f"/call/{tool}", episode, body, timeout_s)
        if status == 200:
            return Reply(200, result=self._parse(_Ok, data, status).result)
        error = self._parse(_Error, data, status)
        if error.error == "unknown_episode":
            raise InfraError(f"the {self.domain.name} service lost the episode database: {error.message}")
        return Reply(status, kind=error.error, message=error.message, rule=error.rule)

    def health(self, timeout_s: float = 1.0) -> dict[str, Any]:
        """The service's ``/health`` answer, signed."""
        status, data = self.send("GET", "/health", "", b"", timeout_s)
        try:
            payload = json.loads(data)
        except ValueError:
            payload = None
        if status != 200 or not isinstance(payload, dict):
            raise InfraError(f"the {self.domain.name} service failed its health check ({status})")
        return payload

    def send(self, method: str, path: str, episode: str, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        """One signed request; returns (status, body) once the answer's proof checks out."""
        if self.client.is_closed:  # stopped after a crash while this env still held it
            raise InfraError(f"the {self.domain.name} service was stopped")
        if not self.alive():
            raise InfraError(f"the {self.domain.name} service exited with code {self.process.returncode}")
        nonce = auth.new_nonce()
        headers = {
            auth.NONCE_HEADER: nonce,
            auth.AUTH_HEADER: auth.request_mac(self.secret, nonce, method, path, episode, body),
        }
        if episode:
            headers[EPISODE_HEADER] = episode
        if body:
            headers["content-type"] = "application/json"
        late = InfraError(f"the {self.domain.name} service did not answer {path} within {timeout_s} s")
        deadline = time.monotonic() + timeout_s
        try:
            exchange = self._calls.submit(self._exchange, method, path, body, headers, deadline)
        except RuntimeError:  # its pool shut down: `stop` ran since the check above
            raise InfraError(f"the {self.domain.name} service was stopped") from None
        try:
            status, proof_header, data = exchange.result(timeout_s)
        except (concurrent.futures.TimeoutError, httpx.TimeoutException):
            exchange.cancel()  # one still waiting for a worker never runs
            raise late from None
        except httpx.HTTPError as e:
            raise InfraError(f"the {self.domain.name} service is unreachable: {type(e).__name__}: {e}") from None
        proof = auth.response_mac(self.secret, nonce, status, data)
        if not auth.valid_mac(proof, proof_header):
            raise InfraError(
                f"the answer from {self.base_url} is not signed by the {self.domain.name} service "
                f"({status}): another process holds its port, or it is broken"
            )
        return status, data

    def _exchange(
        self, method: str, path: str, body: bytes, headers: dict[str, str], deadline: float
    ) -> tuple[int, str | None, bytes]:
        """One request and its whole answer (status, proof header, body), on a worker of
        ``_calls`` that `send` waits on until ``deadline``. httpx's timeout bounds each read,
        not the answer: a service that trickled its headers or body, a byte per read, would
        hold the step for hours. The body is checked against the deadline as it arrives, so
        a call `send` gave up on stops reading (and frees its connection) at its next chunk."""
        timeout = deadline - time.monotonic()
        if timeout <= 0:  # it waited for a worker past its deadline: `send` has given up on it
            raise httpx.PoolTimeout("no worker was free before the call's deadline")
        with self.client.stream(method, path, content=body, headers=headers, timeout=timeout) as resp:
            declared = resp.headers.get("content-length", "")
            if len(declared) > 12 or (declared.isdigit() and int(declared) > MAX_REPLY_BYTES):
                raise InfraError(f"the {self.domain.name} service's answer is over {MAX_REPLY_BYTES} bytes")
            chunks, size = [], 0
            for chunk in resp.iter_raw():
                size += len(chunk)
                if size > MAX_REPLY_BYTES:
                    raise InfraError(f"the {self.domain.name} service's answer is over {MAX_REPLY_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout("the answer did not end in time", request=resp.request)
                chunks.append(chunk)
            return resp.status_code, resp.headers.get(auth.PROOF_HEADER), b"".join(chunks)

    def _parse(self, model: type[BaseModel], data: bytes, status: int) -> Any:
        try:
            return model.model_validate_json(data)
        except ValidationError:
            raise InfraError(
                f"the {self.domain.name} service sent a malformed answer ({status}): {data[:200]!r}"
            ) from None

    def stop(self) -> None:
        self._calls.shutdown(wait=False, cancel_futures=True)
        self.client.close()  # a call still reading fails now
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdin:
            try:
                self.process.stdin.close()
            except OSError:  # a broken pipe: the process is gone anyway
                pass
        if self.process.stdout:
            self.process.stdout.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def _call_pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(MAX_CONNECTIONS, thread_name_prefix="agentenv-tools-call")


def db_hash(path: Path, compare: Mapping[str, Sequence[str]]) -> str:
    """SHA-256 of the compared columns of the compared tables, rows in sorted order."""
    db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
    try:
        digest = hashlib.sha256()
        for table in sorted(compare):
            cols = ", ".join(f'"{c}"' for c in compare[table])  # names come from the domain's code, not the agent
            rows = db.execute(f'SELECT {cols} FROM "{table}" ORDER BY {cols}').fetchall()  # noqa: S608
            digest.update(json.dumps([table, rows]).encode())
        return digest.hexdigest()
    finally:
        db.close()


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
    """One env is done with ``service``; the last one stops it after `LINGER_S` (at once
    when it is dead: it can never answer again, so its pipes and directory go now)."""
    with _lock:
        service.users -= 1
        if service.users > 0:
            return
        if _services.get(service.path) is not service or not service.alive():  # replaced, or dead
            if _services.get(service.path) is service:
                del _services[service.path]
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
    data_dir = Path(tempfile.mkdtemp(prefix=f"agentenv-tools-{domain.name}-"))  # 0700: this user only
    try:
        seed = data_dir / "seed.sqlite"
        domain.create_seed(str(seed))
        seed.chmod(0o444)
        (data_dir / "episodes").mkdir(mode=0o700)
    except BaseException:
        shutil.rmtree(data_dir, ignore_errors=True)
        raise
    secret = auth.new_secret()
    # The child imports the domain by name, so it gets this process's import path.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentenv.envs.tools.serve",
            "--domain",
            path,
            "--episodes-dir",
            str(data_dir / "episodes"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,
        text=True,
        env=env,
    )
    try:
        _hand_secret(process, secret)
        port = _read_port(process)
        base_url = f"http://127.0.0.1:{port}"
        # TCP_NODELAY: httpx writes headers and body apart, and Nagle + delayed ACK would add 40 ms a call.
        transport = httpx.HTTPTransport(
            limits=httpx.Limits(
                max_connections=MAX_CONNECTIONS,
                max_keepalive_connections=MAX_CONNECTIONS,
                keepalive_expiry=KEEPALIVE_EXPIRY_S,
            ),
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        )
        client = httpx.Client(base_url=base_url, transport=transport)
        service = Service(path, domain, data_dir, process, base_url, client, secret)
        _wait_healthy(service)
    except BaseException:
        process.kill()
        process.wait()
        shutil.rmtree(data_dir, ignore_errors=True)
        raise
    return service


def _hand_secret(process: subprocess.Popen[str], secret: bytes) -> None:
    """The secret goes over the stdin pipe: argv and the environment are readable by any local process."""
    try:
        process.stdin.write(secret.hex() + "\n")  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]
    except OSError as e:
        raise InfraError(f"the domain service did not start (exit code {process.poll()}): {e}") from None


def _read_port(process: subprocess.Popen[str]) -> int:
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(START_TIMEOUT_S)
    if not line or not line[0]:
        raise InfraError(f"the domain service did not start (exit code {process.poll()}); see its stderr above")
    try:
        return int(json.loads(line[0])["port"])
    except (ValueError, KeyError, TypeError):
        raise InfraError(f"the domain service announced no port: {line[0][:200]!r}") from None


def _wait_healthy(service: Service) -> None:
    name, deadline = service.domain.name, time.monotonic() + START_TIMEOUT_S
    last: InfraError | None = None
    while time.monotonic() < deadline:
        if not service.alive():
            raise InfraError(f"the {name} service exited with code {service.process.returncode} while starting")
        try:
            service.health()
            return
        except InfraError as e:  # not listening yet
            last = e
        time.sleep(0.02)
    raise InfraError(f"the {name} service failed its health check for {START_TIMEOUT_S} s: {last}")

"""The service process: ``python -m agentenv.envs.tools.serve --domain MODULE:ATTR --episodes-dir DIR``.

Reads the per-start secret (hex, one line) from stdin, binds a free loopback port
(the kernel picks it, so two processes never race for one), prints ``{"port": n}``
on stdout, and serves the domain's app with uvicorn. The secret comes over the
pipe because argv and the environment are readable by every local process. It
exits when its stdin closes, so a parent that dies never leaves it behind.
Kept apart from app.py so that ``-m`` runs a module no package import has loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
from pathlib import Path

from agentenv.envs.tools import auth
from agentenv.envs.tools.app import build_app
from agentenv.envs.tools.domain import load_domain

SERVER_KEEP_ALIVE_S = 30
"""How long an idle connection stays open (uvicorn's default is 5 s). Well above the
client's `service.KEEPALIVE_EXPIRY_S`, so the client always drops an idle connection
first and never sends on one the server is closing."""


def _exit_when_parent_dies() -> None:
    sys.stdin.read()  # returns at EOF: the parent closed the pipe or died
    os._exit(0)


def _read_secret() -> bytes:
    line = sys.stdin.readline().strip()
    try:
        secret = bytes.fromhex(line)
    except ValueError:
        secret = b""
    if len(secret) != auth.SECRET_BYTES:
        sys.exit(f"expected a {auth.SECRET_BYTES}-byte hex secret on the first line of stdin")
    return secret


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="Serve one tools-env domain on a free loopback port.")
    parser.add_argument("--domain", required=True, help="module:attribute of the Domain")
    parser.add_argument("--episodes-dir", required=True, type=Path, help="where the env puts episode databases")
    args = parser.parse_args(argv)
    secret = _read_secret()
    app = build_app(load_domain(args.domain), args.episodes_dir, secret)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it: no Nagle stalls
    sock.bind(("127.0.0.1", 0))  # the kernel picks a free port: no race with other processes
    threading.Thread(target=_exit_when_parent_dies, daemon=True).start()
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=SERVER_KEEP_ALIVE_S,
        http="h11",  # the same parser whatever else is installed (vllm pulls in httptools)
        loop="asyncio",
    )
    server = uvicorn.Server(config)
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()

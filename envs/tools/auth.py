"""Mutual authentication between the env and its domain service: one secret per start.

The env process draws a fresh random secret each time it starts a service and hands
it over the child's stdin pipe (never argv or the environment, which any local
process can read from /proc). Every request carries a random nonce and an HMAC of
(nonce, method, path, episode, body); the service refuses anything else with 401,
so no other local process can drive it. Every answer to an authentic request
carries an HMAC of (nonce, status, body): the env checks it, so a process that
rebinds a dead service's port cannot answer in its name (its replies are
`InfraError`, never data).

Protects against: other local processes connecting to the service's loopback port;
an impostor bound to the port after the service died; replies forged or altered
without the secret. Does not protect against: a process that can read the env's
or the service's memory (ptrace, root), or one that can sniff loopback traffic and
replay a captured request (the service keeps no record of used nonces); no TLS.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

__all__ = [
    "AUTH_HEADER",
    "NONCE_HEADER",
    "PROOF_HEADER",
    "SECRET_BYTES",
    "new_nonce",
    "new_secret",
    "request_mac",
    "response_mac",
    "valid_mac",
    "valid_nonce",
]

NONCE_HEADER = "X-Nonce"
AUTH_HEADER = "X-Auth"
PROOF_HEADER = "X-Proof"
SECRET_BYTES = 32
_NONCE_RE = re.compile(r"^[0-9a-f]{32}$")


def new_secret() -> bytes:
    return secrets.token_bytes(SECRET_BYTES)


def new_nonce() -> str:
    return secrets.token_hex(16)


def valid_nonce(nonce: str) -> bool:
    return _NONCE_RE.match(nonce) is not None


def request_mac(secret: bytes, nonce: str, method: str, path: str, episode: str, body: bytes) -> str:
    """What the env sends in `AUTH_HEADER`. The body goes last: the other parts hold no newline."""
    head = "\n".join(("request", nonce, method, path, episode)).encode()
    return hmac.new(secret, head + b"\n" + body, hashlib.sha256).hexdigest()


def response_mac(secret: bytes, nonce: str, status: int, body: bytes) -> str:
    """What the service sends in `PROOF_HEADER`, answering the request that carried ``nonce``."""
    head = "\n".join(("response", nonce, str(status))).encode()
    return hmac.new(secret, head + b"\n" + body, hashlib.sha256).hexdigest()


def valid_mac(expected: str, given: str | None) -> bool:
    """Constant-time comparison; a missing header is invalid."""
    return given is not None and hmac.compare_digest(expected.encode(), given.encode("ascii", "replace"))

"""`ServerConfig`: which MCP server an env talks to, and how (validated at the boundary).

Three shapes, one model:

- ``stdio``: the env starts ``command`` and speaks MCP over its stdin/stdout;
- ``http`` with a ``command``: the env starts ``command`` (``{port}`` in it is
  replaced by a free loopback port, as is ``{port}`` in ``url``) and connects to
  ``url`` by streamable HTTP once the port accepts connections;
- ``http`` without a command: the env connects to a server someone else runs at
  ``url`` (it neither starts nor restarts it; a lost one is an infrastructure failure).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = ["ServerConfig", "as_config"]


class ServerConfig(BaseModel):
    """An MCP server: how to start it (or where it runs) and how long to wait for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    transport: Literal["stdio", "http"] = "stdio"
    """``stdio`` (the env runs ``command``) or ``http`` (streamable HTTP at ``url``)."""
    command: list[str] | None = Field(default=None, min_length=1)
    """The server's command line (argv, no shell). ``{port}`` is replaced for ``http``."""
    url: str | None = None
    """``http`` only: the MCP endpoint, e.g. ``http://127.0.0.1:{port}/mcp``."""
    env: dict[str, str] | None = None
    """Environment variables for the server process, over a minimal inherited set (PATH, HOME...)."""
    cwd: str | None = None
    """The server process's working directory."""
    start_timeout_s: float = Field(default=30.0, gt=0)
    """Time for the server to start and finish the MCP handshake; past it, `InfraError`."""
    call_timeout_s: float = Field(default=10.0, gt=0)
    """Time for one request (a tool call, a resource read), whatever the server sends or
    does not; past it, `InfraError`."""
    max_message_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """The largest message the server may send (a line over stdio, an answer over HTTP);
    a larger one is `InfraError` (over stdio the server is stopped)."""

    @model_validator(mode="after")
    def _shape(self) -> ServerConfig:
        if self.transport == "stdio":
            if self.command is None:
                raise ValueError("a stdio server needs a command (its argv, e.g. ['python', 'server.py'])")
            if self.url is not None:
                raise ValueError("a stdio server takes no url; use transport='http' to connect by URL")
        else:
            if self.url is None:
                raise ValueError("an http server needs a url (e.g. 'http://127.0.0.1:{port}/mcp')")
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
            if self.command is None and "{port}" in self.url:
                raise ValueError("'{port}' in the url is filled in only when the env starts the server (a command)")
        return self

    @property
    def owned(self) -> bool:
        """Whether the env starts (and restarts) the server process."""
        return self.command is not None

    def describe(self) -> str:
        """One line naming the server, for error messages."""
        if self.command is not None:
            return " ".join(self.command)[:200]
        return str(self.url)

    @classmethod
    def python(cls, script: str | Path, *args: str, **kwargs: Any) -> ServerConfig:
        """A server that is a Python script, run with this interpreter."""
        return cls(command=[sys.executable, str(script), *args], **kwargs)


def as_config(value: ServerConfig | Mapping[str, Any]) -> ServerConfig:
    """A `ServerConfig` from itself or its dict, with one clear message when invalid."""
    if isinstance(value, ServerConfig):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"server must be a ServerConfig or a dict, got {type(value).__name__}")
    try:
        return ServerConfig.model_validate(dict(value))
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(server)"
        raise ValueError(f"invalid MCP server config, field {where!r}: {err['msg']}") from None

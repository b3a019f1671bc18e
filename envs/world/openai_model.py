"""`OpenAIWorldModel`: a world model served by any OpenAI-compatible chat endpoint.

The transport is `agentenv.OpenAIPolicy` (httpx, pooled connections, retries with
backoff on timeouts, dropped connections, 429 and 5xx, ``Retry-After``, a size cap
and a deadline on every response); this class adds the world model's part: the
prompt (`agentenv.envs.world.prompt`), JSON output, and structured output.

Structured output: ``structured="auto"`` (the default) sends ``response_format``
with the reply's JSON Schema (``json_schema``); a server that refuses it (HTTP 400
or 422) is asked again with ``{"type": "json_object"}``, then with no
``response_format``, and the first mode that gets an answer is kept for later calls.
A request every mode gets refused (a prompt past the context window, say) changes
no mode: one long request cannot switch structured output off for every episode.
Whatever the server promises, the reply is validated like any other.

A reply that never comes (the transport gave up) raises `WorldModelError` with its
kind: timeout, connection, rate_limited, server_error, refused, bad_response; and
too_long for a prompt past the server's context (its HTTP 400, 413 or 422 says so)
or a reply cut at ``max_tokens``: when the agent's call and the state its calls
built are what made the request large, the emulator shows it to the agent as a tool
error (see `agentenv.envs.world.emulator`); and content_policy for an HTTP 400 that
says the provider's content filter refused what the request holds (Azure OpenAI's
``content_filter``, OpenAI's ``invalid_prompt``): the text the agent wrote did that,
so it is the agent's tool error too, asked in no other mode. Other 4xx (401, 403,
404, a bad request) are ``refused``: infra.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping
from typing import Any, Literal

from agentenv import Conversation, Generation, PolicyFailure
from agentenv.envs.world.models import WorldModelError
from agentenv.envs.world.prompt import REPLY_SCHEMA, WorldRequest, messages
from agentenv.policies.openai import OpenAIPolicy, context_overflow

__all__ = ["OpenAIWorldModel"]

Structured = Literal["auto", "json_schema", "json_object", "none"]
_MODES: tuple[Structured, ...] = ("json_schema", "json_object", "none")
_FORMATS: dict[str, dict[str, Any] | None] = {
    "json_schema": {
        "type": "json_schema",
        "json_schema": {"name": "world_step", "schema": REPLY_SCHEMA, "strict": False},
    },
    "json_object": {"type": "json_object"},
    "none": None,
}
_HTTP = re.compile(r"HTTP (\d{3}) from")
_CONTENT_POLICY = re.compile(
    r"content[_ ]filter|content[_ ]policy|content management policy|invalid_prompt|flagged|usage polic"
    r"|ResponsibleAIPolicyViolation",
    re.IGNORECASE,
)
"""What a provider's refusal of the request's content says (Azure OpenAI, OpenAI, vLLM guards)."""


class OpenAIWorldModel:
    """Emulates a world's tools with a chat model behind an OpenAI-compatible endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 2048,
        seed: int | None = 0,
        structured: Structured = "auto",
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        concurrency: int = 64,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """
        Args:
            base_url: The API root, e.g. ``"http://127.0.0.1:8000/v1"``.
            model: The model name the server knows.
            api_key: Sent as ``Authorization: Bearer``; never read from the environment.
            temperature: 0 (the default) for the most repeatable answers.
            max_tokens: Most tokens per reply.
            seed: Sent with every request (servers that honour it answer repeatably).
            structured: ``auto``, ``json_schema``, ``json_object`` or ``none`` (see the module doc).
            timeout_s: Limit on one attempt (connect, each read, the whole response).
            max_retries: Further attempts after a timeout, a dropped connection, 429 or 5xx.
            backoff_s: Wait before the first retry; doubles each retry.
            concurrency: Requests in flight at once (episodes stepped concurrently).
            extra_body: Merged into every request body (``top_p``, ``chat_template_kwargs``...).
            headers: Extra HTTP headers.
        """
        if structured not in ("auto", *_MODES):
            raise ValueError(f"structured must be 'auto', 'json_schema', 'json_object' or 'none', got {structured!r}")
        self.model = model
        self.max_tokens = max_tokens
        self.structured: Structured = structured
        self._mode: Structured = "json_schema" if structured == "auto" else structured
        self._extra = dict(extra_body or {})
        if "response_format" in self._extra:
            raise ValueError("extra_body may not set response_format: use structured=...")
        self._settings = {
            "base_url": base_url,
            "model": model,
            "api_key": api_key,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "seed": seed,
            "send_tools": False,
            "timeout_s": timeout_s,
            "max_retries": max_retries,
            "backoff_s": backoff_s,
            "concurrency": concurrency,
            "headers": headers,
        }
        self._policies: dict[str, OpenAIPolicy] = {}
        self._lock = threading.Lock()
        self._policy(self._mode)  # validates the settings now
        sampling = {"temperature": temperature, "max_tokens": max_tokens, "seed": seed, "extra": self._extra}
        digest = hashlib.sha256(json.dumps(sampling, sort_keys=True, default=str).encode()).hexdigest()[:12]
        self.model_id = f"openai:{model}:{digest}"

    def propose(self, request: WorldRequest) -> str:
        conversation = Conversation(id=0, messages=messages(request))  # type: ignore[arg-type]
        start = mode = self._mode
        while True:
            output = self._policy(mode).act([conversation])[0]
            if isinstance(output, Generation):
                if mode != start:
                    with self._lock:  # a simpler response_format answered where `start` was refused: keep it
                        if self._mode == start:
                            self._mode = mode
                if output.finish_reason == "length":
                    message = f"{self.model}: the reply was cut at max_tokens={self.max_tokens}"
                    raise WorldModelError(message, kind="cut")
                content = output.action.get("content") if isinstance(output.action, dict) else output.action
                return content if isinstance(content, str) else ""
            error = output.error if isinstance(output, PolicyFailure) else f"unexpected output {output!r:.100}"
            status = _status(error)
            kind = _kind(error, status)
            if self.structured == "auto" and status in (400, 422) and mode != "none" and kind != "content_policy":
                mode = _MODES[_MODES.index(mode) + 1]  # perhaps the server refuses this response_format
                continue
            raise WorldModelError(f"{self.model}: {error}", kind=kind)

    @property
    def reply_tokens(self) -> int:
        """Most tokens per reply (``max_tokens``)."""
        return self.max_tokens

    @property
    def mode(self) -> Structured:
        """The structured-output mode in use (``auto`` settles on one after the first refusal)."""
        return self._mode

    def close(self) -> None:
        for policy in self._policies.values():
            policy.close()

    def __repr__(self) -> str:
        return f"OpenAIWorldModel(model={self.model!r}, url={self._settings['base_url']!r}, mode={self._mode!r})"

    def _policy(self, mode: str) -> OpenAIPolicy:
        with self._lock:
            policy = self._policies.get(mode)
            if policy is None:
                extra = dict(self._extra)
                if _FORMATS[mode] is not None:
                    extra["response_format"] = _FORMATS[mode]
                policy = self._policies[mode] = OpenAIPolicy(**self._settings, extra_body=extra)  # type: ignore[arg-type]
            return policy


def _status(error: str) -> int | None:
    match = _HTTP.search(error)
    return int(match.group(1)) if match else None


def _kind(error: str, status: int | None) -> str:
    if status == 429:
        return "rate_limited"
    if status is not None and context_overflow(status, error):
        return "too_long"
    if status == 400 and _CONTENT_POLICY.search(error):
        return "content_policy"
    if status is not None:
        return "server_error" if status >= 500 else "refused"
    if "timed out" in error:
        return "timeout"
    if "Error:" in error and ("gave up after" in error or "Protocol" in error or "Connect" in error):
        return "connection"
    return "bad_response"

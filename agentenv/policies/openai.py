"""`OpenAIPolicy`: a policy served by any OpenAI-compatible chat completions endpoint.

One ``POST {base_url}/chat/completions`` per conversation, the batch sent
concurrently over one pooled `httpx.Client` (vLLM, SGLang, Ollama and hosted APIs
all speak this protocol). Timeouts, connection errors, HTTP 429 and 5xx are
retried with exponential backoff; whatever still fails, and any malformed
response, comes back as a `PolicyFailure` for that conversation alone, so the
rollout engine ends that one episode as ``infra`` and the batch carries on. One
refusal is the policy's own: a conversation that its turns grew past the model's
context window (HTTP 400 "maximum context length") gets `Refused`, a format error
whatever the env, as the trainer's policy does at ``max_context_tokens`` (an empty
action could be a valid move or answer somewhere); only a first turn that does not
fit (the env's prompt alone) is ``infra``.

The env records every tool result as a ``tool`` message, even when the model
wrote its call as ``<tool_call>`` text; strict servers refuse a ``tool`` message
that answers no ``tool_calls`` id, so such messages are sent as ``user``
messages instead (see `_api_messages`).

Trainable rollouts (``return_tokens=True``): the request also asks for the log-prob of
each generated token (``logprobs``) and for the token ids of the prompt and the reply
(``return_token_ids``, vLLM's extension), and each `Generation` keeps them, so a
trainer can learn from the episode off-policy (`agentenv.trainers.GRPOTrainer.update`).
The server renders the whole conversation every turn; where the ids it rendered extend
the ids the episode holds (its earlier prompts and replies), a turn's ``prompt_ids``
are only what was added (the observation), one sequence across turns, as the
trainer's own policy builds it. Where they do not (a template that rewrites earlier
turns, such as one dropping earlier reasoning, or a reply whose text tokenises
differently than it was sampled), the turn's ``prompt_ids`` are the whole prompt and
``full_prompt`` is set: the training sequence starts again there. For log-probs of the
distribution the tokens were drawn from (temperature and top-p applied), start vLLM
with ``--logprobs-mode processed_logprobs``; its default gives them before both.

Left out on purpose: streaming, ``n > 1`` sampling, the legacy ``/completions``
endpoint, compressed responses (asked for and accepted only as sent: a chat
completion is small), and reading credentials
from environment variables (pass ``api_key`` explicitly).
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, Field, ValidationError

from agentenv.core import _admit, _safejson
from agentenv.core._admit import Refused
from agentenv.core._deadline import run_within
from agentenv.core.policy import Conversation, Generation, PolicyFailure, PolicyOutput, TokenId

__all__ = ["OpenAIPolicy"]

T = TypeVar("T")

MAX_RESPONSE_BYTES = 32 * 2**20
"""A longer response body is refused: no chat completion is this big, a broken server might be."""

_RESERVED_BODY_KEYS = frozenset({"model", "messages", "tools"})
_MESSAGE_KEYS = {
    "system": ("role", "content", "name"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "name", "tool_calls"),
    "tool": ("role", "content", "tool_call_id"),
}


# -- the response, validated at the boundary ------------------------------------
# Extra keys are ignored, not forbidden: every server adds its own (vLLM's
# ``reasoning_content`` and ``stop_reason``, usage details); the fields read here
# must be present and well typed.


class _Function(BaseModel):
    name: str
    arguments: str | dict[str, Any] = "{}"


class _ToolCall(BaseModel):
    id: str | None = None
    function: _Function


class _Message(BaseModel):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _TokenLogprob(BaseModel):
    logprob: float


class _Logprobs(BaseModel):
    content: list[_TokenLogprob] | None = None


class _Choice(BaseModel):
    message: _Message
    finish_reason: str | None = None
    token_ids: list[TokenId] | None = None
    logprobs: _Logprobs | None = None


class _Completion(BaseModel):
    choices: list[_Choice] = Field(min_length=1)
    prompt_token_ids: list[TokenId] | None = None


class _Failed(Exception):
    """One conversation failed for good; the message becomes its `PolicyFailure`."""


class _ContextFull(_Failed):
    """The server refused the conversation as longer than the model's context window."""


_CONTEXT_FULL = re.compile(
    r"context (length|window|size)|maximum context|too many tokens|too long|prompt is too|max_new_tokens", re.IGNORECASE
)


def context_overflow(status: int, message: str) -> bool:
    """Whether an HTTP error from an OpenAI-compatible server says the request is past
    the model's context window (vLLM, SGLang and OpenAI answer 400 and say so; some
    proxies 413 or 422)."""
    return status in (400, 413, 422) and _CONTEXT_FULL.search(message) is not None


class OpenAIPolicy:
    """A `Policy` that asks an OpenAI-compatible chat completions endpoint for each action.

    Returns `Generation`s whose action is the assistant message
    (``{"role": "assistant", "content": ..., "tool_calls": [...]}``, ``tool_calls``
    only when the model made structured calls), so the env's parser reads both
    structured calls and ``<tool_call>`` text. Close it (or use ``with``) to
    release its connections.

        with OpenAIPolicy("http://127.0.0.1:8000/v1", "Qwen/Qwen3-4B", temperature=1.0) as policy:
            trajectories = agentenv.rollout("arithmetic-v0", policy, n=64)
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        send_tools: bool = True,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        concurrency: int = 16,
        headers: Mapping[str, str] | None = None,
        return_tokens: bool = False,
    ) -> None:
        """Check the settings and open the connection pool; nothing is sent until `act`.

        Args:
            base_url: The API root, e.g. ``"http://127.0.0.1:8000/v1"``.
            model: The model name the server knows.
            api_key: Sent as ``Authorization: Bearer``. Never read from the environment.
            temperature: Sampling temperature; None leaves the server's default.
            top_p: Nucleus sampling; None leaves the server's default.
            max_tokens: Most tokens per reply; None leaves the server's default.
            stop: Stop string(s).
            seed: Each conversation is sent ``seed + conversation.id`` (the episode's
                index in a rollout), so the G episodes of one task in a GRPO group do
                not all sample the same reply.
            extra_body: Merged into every request body last (``top_k``, ``tool_choice``,
                ``chat_template_kwargs``...); it may override the sampling fields.
            send_tools: Send the env's tool schemas as ``tools``. False for servers or
                models without tool calling: the env's system prompt describes the
                tools as text either way.
            timeout_s: Limit on one attempt: on connecting, on each read, and on the
                whole attempt, from the request to the response's last byte.
            max_retries: Further attempts after a timeout, connection error, 429 or 5xx.
            backoff_s: Wait before the first retry; doubles each retry, with jitter.
            max_backoff_s: Cap on any wait, a server's ``Retry-After`` included.
            concurrency: Requests in flight at once.
            headers: Extra HTTP headers for every request.
            return_tokens: Ask for the token ids of each prompt and reply and the
                log-probs of the reply's tokens, and keep them in each `Generation`
                (trainable rollouts; see the module's docstring). A reply without them
                fails that conversation (``infra``): the server does not give them.
        """
        self.url = _endpoint(base_url)
        self.model = _require(model, isinstance(model, str) and bool(model), "model", "a non-empty string")
        self.timeout_s = _require(timeout_s, _number(timeout_s) and timeout_s > 0, "timeout_s", "a number > 0")
        self.max_retries = _require(max_retries, _int(max_retries) and max_retries >= 0, "max_retries", "an int >= 0")
        self.backoff_s = _require(backoff_s, _number(backoff_s) and backoff_s >= 0, "backoff_s", "a number >= 0")
        self.max_backoff_s = _require(
            max_backoff_s, _number(max_backoff_s) and max_backoff_s >= 0, "max_backoff_s", "a number >= 0"
        )
        self.concurrency = _require(concurrency, _int(concurrency) and concurrency >= 1, "concurrency", "an int >= 1")
        self.seed = _require(seed, seed is None or _int(seed), "seed", "an int or None")
        self.send_tools = send_tools
        self.return_tokens = return_tokens
        self.sampling = _sampling(temperature, top_p, max_tokens, stop)
        self.extra_body = dict(extra_body or {})
        clash = sorted(_RESERVED_BODY_KEYS & set(self.extra_body))
        if clash:
            raise ValueError(f"extra_body may not set {clash}: the policy fills model, messages and tools itself")
        self._has_api_key = api_key is not None
        all_headers = {"Authorization": f"Bearer {api_key}"} if api_key is not None else {}
        all_headers.update(headers or {})
        self._client = httpx.Client(
            headers=all_headers,
            timeout=httpx.Timeout(self.timeout_s),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        self._closed = False
        # A private generator: jitter must not consume (or depend on) the global
        # random state a user seeds for reproducibility.
        self._rng = random.Random()
        self._episodes: dict[int, list[int]] = {}
        """With return_tokens: the ids each live conversation holds (its last prompt and reply)."""
        self._sleep: Callable[[float], None] = time.sleep  # tests record the waits instead

    # -- the Policy protocol ----------------------------------------------------

    def act(self, conversations: Sequence[Conversation]) -> list[PolicyOutput]:
        """One reply per conversation, in order; a failed one is a `PolicyFailure`."""
        if self._closed:
            raise RuntimeError("OpenAIPolicy.act() called after close(); make a new policy")
        if len(conversations) <= 1:
            return [self._complete(conv) for conv in conversations]
        workers = min(self.concurrency, len(conversations))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agentenv-openai") as pool:
            return list(pool.map(self._complete, conversations))

    def close(self) -> None:
        """Close the connection pool. Idempotent."""
        self._closed = True
        self._client.close()

    def __enter__(self) -> OpenAIPolicy:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        key = "<set>" if self._has_api_key else None
        return (
            f"OpenAIPolicy(url={self.url!r}, model={self.model!r}, api_key={key}, "
            f"concurrency={self.concurrency}, timeout_s={self.timeout_s}, max_retries={self.max_retries})"
        )

    # -- one conversation ---------------------------------------------------------

    def _complete(self, conv: Conversation) -> PolicyOutput:
        try:
            body = json.dumps(self.request_body(conv), ensure_ascii=False).encode()
            generation = _generation(self._post_with_retries(body), conv, tokens=self.return_tokens)
            if self.return_tokens:
                self._continue_episode(conv, generation)
            return generation
        except _ContextFull as e:
            if conv.turn == 0:  # nothing the policy wrote yet: the env's prompt does not fit
                return PolicyFailure(error=f"{e} (the first turn: the prompt alone is past the model's context)")
            # The conversation outgrew the context through the episode's own turns: the
            # policy's failure, a turn it declines (never an empty action, which an env
            # may take as a move or an answer).
            return Refused("", f"no room left in the model's context for a reply ({e})")
        except _Failed as e:
            return PolicyFailure(error=str(e))
        except Exception as e:  # noqa: BLE001 - one bad conversation is data, never the batch's crash
            return PolicyFailure(error=f"{type(e).__name__}: {e}")

    def _continue_episode(self, conv: Conversation, generation: Generation) -> None:
        """Cut ``generation``'s whole prompt to what the episode's ids do not hold yet
        (or mark it ``full_prompt`` where they are not its prefix) and record the ids."""
        prompt = generation.prompt_ids or []
        held = self._episodes.get(conv.id) if conv.turn > 0 else None
        if held is not None and len(held) <= len(prompt) and prompt[: len(held)] == held:
            generation.prompt_ids = prompt[len(held) :]
        elif conv.turn > 0:
            generation.full_prompt = True
        self._episodes[conv.id] = [*prompt, *generation.token_ids]

    def request_body(self, conv: Conversation) -> dict[str, Any]:
        """The JSON body sent for ``conv``."""
        body: dict[str, Any] = {"model": self.model, "messages": _api_messages(conv.messages)}
        if self.send_tools and conv.tools:
            body["tools"] = conv.tools
        if self.return_tokens:
            body.update(logprobs=True, return_token_ids=True)
        body.update(self.sampling)
        if self.seed is not None:
            body["seed"] = self.seed + conv.id
        body.update(self.extra_body)
        return body

    def _post_with_retries(self, body: bytes) -> bytes:
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            retry_after_s: float | None = None
            try:
                status, headers, content = self._post(body)
            except httpx.TimeoutException as e:
                error = f"timed out after {self.timeout_s} s ({type(e).__name__})"
            except httpx.TransportError as e:  # refused, reset or dropped connections
                error = f"{type(e).__name__}: {e}"
            else:
                if 200 <= status < 300:
                    return content
                error = f"HTTP {status} from {self.url}: {_snippet(content)}"
                if status != 429 and status < 500:  # the request itself is wrong: asking again cannot help
                    raise (_ContextFull if context_overflow(status, error) else _Failed)(error)
                retry_after_s = _retry_after_s(headers.get("retry-after"))
            if attempt + 1 < attempts:
                self._sleep(self._delay_s(attempt, retry_after_s))
        raise _Failed(f"gave up after {attempts} attempt{'s' * (attempts > 1)}: {error}")

    def _post(self, body: bytes) -> tuple[int, httpx.Headers, bytes]:
        """One attempt, bounded by ``timeout_s`` as a whole. httpx's timeout bounds each
        network read, not the response: a server that trickles its status line and
        headers, a byte per read, would hold the conversation for hours. So the attempt
        runs in a worker thread the caller waits on; one still reading past the deadline
        is left to end on its own (its next read past it, a read timeout, or `close`)."""
        deadline = time.monotonic() + self.timeout_s
        done = run_within(self.timeout_s, lambda: self._read(body, deadline), name="agentenv-openai-request")
        if done is None:
            raise httpx.ReadTimeout("no complete response in time")
        return done.result()

    def _read(self, body: bytes, deadline: float) -> tuple[int, httpx.Headers, bytes]:
        # The body is checked against the deadline as it arrives too, so an attempt the
        # caller gave up on stops reading (and frees its connection) at its next chunk.
        # The body as sent: httpx would inflate a compressed one chunk by chunk before
        # MAX_RESPONSE_BYTES counts it, and stacked gzip turns 1 KiB into gigabytes.
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        with self._client.stream("POST", self.url, content=body, headers=headers) as response:
            encoding = response.headers.get("content-encoding", "identity")
            if encoding.strip().lower() not in ("", "identity"):
                raise _Failed(f"response from {self.url} has Content-Encoding {encoding!r}; asked for 'identity'")
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise _Failed(f"response from {self.url} is over {MAX_RESPONSE_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout("response not complete in time", request=response.request)
                chunks.append(chunk)
            return response.status_code, response.headers, b"".join(chunks)

    def _delay_s(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, self.max_backoff_s)
        # Jitter spreads out the retries of a batch that failed all at once.
        return min(self.backoff_s * 2**attempt, self.max_backoff_s) * self._rng.uniform(0.5, 1.0)


# -- requests ---------------------------------------------------------------------


def _api_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as strict servers accept it; ``messages`` is not modified.

    Keys the API does not know are dropped. A ``tool`` message is kept only when
    it answers a ``tool_calls`` id of the assistant message before it; otherwise
    (the model wrote its call as text) it becomes a ``user`` message. Likewise an
    assistant's structured call that no ``tool`` message answers, or that has no
    id, is moved into its text, since servers refuse unanswered calls; and so is
    one whose arguments are not a JSON object, since servers that parse them for
    the chat template (vLLM) refuse the whole conversation, which would make a
    malformed call of the model's an infra failure instead of its format error.
    """
    out: list[dict[str, Any]] = []
    open_ids: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            sent = _assistant_message(message, _answered_ids(messages, i))
            open_ids = {call["id"] for call in sent.get("tool_calls", [])}
            out.append(sent)
        elif role == "tool" and message.get("tool_call_id") in open_ids:
            out.append(_known_keys(message, "tool"))
        elif role == "tool":
            name = message.get("name")
            label = f"[tool result: {name}]" if name else "[tool result]"
            out.append({"role": "user", "content": f"{label}\n{_text(message.get('content'))}"})
        else:
            out.append(_known_keys(message, role))
    return out


def _answered_ids(messages: Sequence[Mapping[str, Any]], index: int) -> set[str]:
    """The ``tool_call_id``s answered between message ``index`` and the next assistant message."""
    ids: set[str] = set()
    for message in messages[index + 1 :]:
        if message.get("role") == "assistant":
            break
        if message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
            ids.add(message["tool_call_id"])
    return ids


def _assistant_message(message: Mapping[str, Any], answered: set[str]) -> dict[str, Any]:
    sent = _known_keys(message, "assistant")
    calls = [_api_tool_call(call) for call in sent.pop("tool_calls", None) or [] if isinstance(call, Mapping)]
    kept = [call for call in calls if call["id"] in answered and _json_object(call["function"]["arguments"])]
    moved = [call for call in calls if call not in kept]
    if kept:
        sent["tool_calls"] = kept
    if moved:
        text = "\n".join(
            "<tool_call>"
            + json.dumps({"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])})
            + "</tool_call>"
            for c in moved
        )
        sent["content"] = f"{sent['content']}\n{text}" if sent["content"] else text
    return sent


def _api_tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    raw = call.get("function")
    function: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):  # the API wants the arguments as a JSON string
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": call.get("id") if isinstance(call.get("id"), str) else None,
        "type": "function",
        "function": {"name": str(function.get("name", "")), "arguments": arguments},
    }


def _arguments(arguments: str) -> Any:
    try:
        return _safejson.loads(arguments, max_depth=_admit.MAX_MESSAGE_DEPTH)
    except _safejson.UnsafeJSON:
        return arguments


def _json_object(arguments: str) -> bool:
    return isinstance(_arguments(arguments), dict)


def _known_keys(message: Mapping[str, Any], role: Any) -> dict[str, Any]:
    keys = _MESSAGE_KEYS.get(role, ("role", "content", "name"))
    sent = {key: message[key] for key in keys if key in message}
    sent["content"] = _text(message.get("content"))
    return sent


def _text(content: Any) -> Any:
    # None means "no text"; a list of content parts is the API's own multimodal shape.
    return "" if content is None else content


# -- responses --------------------------------------------------------------------


def _generation(content: bytes, conv: Conversation, *, tokens: bool = False) -> Generation:
    completion = _completion(content)
    choice = completion.choices[0]
    action: dict[str, Any] = {"role": "assistant", "content": choice.message.content or ""}
    if choice.message.tool_calls:
        action["tool_calls"] = [
            {
                # Some servers omit ids; the env answers each call by its id, so make one.
                "id": call.id or f"call_{conv.id}_{conv.turn}_{i}",
                "type": "function",
                "function": {
                    "name": call.function.name,
                    "arguments": call.function.arguments
                    if isinstance(call.function.arguments, str)
                    else json.dumps(call.function.arguments, ensure_ascii=False),
                },
            }
            for i, call in enumerate(choice.message.tool_calls)
        ]
    if not tokens:
        return Generation(action=action, finish_reason=choice.finish_reason)
    ids, steps = choice.token_ids, choice.logprobs.content if choice.logprobs is not None else None
    if completion.prompt_token_ids is None or ids is None or steps is None:
        raise _Failed(
            "the server gave no token ids or log-probs (return_tokens=True asks for return_token_ids and "
            "logprobs: vLLM's OpenAI server gives both)"
        )
    if len(steps) != len(ids) or not ids:
        raise _Failed(f"the server gave {len(steps)} log-probs for {len(ids)} generated tokens")
    logprobs = [step.logprob for step in steps]
    if not all(math.isfinite(lp) and lp <= 0 for lp in logprobs):
        raise _Failed("the server gave a log-prob that is not a finite number <= 0")
    return Generation(
        action=action,
        prompt_ids=completion.prompt_token_ids,
        token_ids=ids,
        logprobs=logprobs,
        finish_reason=choice.finish_reason,
    )


def _completion(content: bytes) -> _Completion:
    try:
        data = json.loads(content)
    except (ValueError, RecursionError) as e:  # bad JSON or bytes, a number past the digit limit, deep nesting
        raise _Failed(f"server returned invalid JSON: {e}; body: {_snippet(content)}") from None
    if not isinstance(data, dict):
        raise _Failed(f"server returned JSON {type(data).__name__}, expected an object; body: {_snippet(content)}")
    if "choices" not in data and isinstance(data.get("error"), (dict, str)):
        error = data["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise _Failed(f"server returned an error: {message}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) or "message" not in choices[0]:
        raise _Failed(f"response lacks choices[0].message; body: {_snippet(content)}")
    try:
        return _Completion.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise _Failed(f"invalid response: {where}: {err['msg']}; body: {_snippet(content)}") from None


def _retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date, counted
    from ``now``, default the current time); None if absent or unreadable."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _snippet(content: bytes, limit: int = 300) -> str:
    text = content.decode("utf-8", errors="replace").strip()
    return repr(text if len(text) <= limit else text[:limit] + "…")


# -- construction -----------------------------------------------------------------


def _endpoint(base_url: str) -> str:
    if not isinstance(base_url, str):
        raise TypeError(f"base_url must be a string, got {type(base_url).__name__}")
    root = base_url.rstrip("/")
    if root.endswith("/chat/completions"):
        raise ValueError(
            f"base_url is the API root, not the endpoint: use {root[: -len('/chat/completions')]!r}, got {base_url!r}"
        )
    try:
        url = httpx.URL(root)
    except httpx.InvalidURL as e:
        raise ValueError(f"base_url is not a valid URL ({e}): {base_url!r}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"base_url must be an http(s) URL like 'http://127.0.0.1:8000/v1', got {base_url!r}")
    return f"{root}/chat/completions"


def _sampling(
    temperature: float | None, top_p: float | None, max_tokens: int | None, stop: str | Sequence[str] | None
) -> dict[str, Any]:
    _require(temperature, temperature is None or (_number(temperature) and temperature >= 0), "temperature", ">= 0")
    _require(top_p, top_p is None or (_number(top_p) and 0 < top_p <= 1), "top_p", "in (0, 1]")
    _require(max_tokens, max_tokens is None or (_int(max_tokens) and max_tokens >= 1), "max_tokens", "an int >= 1")
    if stop is not None and not isinstance(stop, str):
        stop = list(stop)
        _require(stop, all(isinstance(s, str) for s in stop), "stop", "a string or a list of strings")
    fields = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens, "stop": stop}
    return {name: value for name, value in fields.items() if value is not None}


def _require(value: T, ok: bool, name: str, expected: str) -> T:
    if not ok:
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

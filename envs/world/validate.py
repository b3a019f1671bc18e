"""Validation: a proposed observation and state change counts only if every check passes.

`validate` takes what a world model wrote (text) and the canonical state it was
asked about, and returns the `Accepted` change or raises `Rejected` with one of
`REJECTION_KINDS` and a message fit to feed back to the model:

    too_large       the reply is longer than `MAX_REPLY_CHARS`, or its copies and moves
                    carry more than `MAX_COPIED_CHARS` of the state
    not_json        no JSON object in it (or JSON no reader should take: lone
                    surrogates, nesting past 64, integers past 4096 bits)
    shape           not exactly {"observation": str, "state_patch": [op, ...]}, an
                    operation malformed (unknown op, missing value or from, extra keys)
    forbidden_path  an operation writes outside the tool's write paths
    patch           the patch does not apply (a missing path, a failed test op)
    schema          the new state is not valid against the state schema
    invariant       an invariant of the world does not hold on the new state
    postcondition   a postcondition of the tool does not hold on the change

Nothing is changed in place: the patch is applied to a copy, and the caller swaps
the canonical state only on `Accepted`. A code tool's call goes through `run_code`: the
tool runs on a copy of the typed state, and its change (a diff) through `validate_change`,
the same checks after the parse.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentenv import json_diff
from agentenv.core import _safejson
from agentenv.envs.world._extra import need
from agentenv.envs.world.paths import BoundPath, allowed, bind_all, split_pointer
from agentenv.envs.world.predicates import PredicateError
from agentenv.envs.world.schema import SchemaError
from agentenv.envs.world.world import Response, World, WorldTool

__all__ = [
    "MAX_REPLY_CHARS",
    "REJECTION_KINDS",
    "Accepted",
    "Rejected",
    "extract_json",
    "run_code",
    "validate",
    "validate_change",
]

MAX_REPLY_CHARS = 200_000
"""A longer reply is refused before parsing (an observation is at most 16,000 characters)."""
MAX_REPLY_DEPTH = 64
MAX_STATE_DEPTH = 64
"""A state may nest at most this deep (rules and schema checks recurse over it)."""
MAX_COPIED_CHARS = MAX_REPLY_CHARS
"""The most JSON (about, in characters) a patch's copy and move operations may carry, all
together. A reply spells out its values, so they are bounded by its length; a copy is a few
characters whatever it copies, and each copy of the whole state doubles it (18 of them, a
1 KB reply, built 5 GB)."""
REJECTION_KINDS = (
    "too_large",
    "not_json",
    "shape",
    "forbidden_path",
    "patch",
    "schema",
    "invariant",
    "postcondition",
)
RejectionKind = Literal[
    "too_large", "not_json", "shape", "forbidden_path", "patch", "schema", "invariant", "postcondition"
]


class Rejected(Exception):
    """A proposal that does not count; ``kind`` is one of `REJECTION_KINDS`."""

    def __init__(self, kind: RejectionKind, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind: RejectionKind = kind
        self.message = message


@dataclass(frozen=True, slots=True)
class Accepted:
    """A change that passed every check."""

    observation: str
    patch: list[dict[str, Any]]
    state: dict[str, Any]
    """The new canonical state."""

    def response(self) -> Response:
        return Response(observation=self.observation, state_patch=self.patch)


class _Op(BaseModel):
    """One RFC 6902 operation, strictly: unknown keys and missing members are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    op: Literal["add", "remove", "replace", "move", "copy", "test"]
    path: str = Field(max_length=2000)
    value: Any = None
    from_: str | None = Field(default=None, alias="from", max_length=2000)


def extract_json(text: str) -> Any:
    """The JSON object a reply holds: the whole text, or the first object in it (models wrap
    JSON in code fences or prose). `Rejected` ``not_json`` when there is none, or when it holds
    what no later reader should take."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.strip("`").removeprefix("json").strip()
    try:
        return _safejson.loads(stripped, max_depth=MAX_REPLY_DEPTH)
    except _safejson.UnsafeJSON as e:
        first = str(e)
    start = stripped.find("{")
    if start < 0:
        raise Rejected("not_json", f"the reply holds no JSON object ({first})")
    try:
        value, _ = json.JSONDecoder().raw_decode(stripped, start)
    except (json.JSONDecodeError, RecursionError, ValueError) as e:
        raise Rejected("not_json", f"the reply holds no complete JSON object: {str(e)[:200]}") from None
    found = _safejson.problem(value, max_depth=MAX_REPLY_DEPTH)
    if found is not None:
        raise Rejected("not_json", f"{found[0] or 'the reply'}: {found[1]}")
    return value


def parse_reply(text: Any) -> Response:
    """The reply as a `Response`, or `Rejected` (too_large, not_json, shape)."""
    if not isinstance(text, str):
        raise Rejected("shape", f"the world model returned {type(text).__name__}, not text")
    if len(text) > MAX_REPLY_CHARS:
        raise Rejected("too_large", f"the reply is {len(text)} characters; the limit is {MAX_REPLY_CHARS}")
    data = extract_json(text)
    if not isinstance(data, dict):
        raise Rejected("shape", f"expected a JSON object, got {type(data).__name__}")
    try:  # anywhere, a middle patch step too: an accepted reply is stored as strict JSON
        json.dumps(data, allow_nan=False)
    except ValueError:
        raise Rejected("not_json", "the reply holds NaN or an infinite number, which JSON has not") from None
    try:
        response = Response.model_validate(data)
    except ValidationError as e:
        raise Rejected("shape", _shape_message(e)) from None
    ops = []
    for i, raw in enumerate(response.state_patch):
        try:
            op = _Op.model_validate(raw)
        except ValidationError as e:
            raise Rejected("shape", f"state_patch/{i}: {_shape_message(e)}") from None
        if op.op in ("add", "replace", "test") and "value" not in raw:
            raise Rejected("shape", f"state_patch/{i}: a {op.op!r} operation needs 'value'")
        if op.op in ("move", "copy") and op.from_ is None:
            raise Rejected("shape", f"state_patch/{i}: a {op.op!r} operation needs 'from'")
        clean: dict[str, Any] = {"op": op.op, "path": op.path}
        if op.op in ("add", "replace", "test"):
            clean["value"] = op.value
        elif op.op in ("move", "copy"):
            clean["from"] = op.from_
        ops.append(clean)
    return Response(observation=response.observation, state_patch=ops)


def validate(
    text: Any, world: World, tool: WorldTool, writes: list[BoundPath], before: dict[str, Any], args: dict[str, Any]
) -> Accepted:
    """Every check of the module docstring, in order; `Accepted` or `Rejected`."""
    response = parse_reply(text)
    return validate_change(response.observation, response.state_patch, world, tool, writes, before, args)


def validate_change(
    observation: str,
    patch: list[dict[str, Any]],
    world: World,
    tool: WorldTool,
    writes: list[BoundPath],
    before: dict[str, Any],
    args: dict[str, Any],
) -> Accepted:
    for i, op in enumerate(patch):
        for key in ("path", "from") if op["op"] == "move" else ("path",):
            if op["op"] != "test" and not allowed(op[key], writes):
                where = ", ".join(b.shown for b in writes) or "nothing (the tool is read-only)"
                raise Rejected(
                    "forbidden_path", f"state_patch/{i} writes {op[key][:200]!r}; {tool.name!r} may change {where}"
                )
    for i, op in enumerate(patch):  # the state was shallow enough before: only new values can deepen it
        if "value" in op and len(split_pointer(op["path"])) + _nesting(op["value"]) > MAX_STATE_DEPTH:
            raise Rejected("schema", f"state_patch/{i} would nest the state more than {MAX_STATE_DEPTH} deep")
    after = _apply(patch, before)
    try:
        after = world.schema.validate(after)
    except SchemaError as e:
        raise Rejected("schema", str(e)) from None
    broken = world.check_invariants(after)
    if broken is not None:
        raise Rejected("invariant", broken)
    if tool.postconditions:
        data = {"args": args, "before": before, "after": after, "observation": observation}
        for post in tool.postconditions:
            try:
                ok = post.test(data)
            except PredicateError as e:
                raise Rejected("postcondition", f"postcondition {post.name!r} could not be evaluated: {e}") from None
            except Exception as e:  # noqa: BLE001 - a Python postcondition that raises on this change
                raise Rejected("postcondition", f"postcondition {post.name!r} raised {type(e).__name__}") from None
            if not ok:
                described = f" ({post.description})" if post.description else ""
                raise Rejected("postcondition", f"postcondition {post.name!r} does not hold{described}")
    return Accepted(observation, patch, after)


def run_code(world: World, tool: WorldTool, state: dict[str, Any], args: BaseModel) -> Accepted:
    """A code tool's call: its observation, and its change to a copy of the state, validated.
    `ToolError` from the tool passes through (the agent sees it); a change the tool may not
    make is a bug of the world, raised as `RuntimeError`."""
    assert tool.impl is not None
    typed = world.schema.typed(json.loads(json.dumps(state)))  # a private copy the code may change
    observation = tool.impl(typed, args)
    if not isinstance(observation, str):
        raise TypeError(f"code tool {tool.name!r} returned {type(observation).__name__}, expected the observation text")
    after = typed.model_dump(mode="json") if isinstance(typed, BaseModel) else typed
    patch = json_diff(state, after)
    arguments = args.model_dump(mode="json")
    try:
        return validate_change(observation, patch, world, tool, bind_all(tool.writes, arguments), state, arguments)
    except Rejected as e:
        raise RuntimeError(f"code tool {tool.name!r} made a change it may not make: {e}") from None


def _apply(patch: list[dict[str, Any]], before: dict[str, Any]) -> Any:
    """The patched state, sharing every part the patch does not touch with ``before``
    (copying the whole state per step would cost more than the rest of the validation):
    before each operation the containers on its paths are copied, unless this call made
    them, and the operation is applied to those copies in place."""
    jsonpatch, jsonpointer = need("jsonpatch"), need("jsonpointer")
    doc: Any = copy.copy(before)
    made = [doc]  # the containers this call copied (held, so their ids stay theirs)
    left = MAX_COPIED_CHARS
    try:
        for i, op in enumerate(patch):
            if op["op"] in ("copy", "move"):
                left = _charge(i, op, doc, left)
            for key in ("from", "path") if op["op"] == "move" else ("path",):
                doc = _copy_along(doc, op[key], made)
            doc = jsonpatch.JsonPatch([op]).apply(doc, in_place=True)
        return doc
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as e:
        raise Rejected("patch", f"the patch does not apply: {str(e)[:300]}") from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError) as e:
        raise Rejected("patch", f"the patch does not apply: {type(e).__name__}: {str(e)[:300]}") from None


def _charge(i: int, op: dict[str, Any], doc: Any, left: int) -> int:
    """``left`` less what copy or move ``op`` carries; `Rejected` when that is more than is
    left, would nest the state too deep, or is put inside itself. Checked before the
    operation runs, on the document as the earlier operations left it."""
    source, target = split_pointer(op["from"]), split_pointer(op["path"])
    if len(source) < len(target) and target[: len(source)] == source:
        raise Rejected("patch", f"state_patch/{i} puts {op['from'][:200]!r} inside itself, at {op['path'][:200]!r}")
    found = _resolve(doc, source)
    if found is _MISSING:
        return left  # jsonpatch says why it does not apply
    size, depth = _extent(found, left)
    if size > left:
        raise Rejected(
            "too_large", f"state_patch/{i}: the patch's copies and moves carry over {MAX_COPIED_CHARS} characters"
        )
    if len(target) + depth > MAX_STATE_DEPTH:
        raise Rejected("schema", f"state_patch/{i} would nest the state more than {MAX_STATE_DEPTH} deep")
    return left - size


_MISSING = object()


def _resolve(doc: Any, tokens: list[str]) -> Any:
    """The value at ``tokens`` in ``doc``, or `_MISSING`."""
    node = doc
    for token in tokens:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return _MISSING
    return node


def _extent(value: Any, limit: int) -> tuple[int, int]:
    """About how many characters ``value`` takes as JSON, and how deep it nests (a scalar: 0).
    The walk stops once the size passes ``limit``: a huge subtree costs no more than that."""
    size, deepest, stack = 0, 0, [(value, 0)]
    while stack and size <= limit:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            size += 2
            for key, child in item.items():
                size += len(key) + 4
                stack.append((child, depth + 1))
                if size > limit:
                    break
        elif isinstance(item, list):
            size += 2
            for child in item:
                size += 1
                stack.append((child, depth + 1))
                if size > limit:
                    break
        elif isinstance(item, str):
            size += len(item) + 2
        else:  # a number, true, false or null (an integer's digits counted without writing them)
            size += item.bit_length() // 3 + 2 if isinstance(item, int) else 8
    return size, deepest


def _nesting(value: Any) -> int:
    """How deep ``value`` nests (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        else:
            deepest = max(deepest, depth)
    return deepest


def _copy_along(doc: Any, pointer: str, made: list[Any]) -> Any:
    """Copy, in ``doc``, each container on the way to ``pointer``'s parent and the target
    itself when it is one (an operation below it mutates it), unless already made here."""
    own = {id(c) for c in made}
    tokens = split_pointer(pointer)
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                return doc
            key: Any = token
        elif isinstance(node, list):
            if not token.isdigit() or int(token) >= len(node):
                return doc
            key = int(token)
        else:
            return doc
        child = node[key]
        if isinstance(child, (dict, list)) and id(child) not in own:
            child = copy.copy(child)
            made.append(child)
            own.add(id(child))
            node[key] = child
        node = child
    return doc


def _shape_message(error: ValidationError) -> str:
    parts = []
    for err in error.errors()[:3]:
        where = "/".join(str(p) for p in err["loc"]) or "(reply)"
        if err["type"] == "extra_forbidden":
            parts.append(f"unexpected key {where!r}")
        elif err["type"] == "missing":
            parts.append(f"missing key {where!r}")
        else:
            parts.append(f"{where}: {err['msg']}")
    expected = 'expected exactly {"observation": "<text>", "state_patch": [<RFC 6902 operations>]}'
    return f"{'; '.join(parts)} ({expected})"

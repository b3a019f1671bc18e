"""Hypothesis strategies for what a policy could hand `Env.step`: the fuzz suite's actions.

``ActionStrategies(env, valid_weight=...).actions`` draws one `Fuzzed` action for
``env``: model text with ``<tool_call>`` tags placed anywhere (balanced or not)
around JSON that is valid, truncated or broken; bare JSON; deep nesting (up to
10,000 levels, as text or as Python values); integers of up to 6,000 digits; NaN
and infinities; lone surrogates and control characters; OpenAI assistant-message
dicts of odd shapes; `ToolCall`s with odd arguments; objects that are not actions
at all. Tool names come from the env's tools or are made up; some actions are
calls of the env's tools with arguments drawn from their schemas, so tools run
(for an env in answer mode, with no tools: replies holding an answer).

Cost matters (thousands of actions per env): large values are built from a few
drawn numbers (a depth, a digit count, a repeat count), not character by
character, and every strategy is built once, not inside a draw.

Left out: objects whose own methods attack the caller (a str subclass overriding
``__len__``, a dict whose ``get`` raises, a `ToolCall` subclass), `ToolCall`s whose
fields were set past their checks with ``object.__setattr__``, and lone surrogates
in a `ToolCall`'s name or id. Some of these are known bugs: `KNOWN_BUGS` in
tests/core/test_fuzz_actions.py has them, `tests/core/test_hostile_actions.py` the others.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from agentenv import Env, ToolCall

__all__ = ["KINDS", "ActionStrategies", "Fuzzed"]

SURROGATES = ("\ud800", "\udc80", "\udfff", "\udbff", "\ud83d")
CONTROLS = (
    "\x00",
    "\x01",
    "\x07",
    "\x08",
    "\x1b",
    "\x7f",
    "\x85",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\u200b",
    "\r",
    "\n",
    "\t",
    "\ufffe",
    "\U0010ffff",
)
TAGS = (
    "<tool_call>",
    "</tool_call>",
    "<tool_call>",
    "</tool_call>",
    "<tool_call",
    "tool_call>",
    "</tool_call",
    "<TOOL_CALL>",
    "<tool_call><tool_call>",
    "</tool_call></tool_call>",
    "```json\n",
    "```",
)
NUMBER_LITERALS = (
    "NaN",
    "Infinity",
    "-Infinity",
    "-NaN",
    "nan",
    "inf",
    "1e999",
    "-1e999",
    "1E400",
    "-0",
    "0.0e-999",
    "01",
    "+1",
    "0x10",
    ".5",
    "1.",
    "1e",
    "--1",
    "1_000",
)
JSON_BREAKAGE = (
    "",
    ",",
    "}",
    "]",
    "{",
    "[",
    '"',
    ":",
    "\\",
    "\\u",
    "\\ud800",
    "\\udc80",
    "'",
    "null",
    "tru",
    "/*",
    "//",
    "\x00",
)
WORDS = (
    "",
    " ",
    "a",
    "xyz",
    "0",
    "-1",
    "1e999",
    "NaN",
    "null",
    "true",
    "{",
    "}",
    "[",
    '"',
    "\\",
    "'",
    ":",
    ",",
    "\\u0000",
    "\\ud800",
    "\\udc80x",
    "<tool_call>",
    "</tool_call>",
    "submit",
    "名前",
    "ﬁ",
    "😀",
    "\u202e",
    "\x1b[31m",
    "\r\n",
    "a\x00b",
    "��",
    "x�",
    "\ufeff",
    "\U0010ffff",
    *SURROGATES,
    *CONTROLS,
)
"""Strings worth trying as they are: JSON punctuation, escapes, tags, lone surrogates
(a pair written as two escapes is two lone surrogates in a Python str), controls."""
MADE_UP_TOOLS = (
    "",
    " ",
    "x" * 129,
    "submit ",
    "SUBMIT",
    "respond\x00",
    "__init__",
    "_call",
    "step",
    "reset",
    "close",
    "verify",
    "route:list_orders",
    "../submit",
)
ODD_STRINGS = (
    "solution.py",
    "../../etc/passwd",
    "/etc/passwd",
    "a/" * 40 + "b",
    ".",
    "",
    "solution.py/x",
    "O1001",
    "C1001",
    "R1",
    "E1",
    "a@b.co",
    "2025-03-03",
    "x" * 5000,
)
"""String arguments that mean something to some env: paths, ids, emails, days, a long one."""
CODE_SNIPPETS = (
    "print(1)",
    "print('x' * 70000)",
    "import sys; print(sys.version); sys.exit(3)",
    "raise ValueError('\\udc80')",
    "import os; print(sorted(os.listdir('.')))",
    "open('solution.py', 'w').write('def f(): pass')",
    "print('\\x00\\x1b[31m' + chr(0xDC80).encode('utf-8', 'surrogatepass').decode('latin-1'))",
    "import sys; sys.stdout.buffer.write(b'\\xff\\xfe\\xdc\\x80')",
    "x = [1] * 10**6; print(len(x))",
    "def f(n):\n    return f(n + 1)\nf(0)",
)
"""Programs that run and finish quickly (a run of the code env costs a sandbox process)."""
KINDS = (
    "tagged text",
    "well-formed text",
    "text with a lone surrogate",
    "deep JSON text",
    "huge number in a call",
    "long text",
    "assistant message",
    "ToolCall",
    "not an action",
    "valid call",
)
"""Every `Fuzzed.kind` the mix draws."""


@dataclass(frozen=True, slots=True)
class Fuzzed:
    """One generated action and what it is."""

    action: Any
    kind: str
    """Which strategy made it (for the counts and for failure messages)."""
    invalid: bool = False
    """True when the action cannot be valid whatever the env: a format error is due."""

    def __repr__(self) -> str:  # the action's own repr may raise, or run to megabytes
        try:
            shown = repr(self.action)
        except Exception as e:  # noqa: BLE001 - Odd, a huge int, a deep value
            shown = f"<{type(self.action).__name__}: repr raised {type(e).__name__}>"
        if len(shown) > 600:
            shown = f"{shown[:500]}...<{len(shown) - 500} more chars>"
        return f"Fuzzed({self.kind}: {shown})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # how hypothesis prints examples
        printer.text(repr(self))


@dataclass(frozen=True, slots=True)
class Raw:
    """JSON text to splice into a document as it is (deep, huge or non-standard values)."""

    text: str


class Odd:
    """An object no encoder takes, whose repr and str raise."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")

    __str__ = __repr__


class Unequal:
    """An object whose comparisons and hash raise."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparison for you")

    def __hash__(self) -> int:
        raise RuntimeError("no hash for you")


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of ``choices``, drawn with the given integer weights (shrinks toward the first)."""
    table = tuple(strategy for w, strategy in choices for _ in range(w))
    return st.integers(0, len(table) - 1).flatmap(table.__getitem__)


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -- text ------------------------------------------------------------------------------------

_alphabet = st.sampled_from(SURROGATES + CONTROLS + tuple('aZ0 {}[]\\":,<>/')) | st.characters(codec="utf-8")
plain_text = st.sampled_from(WORDS) | st.text(st.characters(codec="utf-8"), max_size=8) | st.text(_alphabet, max_size=8)
"""Short text that may hold lone surrogates and control characters.
(``st.text`` of a union with ``characters(categories=["Cs"])`` drops the surrogates:
they come from sampled strings and characters here.)"""
clean_text = st.sampled_from([w for w in WORDS if _is_unicode(w)]) | st.text(st.characters(codec="utf-8"), max_size=8)
"""Short text that is valid Unicode."""


@st.composite
def _long_text(draw: st.DrawFn) -> str:
    """Text of up to tens of thousands of characters: a short piece repeated."""
    piece = draw(plain_text) or "x"
    return piece * draw(st.sampled_from((1, 2, 50, 1000, 5000, 40_000)))


@st.composite
def _nested_text(draw: st.DrawFn) -> str:
    """JSON nested hundreds to 10,000 levels deep, as text; closed, unbalanced or left open."""
    depth = draw(st.sampled_from((33, 34, 40, 41, 100, 500, 999, 1000, 3000, 10_000)) | st.integers(1, 10_000))
    opener, closer = draw(st.sampled_from((("[", "]"), ('{"a":', "}"), ('[{"k":', "}]"), ('{"":[', "]}"))))
    core = draw(st.sampled_from(("1", "[]", "{}", "null", '"x"', "")))
    ending = draw(st.sampled_from(("closed", "closed", "open", "one short", "one extra", "mismatched")))
    closing = {
        "closed": closer * depth,
        "open": "",
        "one short": closer * (depth - 1),
        "one extra": closer * (depth + 1),
        "mismatched": "}" * depth,
    }[ending]
    return opener * depth + core + closing


@st.composite
def _huge_number_text(draw: st.DrawFn) -> str:
    """A number literal of up to 6,000 digits (or exponent digits)."""
    digits = draw(st.sampled_from((309, 4300, 4301, 6000)) | st.integers(1, 6000))
    body = draw(st.sampled_from("123456789")) + draw(st.sampled_from("0123456789")) * (digits - 1)
    sign = draw(st.sampled_from(("", "-")))
    form = draw(st.sampled_from(("int", "int", "float", "exponent", "fraction")))
    return sign + {"int": body, "float": f"{body}.5", "exponent": f"1e{body}", "fraction": f"0.{body}"}[form]


long_text = _long_text()
nested_text = _nested_text()
huge_number_text = _huge_number_text()
raw_values = st.builds(Raw, nested_text | huge_number_text | st.sampled_from(NUMBER_LITERALS))


# -- values ----------------------------------------------------------------------------------


def _huge_int(digits: int) -> int:
    return 10**digits - 1  # no str() on the way: past 4,300 digits int(str) raises


text_scalars = weighted(
    (3, st.none() | st.booleans()),
    (4, st.integers(-(2**63), 2**63) | st.sampled_from((0, -1, 2**53 + 1, 10**12 + 1))),
    (3, st.floats()),
    (1, st.sampled_from((math.nan, math.inf, -math.inf, -0.0, 5e-324))),
    (5, plain_text),
)
"""Scalars json.dumps writes (NaN and Infinity as their non-standard literals)."""
huge_ints = st.integers(300, 6000).map(_huge_int) | st.integers(300, 6000).map(lambda d: -_huge_int(d))
scalars = weighted((12, text_scalars), (1, huge_ints))


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(plain_text, inner, max_size=3)


json_values = st.recursive(scalars, _containers, max_leaves=5)
"""JSON-shaped Python values; strings may hold lone surrogates, ints may be huge."""
text_values = st.recursive(text_scalars, _containers, max_leaves=5)
"""JSON-shaped Python values that json.dumps writes (no huge ints)."""


@st.composite
def _deep_value(draw: st.DrawFn) -> Any:
    """A Python list or dict nested up to 10,000 deep (built in a loop, not recursively)."""
    depth = draw(st.sampled_from((33, 40, 41, 500, 10_000)) | st.integers(1, 10_000))
    as_dict = draw(st.booleans())
    value: Any = draw(st.sampled_from((1, "x", None)))
    for _ in range(depth):
        value = {"a": value} if as_dict else [value]
    return value


def _cycle() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


python_oddities = (
    st.sampled_from(
        (
            b"\xff\xfe",
            bytearray(b"x"),
            (1, 2),
            frozenset({1}),
            {1, 2},
            1j,
            Ellipsis,
            object,
            len,
            range(3),
            memoryview(b"ab"),
        )
    )
    | st.builds(Odd)
    | st.builds(Unequal)
    | st.builds(_cycle)
)
"""Values that are not JSON: bytes, tuples, sets, classes, objects with raising methods, a cycle."""
python_values = weighted((6, json_values), (2, python_oddities), (1, _deep_value()))
"""Anything a Python policy could put in a dict."""
text_json_values = weighted((8, text_values), (2, raw_values))
"""Values for JSON written as text: huge or deep ones are `Raw` text (json.dumps refuses them)."""
non_actions = python_values.filter(lambda v: not isinstance(v, (str, dict)))


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except Exception:  # noqa: BLE001 - Unequal raises RuntimeError
        return False
    return True


hashable_values = python_values.filter(_hashable)


def dump(value: Any, *, ensure_ascii: bool) -> str:
    """``value`` as JSON text, with `Raw` parts spliced in and NaN written as ``NaN``."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        items = (
            f"{json.dumps(k, ensure_ascii=ensure_ascii)}: {dump(v, ensure_ascii=ensure_ascii)}"
            for k, v in value.items()
        )
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(dump(v, ensure_ascii=ensure_ascii) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ensure_ascii)


def _as_json_string_or_dict(args: dict[Any, Any]) -> Any:
    """Arguments as OpenAI sends them (a JSON string) when they encode; else the dict itself."""
    try:
        return json.dumps(args)
    except (ValueError, TypeError, RecursionError):
        return args


# -- arguments from a tool's schema --------------------------------------------------------------

_code = weighted(
    (4, clean_text.map(lambda t: ")" + t)),  # does not parse: cheap, nothing runs
    (1, st.integers(1, 10_000).map(lambda n: "(" * n + ")" * n)),
    (1, st.integers(1, 2_000).map(lambda n: "x = " + "[" * n + "]" * n)),
    (1, st.just("print(1)\x00")),
    (2, st.sampled_from(CODE_SNIPPETS)),
)
"""Programs: mostly ones that do not parse, some that run."""


def _schema_value(key: str, prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values that fit ``prop`` most of the time, and ones just off it (bounds, lengths) now and then."""
    if "anyOf" in prop:
        return st.one_of([_schema_value(key, p) for p in prop["anyOf"]])
    if "enum" in prop:
        return st.sampled_from(prop["enum"])
    kind = prop.get("type")
    if kind == "integer":
        lo, hi = prop.get("minimum", -(10**6)), prop.get("maximum", 10**6)
        return st.integers(lo, hi) | st.sampled_from((lo, hi, lo - 1, hi + 1))
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if key == "code":
        return _code
    return st.text(
        st.characters(codec="utf-8"), min_size=prop.get("minLength", 0), max_size=min(prop.get("maxLength", 40), 40)
    ) | st.sampled_from(ODD_STRINGS)


def _schema_arguments(schema: dict[str, Any], junk: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Every required argument and some optional ones; now and then one dropped, one extra
    or one of the wrong type (``junk``)."""
    props = schema.get("properties", {})
    required = set(schema.get("required", ()))
    base = st.fixed_dictionaries(
        {k: _schema_value(k, p) for k, p in props.items() if k in required},
        optional={k: _schema_value(k, p) for k, p in props.items() if k not in required},
    )

    @st.composite
    def tweaked(draw: st.DrawFn) -> dict[str, Any]:
        args = draw(base)
        tweak = draw(st.sampled_from(("none",) * 6 + ("drop", "extra", "wrong type")))
        if tweak == "drop" and args:
            args.pop(draw(st.sampled_from(sorted(args))))
        elif tweak == "extra":
            args[draw(plain_text)] = draw(junk)
        elif tweak == "wrong type" and args:
            args[draw(st.sampled_from(sorted(args)))] = draw(junk)
        return args

    return tweaked()


# -- the env's actions ---------------------------------------------------------------------------


ANSWER_MODE_TOOL = "answer"
"""The tool name calls use for an env with no tools (answer mode): none of them is valid there."""
_ANSWER_FORMS = ("{}", "\\boxed{{{}}}", "<answer>{}</answer>", "so: {}.")
answers = st.tuples(plain_text | long_text, st.sampled_from(_ANSWER_FORMS)).map(lambda t: t[1].format(t[0]))
"""A reply in answer mode: an answer, bare or marked up (the valid action of an env without tools)."""


class ActionStrategies:
    """Every strategy for one env's actions, built once from its tools."""

    def __init__(self, env: Env, *, valid_weight: int) -> None:
        """
        Args:
            env: The env whose tool names and schemas the calls use.
            valid_weight: How often (against ~100) an action is a schema-shaped call of one
                of the env's tools; an env whose tools are slow (real code) keeps it low.
        """
        schemas = {spec.name: spec.schema["function"]["parameters"] for spec in env.tools.values()}
        # An env in answer mode has no tools: calls name a made-up one, and a valid action is a reply.
        self.names = tuple(schemas) or (ANSWER_MODE_TOOL,)
        keys = sorted({k for schema in schemas.values() for k in schema.get("properties", {})}) or ["x"]
        self.tool_names = weighted(
            (6, st.sampled_from(self.names)), (2, plain_text), (1, st.sampled_from(MADE_UP_TOOLS))
        )
        # Arguments of three sorts, each schema-shaped (for a known tool) or random: values
        # for JSON text (with `Raw` parts), values json.dumps writes, and any Python values.
        arg_keys = weighted((2, st.sampled_from(keys)), (1, plain_text))
        self._random_text_args = st.dictionaries(arg_keys, text_json_values, max_size=4)
        self._random_dumpable_args = st.dictionaries(arg_keys, text_values, max_size=4)
        self._random_python_args = st.dictionaries(arg_keys, python_values, max_size=4)
        self._valid_args = {name: _schema_arguments(schema, text_scalars) for name, schema in schemas.items()}
        if not schemas:
            self._valid_args[ANSWER_MODE_TOOL] = st.just({})
        self._text_args = {
            name: weighted((3, args), (2, self._random_text_args)) for name, args in self._valid_args.items()
        }
        self._dumpable_args = {
            name: weighted((3, args), (2, self._random_dumpable_args)) for name, args in self._valid_args.items()
        }
        self._python_args = {
            name: weighted((3, _schema_arguments(schema, scalars | python_oddities)), (2, self._random_python_args))
            for name, schema in schemas.items()
        }
        self._object_names = weighted(
            (6, st.sampled_from(self.names)), (3, plain_text.filter(lambda n: 0 < len(n) <= 128))
        )

        self.call_json = st.composite(self._call_json)()
        self._pieces = st.lists(
            weighted(
                (4, plain_text),
                (4, st.sampled_from(TAGS)),
                (5, self.call_json),
                (1, nested_text),
                (1, huge_number_text),
                (1, st.sampled_from(NUMBER_LITERALS)),
            ),
            min_size=1,
            max_size=4,
        )
        self.tagged_text = st.composite(self._tagged_text)()
        self.well_formed_text = st.composite(self._well_formed_text)()
        self.tool_call_objects = st.composite(self._tool_call_object)()
        self.assistant_messages = st.composite(self._assistant_message)()
        self.valid_calls = st.composite(self._valid_call)() if schemas else answers
        self._function_field = st.composite(self._function)()
        self._tool_call_items = st.composite(self._tool_call_item)()
        self._contents = weighted(
            (3, st.none()),
            (2, plain_text),
            (3, self.tagged_text | self.well_formed_text),
            (1, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": plain_text}), max_size=2)),
            (1, python_values),
        )
        self._tool_call_lists = weighted(
            (6, st.lists(self._tool_call_items, max_size=2)),
            (1, st.tuples(self._tool_call_items, st.integers(17, 20)).map(lambda t: [t[0]] * t[1])),  # too many
            (1, python_values),
        )
        self.actions = self._mix(valid_weight)

    def _mix(self, valid_weight: int) -> st.SearchStrategy[Fuzzed]:
        def tag(kind: str, invalid: bool = False) -> Callable[[Any], Fuzzed]:
            return lambda action: Fuzzed(action, kind, invalid)

        def insert(parts: tuple[str, str, int]) -> str:
            text, char, at = parts
            at %= len(text) + 1
            return text[:at] + char + text[at:]

        with_surrogate = st.tuples(self.tagged_text, st.sampled_from(SURROGATES), st.integers(0, 10**6)).map(insert)
        huge_in_call = huge_number_text.map(
            lambda t: f'<tool_call>{{"name": "{self.names[0]}", "arguments": {{"a": {t}}}}}</tool_call>'
        )
        return weighted(
            (22, self.tagged_text.map(tag("tagged text"))),
            (12, self.well_formed_text.map(tag("well-formed text"))),
            (5, with_surrogate.map(tag("text with a lone surrogate", invalid=True))),
            (4, nested_text.map(tag("deep JSON text"))),
            (4, huge_in_call.map(tag("huge number in a call"))),
            (3, long_text.map(tag("long text"))),
            (18, self.assistant_messages.map(tag("assistant message"))),
            (10, self.tool_call_objects.map(tag("ToolCall"))),
            (6, non_actions.map(tag("not an action", invalid=True))),
            (valid_weight, self.valid_calls.map(tag("valid call"))),
        )

    def _args(self, name: Any, *, python: bool = False, dumpable: bool = False) -> st.SearchStrategy[dict[Any, Any]]:
        """Arguments for tool ``name``: Python values (anything), values json.dumps writes
        (``dumpable``), or values for JSON text (with `Raw` parts)."""
        if python:
            table, other = self._python_args, self._random_python_args
        elif dumpable:
            table, other = self._dumpable_args, self._random_dumpable_args
        else:
            table, other = self._text_args, self._random_text_args
        return table[name] if isinstance(name, str) and name in table else other

    # -- text

    def _call_json(self, draw: st.DrawFn) -> str:
        """One tool call as JSON text: valid, odd in shape, truncated or broken."""
        name = draw(self.tool_names)
        args: Any = draw(self._args(name))
        obj: dict[str, Any] = {"name": name}
        shape = draw(
            st.sampled_from(
                ("plain",) * 6
                + (
                    "parameters",
                    "string arguments",
                    "odd arguments",
                    "id",
                    "odd id",
                    "extra key",
                    "no name",
                    "odd name",
                    "not an object",
                )
            )
        )
        if shape == "string arguments":
            obj["arguments"] = Raw(json.dumps(dump(args, ensure_ascii=True)))
        elif shape == "odd arguments":
            obj["arguments"] = draw(text_json_values)
        elif shape != "no name" or draw(st.booleans()):
            obj["parameters" if shape == "parameters" else "arguments"] = args
        if shape == "no name":
            del obj["name"]
        elif shape == "odd name":
            obj["name"] = draw(text_json_values)
        elif shape == "id":
            obj["id"] = draw(plain_text)
        elif shape == "odd id":
            obj["id"] = draw(text_json_values)
        elif shape == "extra key":
            obj[draw(plain_text)] = draw(text_json_values)
        value: Any = obj if shape != "not an object" else draw(text_json_values)
        text = dump(value, ensure_ascii=draw(st.booleans()))
        damage = draw(st.sampled_from(("none",) * 6 + ("truncate", "insert", "delete", "double")))
        if damage == "truncate":
            text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
        elif damage == "insert":
            at = draw(st.integers(0, len(text)))
            text = text[:at] + draw(st.sampled_from(JSON_BREAKAGE) | plain_text) + text[at:]
        elif damage == "delete" and text:
            at = draw(st.integers(0, len(text) - 1))
            text = text[:at] + text[at + 1 :]
        elif damage == "double":
            text = text + text
        return text

    def _tagged_text(self, draw: st.DrawFn) -> str:
        """Pieces of text, tags, JSON calls and raw literals, in any order: tags unbalanced,
        nested, cut, or around nothing."""
        text = "".join(draw(self._pieces))
        if draw(st.integers(0, 9)) == 0:
            text = text * draw(st.sampled_from((2, 17, 200)))  # many calls; past the length limit
        return text

    def _well_formed_text(self, draw: st.DrawFn) -> str:
        """``<tool_call>`` blocks or bare JSON as a model would write them (arguments random)."""
        name = draw(self.tool_names)
        args = draw(self._args(name, dumpable=True))
        body = json.dumps({"name": name, "arguments": args}, ensure_ascii=draw(st.booleans()))
        form = draw(st.sampled_from(("hermes", "hermes", "bare", "fenced", "list", "prose")))
        if form == "bare":
            return body
        if form == "fenced":
            return f"```json\n{body}\n```"
        if form == "list":
            return "[" + ", ".join([body] * draw(st.integers(0, 20))) + "]"
        if form == "prose":
            return f"{draw(plain_text)}<tool_call>\n{body}\n</tool_call>{draw(plain_text)}"
        return f"<tool_call>{body}</tool_call>"

    # -- objects

    def _tool_call_object(self, draw: st.DrawFn) -> ToolCall:
        """A `ToolCall` (valid as a dataclass) whose name, id and arguments may hold anything
        (lone surrogates included)."""
        name = draw(self._object_names)
        return ToolCall(name, draw(self._args(name, python=True)), draw(st.none() | plain_text))

    def _function(self, draw: st.DrawFn) -> Any:
        shape = draw(st.sampled_from(("ok",) * 5 + ("missing name", "odd name", "extra", "not a dict")))
        if shape == "not a dict":
            return draw(python_values)
        name = draw(self.tool_names)
        fn: dict[Any, Any] = {"name": name if shape != "odd name" else draw(python_values)}
        arguments = weighted(
            (3, self._args(name, python=True).map(_as_json_string_or_dict)),
            (2, self.call_json),
            (1, raw_values.map(lambda r: r.text)),
            (1, python_values),
        )
        if draw(st.integers(0, 5)):
            fn["arguments"] = draw(arguments)
        if shape == "missing name":
            del fn["name"]
        elif shape == "extra":
            fn[draw(plain_text | scalars)] = draw(python_values)
        return fn

    def _tool_call_item(self, draw: st.DrawFn) -> Any:
        if draw(st.integers(0, 7)) == 0:
            return draw(python_values)  # not a dict at all
        item: dict[Any, Any] = {}
        if draw(st.integers(0, 3)):
            item["id"] = draw(weighted((4, plain_text), (1, python_values)))
        if draw(st.integers(0, 3)):
            item["type"] = draw(st.sampled_from(("function", "function", "code_interpreter", "")) | python_values)
        if draw(st.integers(0, 7)):
            item["function"] = draw(self._function_field)
        if draw(st.integers(0, 5)) == 0:
            item[draw(plain_text | scalars)] = draw(python_values)
        return item

    def _assistant_message(self, draw: st.DrawFn) -> dict[Any, Any]:
        """An OpenAI assistant message of any shape."""
        message: dict[Any, Any] = {}
        if draw(st.integers(0, 4)):
            message["role"] = draw(st.sampled_from(("assistant",) * 4 + ("user", "tool", "system", "")) | python_values)
        if draw(st.integers(0, 4)):
            message["content"] = draw(self._contents)
        if draw(st.integers(0, 4)):
            message["tool_calls"] = draw(self._tool_call_lists)
        for _ in range(draw(st.integers(0, 2))):
            key = draw(
                st.sampled_from(("name", "refusal", "audio", "function_call", "reasoning_content"))
                | plain_text
                | hashable_values
            )
            message[key] = draw(python_values)
        wrap = draw(st.sampled_from(("dict",) * 8 + ("ordered", "subclass")))
        if wrap == "ordered":
            return OrderedDict(message)
        if wrap == "subclass":
            return type("MessageDict", (dict,), {})(message)
        return message

    # -- calls of the env's tools

    def _valid_call(self, draw: st.DrawFn) -> Any:
        """A call of one of the env's tools, arguments from its schema, in any of the three forms."""
        name = draw(st.sampled_from(self.names))
        args = draw(self._valid_args[name])
        form = draw(st.sampled_from(("text", "text", "message", "toolcall")))
        if form == "toolcall":
            return ToolCall(name, args)
        if form == "text":
            return f"<tool_call>{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}</tool_call>"
        function = {"name": name, "arguments": json.dumps(args)}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": function}],
        }

"""A tagged JSON encoding of plain Python values, shared by the host and the sandbox.

Stdlib only and free of ``from __future__`` imports: its source is also pasted
into the programs that run inside the sandbox (see `agentenv.envs.code.verify`).

Only plain values cross the sandbox boundary. ``encode`` checks ``type(x) is``,
never ``isinstance``, so a subclass of ``int`` with a lying ``__eq__`` is refused
rather than smuggled through; the host then compares decoded values, which are
built by the host and cannot lie. Tuples, sets, non-string dict keys, bytes and
non-finite floats are tagged (``{"$t": [...]}`` and friends).
Left out: objects, functions, generators, numpy types (a candidate must return plain data).
"""

import base64
import json
import math

MAX_DEPTH = 100


def encode(value, depth=0):
    """A JSON-ready form of ``value``; TypeError for anything not plain data."""
    if depth > MAX_DEPTH:
        raise TypeError("value nested too deeply")
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str:
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$f": repr(value)}
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"$t": [encode(v, depth + 1) for v in value]}
    if kind is set or kind is frozenset:
        return {"$s": [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"$d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"$b": base64.b64encode(value).decode()}
    raise TypeError(
        f"unsupported value of type {kind.__name__} (return plain data: "
        "int, float, str, bool, None, list, tuple, dict, set, bytes)"
    )


def decode(data):
    """The inverse of `encode`; ValueError on a malformed encoding."""
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(v) for v in data]
    if type(data) is dict and len(data) == 1:
        ((tag, body),) = data.items()
        if tag == "$f" and body in ("inf", "-inf", "nan"):
            return float(body)
        if tag == "$t" and type(body) is list:
            return tuple(decode(v) for v in body)
        if tag == "$s" and type(body) is list:
            return set(decode(v) for v in body)
        if tag == "$d" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
            return {decode(k): decode(v) for k, v in body}
        if tag == "$b" and type(body) is str:
            return base64.b64decode(body)
    raise ValueError(f"malformed encoded value: {json.dumps(data)[:80]}")


def same(expected, got, rel_tol=1e-6):
    """Equality with exact types (True is not 1) and a tolerance for floats."""
    if type(expected) is not type(got):
        return False
    if type(expected) is float:
        if math.isnan(expected):
            return math.isnan(got)
        return math.isclose(expected, got, rel_tol=rel_tol, abs_tol=1e-9)
    if type(expected) in (list, tuple):
        return len(expected) == len(got) and all(same(e, g, rel_tol) for e, g in zip(expected, got, strict=False))
    if type(expected) is dict:
        return expected.keys() == got.keys() and all(same(expected[k], got[k], rel_tol) for k in expected)
    return expected == got

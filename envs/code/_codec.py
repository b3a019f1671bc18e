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
    """Equality with exact types (True is not 1) and a tolerance for floats, at every depth.

    Set members and dict keys too: Python's ``==`` and hashing would let ``{True}`` pass
    for ``{1}`` and fail ``{0.1 + 0.2}`` against ``{0.3}``, so they are matched one to one
    with `same` instead (see `_same_members`)."""
    if type(expected) is not type(got):
        return False
    if type(expected) is float:
        if math.isnan(expected):
            return math.isnan(got)
        return math.isclose(expected, got, rel_tol=rel_tol, abs_tol=1e-9)
    if type(expected) in (list, tuple):
        return len(expected) == len(got) and all(same(e, g, rel_tol) for e, g in zip(expected, got, strict=False))
    if type(expected) is dict:
        return _same_members(list(expected.items()), list(got.items()), rel_tol, items=True)
    if type(expected) in (set, frozenset):
        return _same_members(list(expected), list(got), rel_tol, items=False)
    return expected == got


MATCHED_MEMBERS_MAX = 64
"""Float-bearing members up to this many are matched by a full search for a one-to-one pairing
(quadratic); more are paired in sorted order, linear after the sort (a rare near-tie may then
be rejected, never a wrong value accepted). The count is bounded by the expected value, never
by what a solution returns: sizes must agree first."""


def _same_members(expected, got, rel_tol, items):
    """Whether set members (or dict ``items``, as (key, value) pairs) match one to one under `same`.

    Members without floats are looked up by `_exact_key` (linear); only float-bearing ones,
    which no hash can match within a tolerance, go to `_pair_loose`."""
    if len(expected) != len(got):
        return False
    exact, loose_got = {}, []
    for member in got:
        key = _exact_key(member[0] if items else member)
        if key is None:
            loose_got.append(member)
        else:
            exact[key] = member
    loose_expected = []
    for member in expected:
        key = _exact_key(member[0] if items else member)
        if key is None:
            loose_expected.append(member)
            continue
        if key not in exact:
            return False
        match = exact.pop(key)
        if items and not same(member[1], match[1], rel_tol):
            return False
    return not exact and _pair_loose(loose_expected, loose_got, rel_tol, items)


def _exact_key(value):
    """A hashable key, equal for two values exactly when they are equal with the same types at
    every depth; None when ``value`` holds a float (compared with a tolerance instead)."""
    kind = type(value)
    if kind is float:
        return None
    if kind is tuple or kind is frozenset:
        keys = [_exact_key(v) for v in value]
        if any(k is None for k in keys):
            return None
        return (kind.__name__, tuple(keys) if kind is tuple else frozenset(keys))
    return (kind.__name__, value)


def _pair_loose(expected, got, rel_tol, items):
    """Whether the float-bearing members (or dict items, by key) pair up one to one under `same`."""
    if len(expected) != len(got):
        return False
    if len(expected) > MATCHED_MEMBERS_MAX:
        order = (lambda item: _order(item[0])) if items else _order  # a dict value may not be orderable
        pairs = zip(sorted(expected, key=order), sorted(got, key=order), strict=True)
        return all(same(e, g, rel_tol) for e, g in pairs)
    fits = [[j for j, g in enumerate(got) if same(e, g, rel_tol)] for e in expected]
    owner = [-1] * len(got)  # owner[j]: the expected member paired with got[j] so far

    def place(i, tried):  # an augmenting path (Kuhn's algorithm): a near-tie may need a re-pairing
        for j in fits[i]:
            if j not in tried:
                tried.add(j)
                if owner[j] < 0 or place(owner[j], tried):
                    owner[j] = i
                    return True
        return False

    return all(place(i, set()) for i in range(len(expected)))


def _order(value):
    """A total order on hashable plain values (types apart, NaN last among floats), to pair by."""
    kind = type(value)
    if kind is float:
        return ("float", (1, 0.0) if math.isnan(value) else (0, value))
    if kind is tuple:
        return ("tuple", tuple(_order(v) for v in value))
    if kind is frozenset:
        return ("frozenset", tuple(sorted(_order(v) for v in value)))
    return (kind.__name__, value)

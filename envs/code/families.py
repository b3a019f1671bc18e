"""Procedural task families for the code env: one function per family, ``(rng, difficulty) -> Variant``.

A family draws its parameters (a shift, a separator, a bracket set, which
occurrence to keep...) and its test inputs from ``rng``; the difficulty (0-3)
adds requirements and edge cases. The reference solution is source text with the
parameters baked in; `agentenv.envs.code.tasks` runs it on the host to get the
expected values, so a family never states an answer by hand. A mutated variant of
a task is the same family called with a new ``rng``.

Left out: classes and stateful APIs (only plain values cross the sandbox), I/O,
anything that needs a package beyond the standard library.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FAMILIES", "Family", "Variant"]


@dataclass(frozen=True, slots=True)
class Variant:
    entry_point: str
    signature: str  # "def f(xs: list[int]) -> int"
    description: str  # what the function must do, the requirements of this difficulty included
    solution: str  # reference source; defines entry_point
    inputs: list[list[Any]]  # argument lists, the first few become the visible tests


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    category: str  # strings | lists | math | parsing | data-structures | algorithms
    make: Callable[[np.random.Generator, int], Variant]


def _ints(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[int]:
    return [int(v) for v in rng.integers(lo, hi + 1, size=n)]


def _word(rng: np.random.Generator, n: int, alphabet: str = string.ascii_lowercase) -> str:
    return "".join(alphabet[int(i)] for i in rng.integers(0, len(alphabet), size=n))


def _pick(rng: np.random.Generator, options: list[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


# -- strings ---------------------------------------------------------------------------


def caesar(rng: np.random.Generator, d: int) -> Variant:
    k = int(rng.integers(1, 26))
    alphabet = string.ascii_letters if d >= 1 else string.ascii_lowercase
    rules = [f"Shift every lowercase letter {k} places forward in the alphabet, wrapping from z to a."]
    if d >= 1:
        rules.append("Shift uppercase letters the same way, keeping them uppercase.")
    if d >= 3:
        rules.append(f"Rotate digits too: each digit becomes (digit + {k}) mod 10.")
    rules.append("Leave every other character unchanged.")
    solution = f"""def encode(text: str) -> str:
    out = []
    for ch in text:
        if "a" <= ch <= "z":
            out.append(chr((ord(ch) - 97 + {k}) % 26 + 97))
        elif {d >= 1} and "A" <= ch <= "Z":
            out.append(chr((ord(ch) - 65 + {k}) % 26 + 65))
        elif {d >= 3} and ch.isdigit() and ch.isascii():
            out.append(str((int(ch) + {k}) % 10))
        else:
            out.append(ch)
    return "".join(out)
"""
    chars = alphabet + (" .,!-" if d >= 2 else " ") + ("0123456789" if d >= 2 else "")
    inputs = [["abc xyz"], [""], *[[_word(rng, int(rng.integers(1, 12 + 4 * d)), chars)] for _ in range(6 + 2 * d)]]
    return Variant("encode", "def encode(text: str) -> str", " ".join(rules), solution, inputs)


def run_length(rng: np.random.Generator, d: int) -> Variant:
    count_first = bool(rng.integers(2))
    omit_one = d >= 1
    fmt = "count then character" if count_first else "character then count"
    rules = (
        f"Run-length encode the string: each maximal run of one character becomes {fmt} (e.g. 'aaa' -> "
        f"{'3a' if count_first else 'a3'})."
    )
    if omit_one:
        rules += " A run of length 1 is written as the character alone."
    piece = "f'{n}{ch}'" if count_first else "f'{ch}{n}'"
    solution = f"""def rle(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        j = i
        while j < len(s) and s[j] == s[i]:
            j += 1
        ch, n = s[i], j - i
        out.append(ch if ({omit_one} and n == 1) else {piece})
        i = j
    return "".join(out)
"""
    alphabet = "ab" if d == 0 else ("abc" if d < 3 else "abcAB ")
    inputs = [
        ["aaab"],
        [""],
        ["abc"],
        *[[_word(rng, int(rng.integers(1, 10 + 8 * d)), alphabet)] for _ in range(6 + d)],
    ]
    return Variant("rle", "def rle(s: str) -> str", rules, solution, inputs)


def palindrome(rng: np.random.Generator, d: int) -> Variant:
    rules = ["Return True if the string reads the same forwards and backwards."]
    if d >= 1:
        rules.append("Ignore letter case.")
    if d >= 2:
        rules.append("Ignore every character that is not a letter or a digit.")
    if d >= 3:
        rules.append("Also return True if removing exactly one of the remaining characters makes it a palindrome.")
    solution = f"""def is_pal(s: str) -> bool:
    t = [c.lower() if {d >= 1} else c for c in s if (not {d >= 2}) or c.isalnum()]

    def pal(lo, hi):
        while lo < hi:
            if t[lo] != t[hi]:
                return False
            lo, hi = lo + 1, hi - 1
        return True

    lo, hi = 0, len(t) - 1
    while lo < hi and t[lo] == t[hi]:
        lo, hi = lo + 1, hi - 1
    if lo >= hi:
        return True
    return {d >= 3} and (pal(lo + 1, hi) or pal(lo, hi - 1))
"""
    letters = "ab" if d == 0 else "abc"

    def pal() -> str:
        half = _word(rng, int(rng.integers(0, 6)), letters)
        return half + _word(rng, int(rng.integers(0, 2)), letters) + half[::-1]

    def one_insertion() -> str:  # a palindrome at d3; below, usually not one
        s = pal()
        i = int(rng.integers(len(s) + 1))
        return s[:i] + _pick(rng, list(letters)) + s[i:]

    def far() -> str:
        # Starts with xx, ends with yy (x != y) inside a palindromic frame: no single
        # removal can make it a palindrome, so it is False at every difficulty.
        x = _pick(rng, list(letters))
        y = _pick(rng, [c for c in letters if c != x])
        half, middle = _word(rng, int(rng.integers(0, 4)), letters), _word(rng, int(rng.integers(0, 3)), letters)
        return half + x * int(rng.integers(2, 4)) + middle + y * int(rng.integers(2, 4)) + half[::-1]

    def dressed(s: str) -> str:
        """The rules this difficulty adds to ignore: letter case, then punctuation and spaces."""
        if d >= 1:
            s = "".join(c.upper() if rng.random() < 0.4 else c for c in s)
        for _ in range(int(rng.integers(0, 4)) if d >= 2 else 0):
            i = int(rng.integers(len(s) + 1))
            s = s[:i] + _pick(rng, list(" ,!")) + s[i:]
        return s

    # One of each kind for sure (the hidden tests must hold both answers), the rest drawn.
    makers = [pal, one_insertion, far]
    samples = [*makers, *(_pick(rng, makers) for _ in range(4 + 2 * d))]
    inputs = [["aba"], ["ab"], [""], *[[dressed(make())] for make in samples]]
    return Variant("is_pal", "def is_pal(s: str) -> bool", " ".join(rules), solution, inputs)


def char_histogram(rng: np.random.Generator, d: int) -> Variant:
    top = int(rng.integers(1, 4))
    rules = (
        f"Return the {top} most frequent characters of the string as a list of (character, count) tuples, "
        "most frequent first; break ties by the character, smallest first."
    )
    if d >= 1:
        rules += " Count letters case-insensitively, as lowercase."
    if d >= 2:
        rules += " Ignore whitespace."
    solution = f"""def top_chars(s: str) -> list:
    counts = {{}}
    for c in s:
        if {d >= 2} and c.isspace():
            continue
        c = c.lower() if {d >= 1} else c
        counts[c] = counts.get(c, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:{top}]
"""
    alphabet = "abc" if d == 0 else "abcABC  "
    inputs = [["aab"], [""], *[[_word(rng, int(rng.integers(1, 15 + 5 * d)), alphabet)] for _ in range(6 + d)]]
    return Variant("top_chars", "def top_chars(s: str) -> list[tuple[str, int]]", rules, solution, inputs)


# -- lists -----------------------------------------------------------------------------


def rotate(rng: np.random.Generator, d: int) -> Variant:
    right = bool(rng.integers(2))
    side = "right" if right else "left"
    rules = f"Rotate the list k places to the {side} and return a new list."
    if d >= 1:
        rules += " k may be larger than the length of the list."
    if d >= 2:
        rules += f" A negative k rotates to the {'left' if right else 'right'}. An empty list stays empty."
    sign = "-" if right else ""
    solution = f"""def rotate(xs: list, k: int) -> list:
    if not xs:
        return []
    k = ({sign}k) % len(xs)
    return xs[k:] + xs[:k]
"""

    def case() -> list[Any]:
        xs = _ints(rng, int(rng.integers(1 if d < 2 else 0, 8)), 0, 9)
        k = int(rng.integers(-12 if d >= 2 else 0, (len(xs) if d == 0 else 15) + 1))
        return [xs, k]

    inputs = [[[1, 2, 3], 1], [[1, 2, 3, 4], 2], *[case() for _ in range(7 + d)]]
    return Variant("rotate", "def rotate(xs: list[int], k: int) -> list[int]", rules, solution, inputs)


def window_sum(rng: np.random.Generator, d: int) -> Variant:
    want_max = bool(rng.integers(2))
    word = "largest" if want_max else "smallest"
    rules = f"Return the {word} sum of k consecutive elements of xs."
    if d >= 2:
        rules += " Return None when xs has fewer than k elements."
    solution = f"""def window_sum(xs: list, k: int):
    if len(xs) < k:
        return None
    cur = sum(xs[:k])
    best = cur
    for i in range(k, len(xs)):
        cur += xs[i] - xs[i - k]
        best = {"max" if want_max else "min"}(best, cur)
    return best
"""

    def case() -> list[Any]:
        n = int(rng.integers(1, 10 + 5 * d))
        k = int(rng.integers(1, n + (3 if d >= 2 else 1)))
        return [_ints(rng, n, -9 if d >= 1 else 0, 9), k]

    inputs = [[[1, 2, 3], 2], [[5], 1], *[case() for _ in range(7 + d)]]
    return Variant("window_sum", "def window_sum(xs: list[int], k: int) -> int | None", rules, solution, inputs)


def dedupe(rng: np.random.Generator, d: int) -> Variant:
    keep_last = bool(rng.integers(2)) if d >= 1 else False
    which = "last" if keep_last else "first"
    rules = f"Remove duplicates from the list, keeping the {which} occurrence of each value, in list order."
    if d >= 2:
        rules += " Strings that differ only in letter case count as duplicates; keep the kept one's spelling."
    key = "x.lower()" if d >= 2 else "x"
    solution = f"""def dedupe(xs: list) -> list:
    seen, out = set(), []
    for x in (reversed(xs) if {keep_last} else xs):
        key = {key}
        if key not in seen:
            seen.add(key)
            out.append(x)
    return out[::-1] if {keep_last} else out
"""
    alphabet = "ab" if d < 2 else "abAB"
    inputs: list[list[Any]] = [
        [["a", "b", "a"]],
        [[]],
        *[
            [[_word(rng, int(rng.integers(1, 3)), alphabet) for _ in range(int(rng.integers(1, 9 + 2 * d)))]]
            for _ in range(7 + d)
        ],
    ]
    return Variant("dedupe", "def dedupe(xs: list[str]) -> list[str]", rules, solution, inputs)


def kth_largest(rng: np.random.Generator, d: int) -> Variant:
    k = int(rng.integers(1, 4))
    distinct = d >= 1
    rules = (
        f"Return the {k}{'st' if k == 1 else ('nd' if k == 2 else 'rd')} largest "
        f"{'distinct value' if distinct else 'element'} of xs, or None if there is none."
    )
    solution = f"""def kth_largest(xs: list):
    values = sorted({"set(xs)" if distinct else "xs"}, reverse=True)
    return values[{k - 1}] if len(values) >= {k} else None
"""
    inputs: list[list[Any]] = [
        [[3, 1, 2]],
        [[]],
        *[[_ints(rng, int(rng.integers(0, 8 + 2 * d)), -5 * d, 9)] for _ in range(7 + d)],
    ]
    return Variant("kth_largest", "def kth_largest(xs: list[int]) -> int | None", rules, solution, inputs)


# -- math ------------------------------------------------------------------------------


def to_base(rng: np.random.Generator, d: int) -> Variant:
    b = int(rng.integers(2, 10 if d < 2 else 37))
    rules = f"Write the integer n in base {b}" + (" using digits 0-9 then lowercase a-z" if b > 10 else "") + "."
    if d >= 1:
        rules += " Zero is '0'."
    if d >= 3:
        rules += " A negative n gets a leading '-'."
    solution = f"""def to_base(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    if n == 0:
        return "0"
    sign = "-" if n < 0 else ""
    n, out = abs(n), []
    while n:
        n, r = divmod(n, {b})
        out.append(digits[r])
    return sign + "".join(reversed(out))
"""
    lo = -(10 ** (2 + d)) if d >= 3 else 1
    inputs = [[int(b) + 1], [int(b) ** 2], *[[int(v)] for v in rng.integers(lo, 10 ** (2 + d), size=7 + d)]]
    if d >= 1:
        inputs.insert(1, [0])
    return Variant("to_base", "def to_base(n: int) -> str", rules, solution, inputs)


def digit_power(rng: np.random.Generator, d: int) -> Variant:
    p = int(rng.integers(1, 4))
    times = int(rng.integers(2, 4)) if d >= 2 else 1
    rules = f"Return the sum of the decimal digits of n, each raised to the power {p}."
    if d >= 1:
        rules += " For a negative n use its absolute value."
    if d >= 2:
        rules += f" Apply this {times} times in a row (each time to the previous result) and return the last result."
    solution = f"""def digit_power(n: int) -> int:
    n = abs(n)
    for _ in range({times}):
        n = sum(int(c) ** {p} for c in str(n))
    return n
"""
    inputs = [
        [12],
        [7],
        *[[int(v)] for v in rng.integers(-(10 ** (3 + d)) if d >= 1 else 0, 10 ** (3 + d), size=7 + d)],
    ]
    return Variant("digit_power", "def digit_power(n: int) -> int", rules, solution, inputs)


def primes(rng: np.random.Generator, d: int) -> Variant:
    mode = _pick(rng, ["count", "sum", "largest"])
    what = {"count": "the number of", "sum": "the sum of", "largest": "the largest of"}[mode]
    rules = f"Return {what} the primes p with lo <= p <= hi" + (
        " (None when there is none)." if mode == "largest" else "."
    )
    agg = {"count": "len(ps)", "sum": "sum(ps)", "largest": "max(ps) if ps else None"}[mode]
    solution = f"""def primes_between(lo: int, hi: int):
    def is_prime(n):
        if n < 2:
            return False
        i = 2
        while i * i <= n:
            if n % i == 0:
                return False
            i += 1
        return True

    ps = [p for p in range(max(lo, 2), hi + 1) if is_prime(p)]
    return {agg}
"""

    def case() -> list[int]:
        lo = int(rng.integers(-5 if d >= 2 else 0, 50 * (d + 1)))
        return [lo, lo + int(rng.integers(0, 30 * (d + 1)))]

    inputs = [[1, 10], [14, 16], *[case() for _ in range(7 + d)]]
    return Variant("primes_between", "def primes_between(lo: int, hi: int) -> int | None", rules, solution, inputs)


# -- parsing ---------------------------------------------------------------------------


def key_values(rng: np.random.Generator, d: int) -> Variant:
    sep = _pick(rng, [";", ",", "&"])
    eq = _pick(rng, ["=", ":"])
    rules = f"Parse a string like 'a{eq}1{sep}b{eq}2' into a dict mapping each key to its integer value."
    if d >= 1:
        rules += " Ignore spaces around keys and values; an empty string gives {}."
    if d >= 2:
        rules += " When a key repeats, the last value wins."
    if d >= 3:
        rules += f" Skip pieces that have no '{eq}' or whose value is not an integer."
    solution = f"""def parse_kv(s: str) -> dict:
    out = {{}}
    for piece in s.split({sep!r}):
        if {eq!r} not in piece:
            continue
        key, _, value = piece.partition({eq!r})
        try:
            out[key.strip()] = int(value.strip())
        except ValueError:
            continue
    return out
"""

    def case() -> list[str]:
        n = int(rng.integers(1, 5 + d))
        keys = [_word(rng, 1, "abcd" if d >= 2 else "abcdefgh") for _ in range(n)]
        if d < 2:
            keys = list(dict.fromkeys(keys))
        sp = " " if d >= 1 else ""
        pieces = [f"{sp}{k}{sp}{eq}{sp}{int(rng.integers(-50, 100))}" for k in keys]
        if d >= 3:
            pieces.append(_pick(rng, ["junk", f"x{eq}y", f"z{eq}"]))
        return [sep.join(pieces)]

    inputs = [[f"a{eq}1{sep}b{eq}2"], *[case() for _ in range(7 + d)]]
    if d >= 1:
        inputs.append([""])
    return Variant("parse_kv", "def parse_kv(s: str) -> dict[str, int]", rules, solution, inputs)


def rpn(rng: np.random.Generator, d: int) -> Variant:
    ops = ["+", "-", "*", "/"][: 2 + min(d, 2)]
    rules = (
        f"Evaluate a reverse Polish expression of integers and the operators {' '.join(ops)}, tokens "
        "separated by single spaces, and return the integer result."
    )
    if "/" in ops:
        rules += " '/' is integer division that truncates toward zero; the inputs never divide by zero."
    if d >= 3:
        rules += " Return None when the expression is malformed (a missing operand or leftover numbers)."
    solution = """def eval_rpn(expr: str):
    stack = []
    for tok in expr.split():
        if tok in ("+", "-", "*", "/"):
            if len(stack) < 2:
                return None
            b, a = stack.pop(), stack.pop()
            if tok == "+":
                stack.append(a + b)
            elif tok == "-":
                stack.append(a - b)
            elif tok == "*":
                stack.append(a * b)
            else:
                q = abs(a) // abs(b)
                stack.append(q if (a >= 0) == (b >= 0) else -q)
        else:
            stack.append(int(tok))
    return stack[0] if len(stack) == 1 else None
"""

    def case() -> list[str]:
        tokens = [str(int(rng.integers(1, 10)))]
        for _ in range(int(rng.integers(1, 3 + 2 * d))):
            tokens.append(str(int(rng.integers(-9 if d >= 2 else 1, 10)) or 1))
            tokens.append(_pick(rng, ops))
        if d >= 3 and rng.random() < 0.3:
            tokens.append(_pick(rng, ["7", "+"]))
        return [" ".join(tokens)]

    inputs = [["3 4 +"], ["5 1 2 + -"], *[case() for _ in range(7 + d)]]
    return Variant("eval_rpn", "def eval_rpn(expr: str) -> int | None", rules, solution, inputs)


def duration(rng: np.random.Generator, d: int) -> Variant:
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    allowed = ["h", "m"] + (["s"] if d >= 1 else []) + (["d"] if d >= 2 else [])
    rules = (
        f"Parse a duration like '1h30m' into seconds. Units: {', '.join(allowed)} "
        "(" + ", ".join(f"{u} = {units[u]} s" for u in allowed) + "); each number is a non-negative integer."
    )
    if d >= 3:
        rules += " Units may come in any order, repeat (they add up) and be separated by spaces."
    table = {u: units[u] for u in allowed}
    solution = f"""def seconds(text: str) -> int:
    units = {table!r}
    total, num = 0, ""
    for ch in text:
        if ch.isdigit():
            num += ch
        elif ch in units:
            total += int(num) * units[ch]
            num = ""
    return total
"""

    def case() -> list[str]:
        chosen = [u for u in allowed if rng.random() < 0.7] or [allowed[0]]
        parts = [f"{int(rng.integers(0, 100))}{u}" for u in chosen]
        if d >= 3:
            parts += [f"{int(rng.integers(1, 9))}{_pick(rng, allowed)}"]
            rng.shuffle(parts)
            return [" ".join(parts)]
        order = ["d", "h", "m", "s"]
        return ["".join(sorted(parts, key=lambda p: order.index(p[-1])))]

    inputs = [["1h30m"], ["45m"], *[case() for _ in range(7 + d)]]
    return Variant("seconds", "def seconds(text: str) -> int", rules, solution, inputs)


# -- data structures -------------------------------------------------------------------


def min_stack(rng: np.random.Generator, d: int) -> Variant:
    query = _pick(rng, ["min", "max"])
    rules = (
        f"Simulate a stack. ops is a list of operations: ['push', x], ['pop'] and ['{query}']. Return a list "
        f"with one entry per 'pop' (the popped value) and per '{query}' (the {query}imum of the stack), "
        "None when the stack is empty."
    )
    if d >= 2:
        rules += " Also support ['size'] (append the number of elements) and ['clear'] (no output)."
    solution = f'''def run_stack(ops: list) -> list:
    stack, out = [], []
    for op in ops:
        if op[0] == "push":
            stack.append(op[1])
        elif op[0] == "pop":
            out.append(stack.pop() if stack else None)
        elif op[0] == "{query}":
            out.append({query}(stack) if stack else None)
        elif op[0] == "size":
            out.append(len(stack))
        elif op[0] == "clear":
            stack.clear()
    return out
'''
    names = ["push", "push", "pop", query] + (["size", "clear"] if d >= 2 else [])

    def case() -> list[Any]:
        ops = []
        for _ in range(int(rng.integers(1, 8 + 4 * d))):
            name = _pick(rng, names)
            ops.append([name, int(rng.integers(-9, 10))] if name == "push" else [name])
        return [ops]

    inputs = [[[["push", 2], ["push", 1], [query], ["pop"], [query]]], [[["pop"]]], *[case() for _ in range(7 + d)]]
    return Variant("run_stack", "def run_stack(ops: list[list]) -> list", rules, solution, inputs)


def lru(rng: np.random.Generator, d: int) -> Variant:
    cap = int(rng.integers(1, 4))
    rules = (
        f"Simulate an LRU cache of capacity {cap}. ops is a list of ['put', key, value] and ['get', key]. "
        "A get returns the value (or None) and marks the key as recently used; a put inserts or updates the "
        "key, marks it recently used and, when the cache is over capacity, evicts the least recently used "
        "key. Return the list of get results."
    )
    solution = f"""def run_lru(ops: list) -> list:
    cache, out = {{}}, []
    for op in ops:
        if op[0] == "get":
            if op[1] in cache:
                cache[op[1]] = cache.pop(op[1])
                out.append(cache[op[1]])
            else:
                out.append(None)
        else:
            cache.pop(op[1], None)
            cache[op[1]] = op[2]
            if len(cache) > {cap}:
                cache.pop(next(iter(cache)))
    return out
"""
    keys = "abcd"[: 2 + min(d, 2)]

    def case() -> list[Any]:
        ops = []
        for _ in range(int(rng.integers(2, 8 + 4 * d))):
            k = _pick(rng, list(keys))
            ops.append(["put", k, int(rng.integers(0, 10))] if rng.random() < 0.5 else ["get", k])
        return [ops]

    inputs = [[[["put", "a", 1], ["get", "a"], ["get", "b"]]], *[case() for _ in range(8 + d)]]
    return Variant("run_lru", "def run_lru(ops: list[list]) -> list[int | None]", rules, solution, inputs)


def brackets(rng: np.random.Generator, d: int) -> Variant:
    pairs = ["()", "[]", "{}", "<>"][: 1 + min(d, 3)]
    rules = (
        f"Return True if the brackets {' '.join(pairs)} in the string are balanced and properly nested. "
        "Other characters are ignored."
    )
    opens = "".join(p[0] for p in pairs)
    closes = "".join(p[1] for p in pairs)
    solution = f"""def balanced(s: str) -> bool:
    match = {dict(zip(closes, opens, strict=False))!r}
    stack = []
    for ch in s:
        if ch in {opens!r}:
            stack.append(ch)
        elif ch in match:
            if not stack or stack.pop() != match[ch]:
                return False
    return not stack
"""

    def sample() -> str:
        s = ""
        for _ in range(int(rng.integers(1, 5 + d))):
            p = _pick(rng, pairs)
            s = _pick(rng, [p[0] + s + p[1], s + p, p + s])
        if rng.random() < 0.5:
            i = int(rng.integers(len(s) + 1))
            s = s[:i] + _pick(rng, list(opens + closes + "x")) + s[i:]
        return s

    inputs = [[pairs[0]], [pairs[0][::-1]], [""], *[[sample()] for _ in range(7 + d)]]
    return Variant("balanced", "def balanced(s: str) -> bool", rules, solution, inputs)


# -- small algorithms ------------------------------------------------------------------


def search_first(rng: np.random.Generator, d: int) -> Variant:
    last = bool(rng.integers(2)) if d >= 1 else False
    which = "last" if last else "first"
    rules = f"xs is sorted in non-decreasing order. Return the index of the {which} occurrence of target, or -1."
    solution = f"""def find(xs: list, target: int) -> int:
    lo, hi, found = 0, len(xs) - 1, -1
    while lo <= hi:
        mid = (lo + hi) // 2
        if xs[mid] == target:
            found = mid
            if {last}:
                lo = mid + 1
            else:
                hi = mid - 1
        elif xs[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return found
"""

    def case() -> list[Any]:
        xs = sorted(_ints(rng, int(rng.integers(0, 12 + 4 * d)), 0, 6 + d))
        return [xs, int(rng.integers(-1, 8 + d))]

    inputs = [[[1, 2, 2, 3], 2], [[], 1], *[case() for _ in range(7 + d)]]
    return Variant("find", "def find(xs: list[int], target: int) -> int", rules, solution, inputs)


def coins(rng: np.random.Generator, d: int) -> Variant:
    ways = bool(rng.integers(2)) if d >= 2 else False
    what = "the number of different multisets of coins" if ways else "the fewest coins (or -1 if impossible)"
    rules = (
        f"Given coin denominations (unlimited supply of each) and an amount, return {what} that add up to "
        "the amount."
        + (" An amount of 0 has exactly one (empty) multiset." if ways else " An amount of 0 needs 0 coins.")
    )
    if ways:
        solution = """def coins(denoms: list, amount: int) -> int:
    ways = [1] + [0] * amount
    for c in denoms:
        for a in range(c, amount + 1):
            ways[a] += ways[a - c]
    return ways[amount]
"""
    else:
        solution = """def coins(denoms: list, amount: int) -> int:
    inf = float("inf")
    best = [0] + [inf] * amount
    for a in range(1, amount + 1):
        for c in denoms:
            if c <= a and best[a - c] + 1 < best[a]:
                best[a] = best[a - c] + 1
    return -1 if best[amount] == inf else best[amount]
"""

    def case() -> list[Any]:
        denoms = sorted(set(_ints(rng, int(rng.integers(1, 4 + d)), 2 if d >= 1 else 1, 12)))
        return [denoms, int(rng.integers(0, 20 * (d + 1)))]

    inputs = [[[1, 2, 5], 11], [[2], 3], *[case() for _ in range(7 + d)]]
    return Variant("coins", "def coins(denoms: list[int], amount: int) -> int", rules, solution, inputs)


def intervals(rng: np.random.Generator, d: int) -> Variant:
    touching = bool(rng.integers(2))
    rules = (
        "Merge overlapping closed intervals [start, end] and return them sorted by start, as a list of "
        f"[start, end] lists. Intervals that only touch (one ends where the next starts) "
        f"{'are merged' if touching else 'stay separate'}."
    )
    if d >= 1:
        rules += " The input is not sorted."
    cmp = "<=" if touching else "<"
    solution = f"""def merge(items: list) -> list:
    out = []
    for start, end in sorted(items):
        if out and start {cmp} out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out
"""

    def case() -> list[Any]:
        items = []
        for _ in range(int(rng.integers(0, 5 + 2 * d))):
            a = int(rng.integers(0, 20 + 10 * d))
            items.append([a, a + int(rng.integers(0, 6))])
        return [items if d >= 1 else sorted(items)]

    inputs = [[[[1, 3], [2, 4]]], [[[1, 2], [2, 3]]], *[case() for _ in range(7 + d)]]
    return Variant("merge", "def merge(items: list[list[int]]) -> list[list[int]]", rules, solution, inputs)


def islands(rng: np.random.Generator, d: int) -> Variant:
    diagonal = d >= 2 and bool(rng.integers(2))
    what = _pick(rng, ["count", "largest"])
    goal = "the number of islands" if what == "count" else "the size (cells) of the largest island (0 if none)"
    rules = (
        f"grid is a list of equal-length strings of '#' (land) and '.' (water). Return {goal}. Land cells "
        f"connect {'horizontally, vertically and diagonally' if diagonal else 'horizontally and vertically'}."
    )
    steps = "[(-1, 0), (1, 0), (0, -1), (0, 1)" + (", (-1, -1), (-1, 1), (1, -1), (1, 1)]" if diagonal else "]")
    solution = f"""def islands(grid: list) -> int:
    seen, sizes = set(), []
    for r, row in enumerate(grid):
        for c, cell in enumerate(row):
            if cell != "#" or (r, c) in seen:
                continue
            seen.add((r, c))
            todo, size = [(r, c)], 0
            while todo:
                y, x = todo.pop()
                size += 1
                for dy, dx in {steps}:
                    ny, nx = y + dy, x + dx
                    if 0 <= ny < len(grid) and 0 <= nx < len(grid[ny]) and grid[ny][nx] == "#" \\
                            and (ny, nx) not in seen:
                        seen.add((ny, nx))
                        todo.append((ny, nx))
            sizes.append(size)
    return {"len(sizes)" if what == "count" else "max(sizes, default=0)"}
"""

    def case() -> list[Any]:
        h, w = int(rng.integers(1, 4 + d)), int(rng.integers(1, 5 + d))
        return [["".join("#" if rng.random() < 0.45 else "." for _ in range(w)) for _ in range(h)]]

    inputs: list[list[Any]] = [[["#.#", "##."]], [[]], *[case() for _ in range(7 + d)]]
    return Variant("islands", "def islands(grid: list[str]) -> int", rules, solution, inputs)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family("caesar", "strings", caesar),
        Family("run-length", "strings", run_length),
        Family("palindrome", "strings", palindrome),
        Family("char-histogram", "strings", char_histogram),
        Family("rotate", "lists", rotate),
        Family("window-sum", "lists", window_sum),
        Family("dedupe", "lists", dedupe),
        Family("kth-largest", "lists", kth_largest),
        Family("to-base", "math", to_base),
        Family("digit-power", "math", digit_power),
        Family("primes", "math", primes),
        Family("key-values", "parsing", key_values),
        Family("rpn", "parsing", rpn),
        Family("duration", "parsing", duration),
        Family("stack", "data-structures", min_stack),
        Family("lru", "data-structures", lru),
        Family("brackets", "data-structures", brackets),
        Family("binary-search", "algorithms", search_first),
        Family("coins", "algorithms", coins),
        Family("intervals", "algorithms", intervals),
        Family("islands", "algorithms", islands),
    ]
}

"""`same`, the host's comparison of a solution's return value with the expected one: exact
types (True is not 1) and a tolerance for floats, at every depth, set members and dict keys included."""

from __future__ import annotations

import math

import pytest

from agentenv.envs.code import _codec
from agentenv.envs.code._codec import decode, encode, same

NAN = math.nan


def _judge(expected, got) -> bool:
    """As the verifier does: both values cross the sandbox boundary encoded, then `same` on the host."""
    return same(decode(encode(expected)), decode(encode(got)))


@pytest.mark.parametrize(
    ("expected", "got"),
    [
        ({1, 2}, {True, 2}),
        ({1, 2}, {1.0, 2.0}),
        ({1: "a"}, {True: "a"}),
        ({1: "a"}, {1.0: "a"}),
        ({(1, 0)}, {(True, False)}),
        ({0: "a"}, {False: "a"}),
        ({"k": {1}}, {"k": {True}}),
        ([{(1, 2.5)}], [{(True, 2.5)}]),
    ],
)
def test_a_value_of_another_type_or_value_in_a_set_or_a_dict_key_is_refused(expected, got):
    assert not _judge(expected, got)


@pytest.mark.parametrize(
    ("expected", "got"),
    [
        ({0.1 + 0.2}, {0.3}),
        ({NAN}, {NAN}),
        ({0.1 + 0.2: "a"}, {0.3: "a"}),
        ({NAN: 1.0}, {NAN: 1.0 + 1e-12}),
        ({(1, 0.1 + 0.2), (1, 0.3 + 1e-3)}, {(1, 0.3), (1, 0.301)}),
        ({None, 0.5, "a", b"b"}, {"a", b"b", None, 0.5 + 1e-12}),
        ([{1: {0.1 + 0.2}}], [{1: {0.3}}]),
    ],
)
def test_an_equal_set_or_dict_passes_within_the_float_tolerance(expected, got):
    assert _judge(expected, got)


def test_a_float_keys_value_is_compared_with_the_value_of_the_key_it_pairs_with():
    assert _judge({0.1 + 0.2: 1, 1.5: [2]}, {0.3: 1, 1.5: [2]})
    assert not _judge({0.1 + 0.2: 1}, {0.3: True})
    assert not _judge({0.1 + 0.2: 1, 1.5: 2}, {0.3: 2, 1.5: 1})


def test_near_ties_are_paired_one_to_one_whatever_the_order():
    # 1.0 fits both got members; greedy pairing of it with 1.0000005 would strand 1.000001.
    expected, got = {1.0, 1.000001}, {1.0000005, 1.0000015}
    assert _judge(expected, got)
    # Each member has a near one on the other side, but two expected members would share one got member.
    assert not _judge({1.0000001, 0.9999999, 5.0}, {1.0, 5.0000001, 4.9999999})


@pytest.mark.parametrize("loose", [False, True])
def test_large_sets_and_dicts_cost_a_linear_number_of_comparisons(monkeypatch, loose):
    """A solution controls the value compared: thousands of members must not cost a quadratic search."""
    n = 3000
    calls = 0
    original = _codec.same

    def counted(*args, **kwargs):
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(_codec, "same", counted)
    if loose:  # every member off by a rounding error: none can be found by hashing
        expected = {(i, i + 0.1): i for i in range(n)}
        got = {(i, i + 0.1 + 1e-12 * i): i for i in reversed(range(n))}
    else:
        expected = {(i, str(i)): i for i in range(n)}
        got = {(i, str(i)): i for i in reversed(range(n))}
    assert _codec.same(expected, got)
    assert _codec.same(set(expected), set(got))
    one_as_true = {(True if k[0] == 1 else k[0], k[1]): v for k, v in got.items()}
    assert not _codec.same(expected, one_as_true)
    assert not _codec.same(set(expected), set(one_as_true))
    assert calls <= 30 * n

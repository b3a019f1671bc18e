r"""The answer rule every adapter reads replies by: one answer or a format error, normalisation, numbers."""

from __future__ import annotations

import pytest

from agentenv import ParseError
from agentenv.envs import answers
from agentenv.envs.answers import (
    AmbiguousAnswer,
    extract_answer,
    extract_move,
    is_correct,
    normalize,
    parse_number,
    same_answer,
)


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("42", "42"),
        ("So the total is \\boxed{42}.", "42"),
        ("<answer>7</answer>", "7"),
        ("<Answer>7</ANSWER>", "7"),  # the tag's name in any case
        ("<answer>\\boxed{8}</answer>", "8"),  # one marker inside one of another kind
        ("\\boxed{<answer>8</answer>}", "8"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # braces balanced
        ("\\boxed {10}", "10"),
        ("<think>maybe \\boxed{1} or \\boxed{2}</think>\\boxed{2}", "2"),  # reasoning is skipped
        ("<think>it is 3</think> 4", " 4"),
        ("Put it in \\boxed{}. It is \\boxed{5}.", "5"),  # an empty marker holds no answer
        ("a } stray { brace \\boxed{6}", "6"),  # braces outside a box are text
        ("<answer>1, 2, 3</answer>", "1, 2, 3"),  # one marker holding a list: one answer, the list
    ],
)
def test_the_answer_is_the_one_marker_or_the_whole_reply(reply, answer):
    assert extract_answer(reply) == answer


@pytest.mark.parametrize(
    "reply",
    [
        "\\boxed{1} then \\boxed{2}",
        "\\boxed{2} then \\boxed{2}",  # the same answer twice is still two
        "<answer>1</answer> <answer>2</answer>",
        "<answer>1</answer> <ANSWER>2</Answer>",  # the case of a tag's name makes no second kind
        "\\boxed{3} ... <answer>4</answer>",
        "<answer>\\boxed{1} \\boxed{2}</answer>",  # two inside one
        "<answer><answer>4</answer></answer>",  # a marker inside its own kind
        "\\boxed{\\boxed{9}}",
        "<answer>1 <answer>2</answer>",  # an unclosed tag beside a closed one
        "<answer>2</answer> <answer>1",
        "\\boxed{11",
        "4</answer>",
        "<answer>\\boxed{4</answer>}",  # markers that cross
        "<think>fine</think><answer>1</answer><answer>2</answer>",
    ],
)
def test_a_reply_with_more_than_one_answer_or_unpaired_markup_is_ambiguous(reply):
    with pytest.raises(AmbiguousAnswer):
        extract_answer(reply)
    assert not is_correct(reply, "2") and not is_correct(reply, "1")


@pytest.mark.parametrize(
    ("reply", "move"),
    [
        ("I play [4] now", "4"),
        ("<answer>[4]</answer>", "4"),
        ("\\boxed{[4]}", "4"),
        ("<think>[3] or [4]?</think> [4]", "4"),
        ("[Bid on Item 0: 250]", "Bid on Item 0: 250"),
        ("no move here", None),
        ("[] and then [5]", "5"),
    ],
)
def test_a_move_is_the_one_bracketed_answer(reply, move):
    assert extract_move(reply) == move


@pytest.mark.parametrize(
    "reply",
    ["[1] [2]", "[[4]]", "[4", "4]", "<answer>[1]</answer> <answer>x</answer>", "\\boxed{[1] [2]}", "[1</answer>]"],
)
def test_a_move_by_the_same_rule_refuses_more_than_one_answer(reply):
    with pytest.raises(AmbiguousAnswer):
        extract_move(reply)


def test_an_ambiguous_answer_is_a_parse_error_so_every_adapter_makes_it_a_format_error():
    assert issubclass(AmbiguousAnswer, ParseError) and issubclass(AmbiguousAnswer, ValueError)


@pytest.mark.parametrize(
    ("candidate", "reference"),
    [
        ("1,000", "1000"),
        ("1e3", "1000"),
        ("1000.0", "1,000"),
        ("$1,000", "1000"),
        ("+5", "5"),
        ("-0", "0"),
        ("0.50", ".5"),
        ("1.5E2", "150"),
        ("  Paris. ", "paris"),
        ("$x+1$", "x+1"),
        ("\\(7\\)", "7"),
        ("\uff21\uff22\uff23", "abc"),  # NFKC: full-width letters
        ("4\u200b2", "42"),  # a zero-width space is invisible
        ("new\tyork\n", "New York"),
        ("inf", "INF"),
    ],
)
def test_equal_answers(candidate, reference):
    assert same_answer(candidate, reference)


@pytest.mark.parametrize(
    ("candidate", "reference"),
    [
        ("1,00", "100"),  # thousands commas come in groups of three
        ("1,2,3", "123"),
        ("3.14159", "3.14"),  # no tolerance
        ("3/4", "0.75"),  # fractions are text
        ("72 dollars", "72"),
        ("nan", "0"),
        ("infinity", "inf"),
        ("-5", "5"),
        ("42%", "42"),
        ("\u0664\u0662", "42"),  # Arabic-Indic digits are not ASCII digits
        ("4²", "42"),  # NFKC alone reads a superscript as a digit
        ("x₁₂", "x12"),
        ("⑫", "12"),
        ("½", "12"),
    ],
)
def test_different_answers(candidate, reference):
    assert not same_answer(candidate, reference)


def test_numbers_are_compared_as_exact_digits_and_exponent():
    assert parse_number("1,234.500e-2") == ("", "12345", -3)
    assert parse_number("000") == ("", "0", 0)
    assert parse_number("1e99999999999999999999") is None  # an exponent past 18 digits is text
    assert parse_number(normalize("NaN")) is None and parse_number("inf") is None


def test_a_stuffed_reply_scores_nothing():
    many = " ".join(str(i) for i in range(1, 101))
    assert not is_correct(many, "42")
    assert not is_correct("".join(f"\\boxed{{{i}}}" for i in range(1, 101)), "42")
    assert not is_correct("".join(f"\\boxed{{{i}}}" for i in range(1, 101)), "100")  # nor the last
    assert not is_correct("\\boxed{41, 42, 43}", "42")
    assert not is_correct("\\boxed{41 or 42}", "42")
    assert not is_correct("<answer>41</answer><answer>42 43</answer>", "42")


def test_a_reply_quoting_the_question_is_not_its_answer():
    question = "What is 6 * 7? Put the answer in \\boxed{}."
    assert not is_correct(question, "42")
    assert is_correct(question + " It is \\boxed{42}.", "42")


@pytest.mark.parametrize(
    "reply",
    [
        "1e999999",
        "9" * 100_000,
        "1" + ",000" * 30_000,
        "1" + ",000" * 30_000 + "x",  # a near-number: the regex backs off in linear time
        "1." + "0" * 120_000 + "e",
        "\\boxed" + " " * 120_000,
        "\\boxed " * 10_000 + "{" * 50_000,
        "\\boxed{" * 50_000 + "1" + "}" * 50_000,
        "{" * 100_000,
        "\\boxed{1}" * 12_000,
        "<answer>" * 15_000 + "</answer>" * 10,
        "<AnSwEr>" * 60_000,
        "</answer>" * 60_000,
        "[" * 100_000 + "]" * 100_000,
        "\\boxed{}" * 50_000 + "\\boxed{42}",
        "x" * 1_000_000,
        "\x00\x01\x1b[31m42\x7f",
        "NaN",
        "-inf",
    ],
)
def test_hostile_replies_are_scored_without_raising_or_hanging(reply):
    assert is_correct(reply, "42") in (True, False)
    assert not is_correct(reply, "7")
    for read in (extract_answer, extract_move):  # an AmbiguousAnswer is the one error they raise
        try:
            read(reply)
        except AmbiguousAnswer:
            pass


def test_control_characters_are_spaces_and_huge_numbers_compare_exactly():
    assert is_correct("\x00 42 \x1b", "42")
    big = "9" * 100_000
    assert is_correct(f"\\boxed{{{big}}}", big) and not is_correct(f"\\boxed{{{big}8}}", big)
    assert is_correct("1e999999", "10e999998") and not is_correct("1e999999", "1e999998")


def test_the_answer_is_normalised_once_however_many_aliases_there_are(monkeypatch):
    # NFKC can make a reply 18 times longer (U+FDFA): normalising it again for every
    # alias made one step of a many-alias dataset take tens of seconds.
    seen = []
    real = answers.normalize
    monkeypatch.setattr(answers, "normalize", lambda text: seen.append(text) or real(text))
    reply = "\ufdfa" * 1000
    aliases = [f"alias {i}" for i in range(30)]
    assert not answers.matches(reply, "William Shakespeare", aliases)
    assert seen.count(reply) == 1 and len(seen) == 1 + 1 + len(aliases)
    assert answers.matches(
        "\ufdfa",
        "alias 3",
        ["\u0635\u0644\u0649 \u0627\u0644\u0644\u0647 \u0639\u0644\u064a\u0647 \u0648\u0633\u0644\u0645"],
    )

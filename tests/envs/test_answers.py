r"""The answer rule of the question-answer env: extraction, normalisation, numbers, and hostile replies."""

from __future__ import annotations

import pytest

from agentenv.envs import answers
from agentenv.envs.answers import extract_answer, is_correct, normalize, parse_number, same_answer


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("42", "42"),
        ("So the total is \\boxed{42}.", "42"),
        ("\\boxed{1} then \\boxed{2}", "2"),  # the last one only
        ("<answer>7</answer>", "7"),
        ("<answer>1</answer> <answer>2</answer>", "2"),
        ("\\boxed{3} ... <answer>4</answer>", "4"),  # whichever closes last
        ("<answer>5</answer> ... \\boxed{6}", "6"),
        ("<answer>\\boxed{8}</answer>", "8"),  # read again inside
        ("\\boxed{\\boxed{9}}", "9"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # braces balanced
        ("\\boxed {10}", "10"),
        ("\\boxed{11", "\\boxed{11"),  # incomplete markup is no markup
        ("<think>maybe \\boxed{1}</think>\\boxed{2}", "2"),
        ("<think>it is 3</think> 4", " 4"),  # reasoning is skipped
    ],
)
def test_the_answer_is_the_last_complete_markup_or_the_whole_reply(reply, answer):
    assert extract_answer(reply) == answer


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


def test_a_stuffed_reply_is_scored_on_one_candidate():
    many = " ".join(str(i) for i in range(1, 101))
    assert not is_correct(many, "42")
    assert not is_correct("".join(f"\\boxed{{{i}}}" for i in range(1, 101)), "42")
    assert is_correct("".join(f"\\boxed{{{i}}}" for i in range(1, 101)), "100")  # the last one is the answer
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
        "x" * 1_000_000,
        "\x00\x01\x1b[31m42\x7f",
        "NaN",
        "-inf",
    ],
)
def test_hostile_replies_are_scored_without_raising_or_hanging(reply):
    assert is_correct(reply, "42") in (True, False)
    assert not is_correct(reply, "7")


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

"""The reasoning-gym adapter: ids from its registry, tasks, scoring, and what a policy cannot do to the reward."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from fractions import Fraction

import numpy as np
import pytest

pytest.importorskip("reasoning_gym")

from reasoning_gym.factory import DATASETS

import agentenv
from agentenv import check_env
from agentenv.core.errors import EnvArgumentError, UnknownEnvError
from agentenv.core.task import TaskSet
from agentenv.envs.adapters import _reasoning_gym_scorer as scorer_module
from agentenv.envs.adapters.reasoning_gym import ReasoningGymEnv, env_name, list_parts, oracle
from agentenv.registry import _ID_RE

NO_REFERENCE = {"boxnet", "graph_color", "propositional_logic", "rubiks_cube", "rush_hour"}
"""Datasets whose entries have no reference answer (answer None): their scorers check a solution."""
ACCEPTS_OTHERS = {"game_of_life_halting", "puzzle24"}
"""Their 0.1.25 scorers accept one task's answer for another: game_of_life_halting compares
bool(answer) == bool(reference) (every non-empty answer scores 1.0), puzzle24 checks that the
expression makes 24 from four numbers, not from the task's. The hedge check (rightly) lets
no answer score there."""
NEEDS_CONFIG = {"composite"}
"""Its default config names no dataset: it is made with config={"datasets": ...} only."""
SLOW = {"knight_swap"}
"""About 0.5 s per entry: too slow to generate in a quick test."""


def tagged(answer: object) -> str:
    return f"<answer>{answer}</answer>"


def reference(env: ReasoningGymEnv) -> str:
    return tagged(env.task.payload["answer"])


@pytest.fixture(scope="module")
def legs() -> ReasoningGymEnv:
    return ReasoningGymEnv("leg_counting", size=16)


# -- ids, tasks, metadata -------------------------------------------------------------


def test_every_dataset_of_the_registry_has_an_id_that_make_builds():
    ids = [s.id for s in agentenv.envs_list() if s.id.startswith("reasoning-gym/")]
    assert len(ids) == len(DATASETS) and all(_ID_RE.match(i) for i in ids)
    assert env_name("a b/c") == "a-b-c"  # the mapping for a name an id cannot hold
    env = agentenv.make("reasoning-gym/leg_counting-v0", config={"max_animals": 4}, size=5, seed=3)
    assert isinstance(env, ReasoningGymEnv) and len(env.tasks) == 5 and env.dataset == "leg_counting"
    assert agentenv.spec("reasoning-gym/leg_counting-v0").make_oracle() is not None


def test_tasks_are_generated_from_the_seed_and_carry_the_difficulty():
    a, b = ReasoningGymEnv("basic_arithmetic", size=4, seed=1), ReasoningGymEnv("basic_arithmetic", size=4, seed=1)
    assert [t.prompt for t in a.tasks] == [t.prompt for t in b.tasks]
    assert [t.prompt for t in ReasoningGymEnv("basic_arithmetic", size=4, seed=2).tasks] != [t.prompt for t in a.tasks]
    easy = ReasoningGymEnv("leg_counting", config={"max_animals": 4}, size=2).tasks[0].metadata
    hard = ReasoningGymEnv("leg_counting", config={"max_animals": 30}, size=2).tasks[0].metadata
    assert (easy.family, easy.difficulty, hard.difficulty) == ("leg_counting", 3, 29)
    assert "max_animals=4" in easy.tags and "level:num_animals=3" in easy.tags


def test_mutate_makes_a_new_task_of_the_same_dataset_and_difficulty_that_the_oracle_solves(legs):
    task = legs.tasks[0]
    variant = legs.mutate(task, np.random.default_rng(0))
    assert variant is not None and variant.prompt != task.prompt and variant.metadata == task.metadata
    assert variant.id not in legs.tasks
    legs.reset(seed=0, options={"task": variant})
    *_, info = legs.step(reference(legs))
    assert info["success"] is True


def test_tasks_saved_to_jsonl_load_into_a_new_env(tmp_path, legs):
    path = tmp_path / "tasks.jsonl"
    legs.tasks[:3].to_jsonl(path)
    env = ReasoningGymEnv("leg_counting", tasks=TaskSet.from_jsonl(path))
    env.reset(seed=0)
    *_, info = env.step(reference(env))
    assert info["success"] is True
    with pytest.raises(EnvArgumentError, match="not of dataset 'basic_arithmetic'"):
        ReasoningGymEnv("basic_arithmetic", tasks=TaskSet.from_jsonl(path))


# -- bad input ------------------------------------------------------------------------------


def test_an_unknown_dataset_gets_a_did_you_mean():
    with pytest.raises(EnvArgumentError, match=re.escape("no dataset 'leg_countin'. Did you mean 'leg_counting'")):
        ReasoningGymEnv("leg_countin")
    with pytest.raises(UnknownEnvError, match="Did you mean 'reasoning-gym/leg_counting-v0'"):
        agentenv.make("reasoning-gym/leg_countin-v0")


def test_a_bad_config_field_gets_a_did_you_mean():
    with pytest.raises(EnvArgumentError, match=re.escape("no field 'max_animal'. Did you mean 'max_animals'")):
        ReasoningGymEnv("leg_counting", config={"max_animal": 4})
    with pytest.raises(EnvArgumentError, match=re.escape("pass seed=... to the env itself")):
        ReasoningGymEnv("leg_counting", config={"seed": 4})


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"max_animals": "ten"}, "field 'max_animals': Input should be a valid integer"),
        ({"max_animals": 1000}, "AssertionError: max_animals must be <= number of available animals"),
        ({"min_animals": 5, "max_animals": 4}, "max_animals must be >= min_animals"),
    ],
)
def test_a_bad_config_value_fails_in_one_line_with_the_datasets_message(config, message):
    with pytest.raises(EnvArgumentError, match=message) as caught:
        ReasoningGymEnv("leg_counting", config=config)
    assert "\n" not in str(caught.value)


def test_bad_env_arguments_are_refused():
    with pytest.raises(EnvArgumentError, match="max_attempts=3 needs multi_turn=True"):
        ReasoningGymEnv("leg_counting", max_attempts=3)
    with pytest.raises(EnvArgumentError, match="size: Input should be greater than or equal to 1"):
        ReasoningGymEnv("leg_counting", size=0)
    with pytest.raises(EnvArgumentError, match="score_timeout_s: Input should be a valid number"):
        ReasoningGymEnv("leg_counting", score_timeout_s="5")


# -- the contract and scoring ---------------------------------------------------------------


@pytest.mark.parametrize("dataset", ["leg_counting", "basic_arithmetic", "word_sorting", "spell_backward"])
def test_check_env_passes(dataset):
    env = ReasoningGymEnv(dataset, size=4)
    check_env(env, actions=lambda e: [reference(e)])
    multi = ReasoningGymEnv(dataset, size=4, multi_turn=True)
    check_env(multi, actions=["<answer>no</answer>", "<answer>still no</answer>"])


def test_the_oracle_scores_1_and_a_wrong_answer_less_across_20_datasets_of_the_registry():
    names = sorted(set(DATASETS) - NO_REFERENCE - ACCEPTS_OTHERS - NEEDS_CONFIG - SLOW)
    for name in random.Random(18).sample(names, 20):
        env = ReasoningGymEnv(name, size=3)
        for task in env.tasks:
            env.reset(seed=0, options={"task": task})
            *_, info = env.step(reference(env))
            assert info["success"] is True, (name, task.id, env.state.note)
            env.reset(seed=0, options={"task": task})
            *_, info = env.step(tagged("wrong"))
            assert info["task_reward"] < 1.0 and info["success"] is False, (name, task.id)


def test_multi_turn_gives_feedback_without_the_answer_and_another_try(legs):
    env = ReasoningGymEnv("leg_counting", size=16, multi_turn=True, max_attempts=3)
    env.reset(seed=0)
    answer = env.task.payload["answer"]
    obs, reward, terminated, truncated, info = env.step(tagged("-1"))
    assert not terminated and not truncated and reward == 0.0
    assert obs[0]["content"].startswith("Incorrect") and answer not in obs[0]["content"]
    *_, terminated, _, info = env.step(reference(env))
    assert terminated and info["success"] is True and env.state.attempts == 2
    env.reset(seed=0)
    ends = [env.step(tagged("-1"))[2] for _ in range(3)]
    assert ends == [False, False, True] and env.state.attempts == 3


# -- attacks: one test each ----------------------------------------------------------------


def test_a_reply_listing_many_candidates_does_not_score(legs):
    legs.reset(seed=0)
    stuffed = " ".join(str(n) for n in range(400))  # every leg count the tasks ask for
    *_, info = legs.step(tagged(stuffed))
    assert info["task_reward"] == 0.0
    legs.reset(seed=0)
    every_answer = "\n".join(t.payload["answer"] for t in legs.tasks)
    *_, info = legs.step(tagged(every_answer))
    assert info["task_reward"] == 0.0


def test_several_answer_tags_are_a_format_error_and_nothing_is_scored(legs):
    legs.reset(seed=0)
    obs, reward, *_, info = legs.step(reference(legs) + tagged("1") + tagged("2"))
    assert info["error_kind"] == "format" and info["task_reward"] == 0.0 and reward < 0
    assert obs[0]["content"] == "Error: more than one answer: give exactly one" and legs.state.attempts == 0
    retry = ReasoningGymEnv("leg_counting", size=16, multi_turn=True, max_attempts=2)
    retry.reset(seed=0)
    *_, terminated, _, info = retry.step(tagged("1") + reference(retry))  # refused: no attempt used
    assert info["error_kind"] == "format" and not terminated and retry.state.attempts == 0
    *_, terminated, _, info = retry.step(reference(retry))
    assert terminated and info["success"] is True and retry.state.attempts == 1


# Forms of "the right answer R among others" that each dataset's own scorer paid 1 (or 0.5)
# before the list-of-candidates check (0.1.25; W is another task's answer, no decoy's).
PAID_LISTS = {
    "advanced_geometry": ["{R}, {W}"],
    "fraction_simplification": ["{R}, {W}", "{R} {W}", "{R}\n{W}", "{R} or {W}"],
    "gsm_symbolic": ["{R}, {W}", "{R} {W}", "{R}\n{W}", "{R} or {W}", "[{R}, {W}]"],
    "intermediate_integration": ["{R} or {W}"],
    "mini_sudoku": ["{R}\n{W}"],
    "polynomial_multiplication": ["{R} or {W}"],
    "quantum_lock": ["{R}, {W}", "{W}, {R}"],
    "simple_integration": ["{R} or {W}"],
    "sokoban": ["{R}, {W}", "{R} {W}", "{R}\n{W}", "{R} or {W}", "[{R}, {W}]"],
    "sudoku": ["{R}\n{W}"],
    "time_intervals": ["{R}, {W}", "{R}\n{W}", "{R} or {W}"],
}


@pytest.mark.slow
@pytest.mark.parametrize("dataset", sorted(PAID_LISTS))
def test_a_list_of_candidates_in_one_answer_does_not_score(dataset):
    env = ReasoningGymEnv(dataset, size=6, decoys=0)  # no decoys: the list check alone
    task = env.tasks[0]
    right = task.payload["answer"]
    wrong = next(t.payload["answer"] for t in env.tasks if t.payload["answer"] != right)
    env.reset(options={"task": task.id})
    *_, info = env.step(tagged(right))
    assert info["success"] is True, env.state.note  # the right answer alone scores
    for form in PAID_LISTS[dataset]:
        env.reset(options={"task": task.id})
        *_, info = env.step(tagged(form.format(R=right, W=wrong)))
        assert info["task_reward"] == 0.0 and info["error_kind"] is None, (form, env.state.note)
        assert env.state.note == "the answer is a list of candidates: one of its parts scores as well alone" or (
            dataset in ("sudoku", "mini_sudoku")  # their grid scorer reads every row of digits
        ), (form, env.state.note)


def test_the_list_check_cuts_only_at_separators_the_reference_lacks():
    assert list_parts("28080, 44", "28080") == ["28080", "44"]
    assert list_parts("42 apples", "42") == ["42", "apples"]
    assert list_parts("(1, 2), (3, 4)", "(1, 2)") == ["(1, 2)", "(3, 4)"]  # outside brackets
    assert list_parts("0.0, 0.5909", "-1.0, 2.0") == []  # a list answering a list
    assert list_parts("5 days", "3 days") == [] and list_parts("anything, at all", None) == []
    many = list_parts(", ".join(str(n) for n in range(100)), "7")
    assert many == ["0", "1", "2", "3", "96", "97", "98", "99"]  # the first and last MAX_PARTS / 2


def test_a_scorer_that_accepts_anything_is_exposed_by_the_decoys():
    env = ReasoningGymEnv("game_of_life_halting", size=6)
    env.reset(seed=0)
    *_, info = env.step(tagged("banana"))  # its scorer alone gives 1.0 to any non-empty answer
    assert info["task_reward"] == 0.0 and "hedge" in env.state.note


@pytest.mark.parametrize(
    ("reply", "error_kind"),
    [
        ("x" * (1 << 20), "format"),  # 1 MB: refused before anything reads it
        ("\ud800<answer>1</answer>", "format"),  # a lone surrogate is not text
        ("<answer>\x00\x01\x1b[2J\x7f</answer>", None),  # control characters: scored, 0
        (tagged("9" * 5000), None),  # past max_answer_chars: not scored
        (tagged("9" * 4090), None),  # a huge integer the scorer does read
        ({"role": "assistant", "content": "<answer>1</answer>", "x": json.loads("[" * 500 + "]" * 500)}, "format"),
        (tagged("1e999999"), None),
        ("<answer>" * 16_000, "format"),  # a tag inside a tag, none closed: not one answer
        ("<answer>1</answer>" + "<answer>" * 16_000, "format"),  # one tag, then unclosed ones
    ],
    ids=[
        "1MB",
        "lone-surrogate",
        "control-chars",
        "too-long",
        "huge-number",
        "deep-json",
        "huge-float",
        "unclosed",
        "one-closed",
    ],
)
def test_hostile_text_is_a_format_error_or_a_zero_never_a_crash(legs, reply, error_kind):
    legs.reset(seed=0)
    *_, info = legs.step(reply)
    assert info["error_kind"] == error_kind and info["failure"] != "infra" and info["task_reward"] in (0.0, None)


def test_a_scorer_that_raises_on_the_answer_scores_0_and_says_so_but_not_to_the_agent():
    env = ReasoningGymEnv("prime_factorization", size=2)  # int("zzz") inside its scorer
    env.reset(seed=0)
    *_, info = env.step(tagged("zzz"))
    assert info["task_reward"] == 0.0 and info["failure"] == "policy"
    assert env.state.note.startswith("the dataset's scorer failed on this answer: ValueError")
    multi = ReasoningGymEnv("prime_factorization", size=2, multi_turn=True)
    multi.reset(seed=0)
    obs, *_ = multi.step(tagged("zzz"))  # a scorer's message may quote the reference: not shown
    assert obs[0]["content"] == "Incorrect. Try again: 2 attempts left." and "ValueError" in multi.state.note


def test_an_answer_that_hangs_the_scorer_scores_0_and_the_next_step_works():
    env = ReasoningGymEnv("polynomial_multiplication", size=2, score_timeout_s=1.0)
    env.reset(seed=0)
    *_, info = env.step(tagged("9**9**9**9"))  # sympy, parsing it, computes the power for ever
    assert info["task_reward"] == 0.0 and info["failure"] == "policy" and "ran past 1 s" in env.state.note
    env.reset(seed=0)
    *_, info = env.step(reference(env))
    assert info["success"] is True


def test_after_the_scoring_process_restarts_an_honest_answer_scores_though_its_entry_is_slow_to_make():
    # A hostile answer's timeout kills the child, and its cache of entries with it. The
    # entry an answer is scored against is made again first, on its own clock: timed
    # with the answer, a knight_swap entry (about 1 s to make) scored the honest answer
    # 0, as the policy's failure, and killed the child again.
    env = ReasoningGymEnv("knight_swap", size=1, score_timeout_s=0.3)
    env.reset(seed=0)
    assert env.step(reference(env))[4]["success"] is True
    scorer_module.shared_scorer().close()
    env.reset(seed=0)
    *_, info = env.step(reference(env))
    assert info["success"] is True and info["failure"] == "none", env.state.note


@pytest.mark.parametrize("dataset", ["leg_counting", "gcd", "chain_sum", "products"])
def test_an_answer_holding_the_reference_is_no_partial_credit(dataset):
    # reasoning-gym's default scorer (leg_counting, gcd) and its decimal reward (chain_sum,
    # products) paid len(reference) / len(answer) to an answer holding the reference: a
    # wrong sign earned 0.5 to 0.9, so a policy unsure of a sign always wrote a minus.
    env = ReasoningGymEnv(dataset, size=8)
    for task in env.tasks:
        answer = str(task.payload["answer"]).strip()
        if answer.startswith("-") or answer.strip("0") == "":
            continue
        for wrong in (f"-{answer}", f"{answer}0", f"x{answer}"):
            env.reset(options={"task": task.id})
            assert env.step(tagged(wrong))[4]["task_reward"] == 0.0, wrong
        env.reset(options={"task": task.id})
        assert env.step(reference(env))[4]["task_reward"] == 1.0


def test_a_probability_cut_to_its_first_digits_is_no_answer():
    # coin_flip's scorer paid the share of the shorter number's digits that open both:
    # "0.3" for 0.3125 scored 1.0, so one significant digit solved most tasks.
    env = ReasoningGymEnv("coin_flip", size=16)
    cut = [t for t in env.tasks if len(str(t.payload["answer"])) > 4][:4]
    assert cut
    for task in cut:
        answer = str(task.payload["answer"])
        for wrong in (answer[:3], answer[:4]):
            env.reset(options={"task": task.id})
            assert env.step(tagged(wrong))[4]["task_reward"] == 0.0, (wrong, answer)
        env.reset(options={"task": task.id})
        assert env.step(tagged(str(Fraction(answer))))[4]["success"] is True  # the value, as a fraction


def test_zero_is_not_the_answer_to_a_probability_below_the_tolerance():
    # The scorer's tolerance is absolute (1e-4): "0" was within it of every tiny probability.
    env = ReasoningGymEnv("coin_flip", size=400)
    tiny = [t for t in env.tasks if float(Fraction(str(t.payload["answer"]))) < 1e-4][:2]
    assert tiny
    for task in tiny:
        env.reset(options={"task": task.id})
        assert env.step(tagged("0"))[4]["task_reward"] == 0.0
        env.reset(options={"task": task.id})
        assert env.step(tagged(str(task.payload["answer"])))[4]["success"] is True  # the exponent form
        env.reset(options={"task": task.id})
        assert env.step(tagged("1e999999999"))[4]["task_reward"] == 0.0  # refused, not computed


def _one_changed(answer: str) -> str:
    """``answer`` with its last digit (else letter) changed: a near miss, not the answer."""
    for i in range(len(answer) - 1, -1, -1):
        if answer[i].isdigit():
            return answer[:i] + str((int(answer[i]) + 1) % 10) + answer[i + 1 :]
        if answer[i].isalpha():
            return answer[:i] + ("b" if answer[i].lower() == "a" else "a") + answer[i + 1 :]
    return answer + "x"


def _clues_filled(task) -> str:
    """The puzzle's grid as the prompt shows it, each blank filled with 1: no solving at all."""
    rows = [line for line in task.prompt.splitlines() if re.fullmatch(r"[\d_ ]+", line.strip()) and "_" in line]
    return "\n".join(row.replace("_", "1") for row in rows)


def _input_words(task) -> str:
    return task.prompt.rsplit(": ", 1)[1].strip()


PARTIAL_CREDIT = {
    # dataset: a wrong answer that the 0.1.25 scorer paid (mean over 24 tasks, through this env)
    "sudoku": _clues_filled,  # 0.54: the given clues, blanks as 1
    "mini_sudoku": _clues_filled,  # 0.48
    "futoshiki": lambda t: _one_changed(t.payload["answer"]),  # 0.87
    "game_of_life": lambda t: _one_changed(t.payload["answer"]),  # 0.99 (the grid all dead: up to 0.96)
    "rectangle_count": lambda t: str(int(t.payload["answer"]) + 1),  # 0.64; "1" for any count: 0.22
    "time_intervals": lambda t: re.sub(r"\d+", lambda m: str(int(m[0]) + 1), t.payload["answer"], count=1),
    # time_intervals: "0 days" for 5 days was 0.95
    "manipulate_matrix": lambda t: f"{t.payload['answer']}\n{_one_changed(t.payload['answer'])}",  # two candidates: 0.5
    "tsumego": lambda t: f"{t.payload['answer']} {_one_changed(t.payload['answer'])}",  # 0.4
    "codeio": lambda t: f"{t.payload['answer']}\n{_one_changed(t.payload['answer'])}",  # about 0.5
    "figlet_font": lambda t: t.payload["answer"] + "s",  # 0.1 a letter in place: 0.6
    "spell_backward": lambda t: t.payload["answer"] + " " + t.payload["answer"],  # 0.93, 1.0 on some
    "letter_jumble": lambda t: t.payload["answer"] + " because it is",  # 1.0 on half the tasks
    "word_sorting": _input_words,  # the words unsorted: 0.24; the answer plus ", zzz": 1.0
    "number_sorting": lambda t: re.sub(r"-?\d+\.\d+", lambda m: str(round(float(m.group()))), t.payload["answer"]),
}
"""Datasets whose scorers paid a wrong answer, and a wrong answer each paid (see _Child)."""


@pytest.mark.parametrize("dataset", sorted(PARTIAL_CREDIT))
def test_a_wrong_answer_earns_no_partial_credit(dataset):
    env = ReasoningGymEnv(dataset, size=12)
    paid = {}
    for task in env.tasks:
        wrong = PARTIAL_CREDIT[dataset](task)
        if not wrong or wrong.strip() == task.payload["answer"].strip():
            continue
        env.reset(options={"task": task.id})
        paid[wrong[:60]] = env.step(tagged(wrong))[4]["task_reward"]
        env.reset(options={"task": task.id})
        assert env.step(reference(env))[4]["success"] is True  # the answer itself still scores
    assert paid and set(paid.values()) == {0.0}, paid


def test_extra_items_after_a_sorted_list_are_no_answer():
    env = ReasoningGymEnv("word_sorting", size=4)
    for task in env.tasks:
        env.reset(options={"task": task.id})
        assert env.step(tagged(task.payload["answer"] + ", zzz"))[4]["task_reward"] == 0.0


def test_lenient_formats_of_the_right_answer_still_score():
    cases = {
        "sudoku": lambda a: "\n".join(" ".join(row.split()) + "  " for row in a.splitlines()),
        "time_intervals": lambda a: a.split()[0] if a.endswith("days") else a,
        "spell_backward": str.upper,
        "letter_jumble": lambda a: "  " + a.lower() + " ",
        "number_sorting": lambda a: a.replace("'", '"'),
    }
    for dataset, variant in cases.items():
        env = ReasoningGymEnv(dataset, size=4)
        for task in env.tasks:
            env.reset(options={"task": task.id})
            assert env.step(tagged(variant(task.payload["answer"])))[4]["success"] is True, (dataset, task.id)


FORGE = '__import__(\'os\').write(3, b\'{"score": 1.0, "decoys": [], "error": null}\\n\') or 1'
"""Code that, run by a scorer, writes a reply line of its own to the scoring process's reply pipe."""


@pytest.mark.parametrize("dataset", ["n_queens", "string_insertion", "polynomial_multiplication", "countdown"])
def test_an_answer_a_scorer_evaluates_runs_no_code_and_cannot_forge_its_score(dataset):
    # n_queens and string_insertion eval() the answer, the others hand it to sympy's parse_expr:
    # the line above scored 1.0 on every task before.
    env = ReasoningGymEnv(dataset, size=4)
    for seed in range(2):
        env.reset(seed=seed)
        *_, info = env.step(tagged(FORGE))
        assert info["success"] is False and info["task_reward"] < 0.1
        env.reset(seed=seed)
        *_, info = env.step(reference(env))  # the same process, unharmed, scores the honest answer
        assert info["success"] is True


def test_a_scorer_still_evaluates_its_own_entrys_text():
    env = ReasoningGymEnv("bitwise_arithmetic", size=4)  # its scorer eval()s the problem, e.g. "(0x3a2f >> 0x2)"
    for seed in range(4):
        env.reset(seed=seed)
        assert env.step(reference(env))[4]["success"] is True
        env.reset(seed=seed)
        assert env.step(tagged(f"{env.task.payload['answer']} + 1"))[4]["success"] is False


def test_literal_answers_keep_their_partial_credit_and_math_answers_their_functions():
    chars = ReasoningGymEnv("string_insertion", size=2)
    chars.reset(seed=0)
    *_, info = chars.step(tagged(repr(list(chars.task.payload["answer"]))))  # a Python list of its characters
    assert info["task_reward"] == pytest.approx(0.1)
    integral = ReasoningGymEnv("intermediate_integration", size=8)  # exp, sin, cos, asin, sqrt, Integral
    assert {"exp(", "sin(", "asin(", "sqrt(", "Integral("} <= {
        f"{name}(" for t in integral.tasks for name in re.findall(r"([A-Za-z]+)\(", t.payload["answer"])
    }
    for task in integral.tasks:
        integral.reset(options={"task": task})
        assert integral.step(reference(integral))[4]["success"] is True, task.payload["answer"]


def test_a_killed_scoring_process_is_restarted(legs):
    legs.reset(seed=0)
    legs.step(reference(legs))  # the process is up
    proc = scorer_module.shared_scorer()._proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    legs.reset(seed=0)
    *_, info = legs.step(reference(legs))
    assert info["success"] is True and scorer_module.shared_scorer()._proc is not proc


def test_a_scoring_process_that_cannot_start_is_infra(monkeypatch, legs):
    broken = scorer_module.Scorer()
    monkeypatch.setattr(scorer_module.sys, "executable", "/bin/false")
    monkeypatch.setattr("agentenv.envs.adapters.reasoning_gym.shared_scorer", lambda: broken)
    legs.reset(seed=0)
    *_, terminated, truncated, info = legs.step(reference(legs))
    assert (terminated, truncated, info["failure"]) == (False, True, "infra")
    assert "did not start" in info["error"]


def test_the_oracle_policy_solves_through_rollout():
    trajectories = agentenv.rollout("reasoning-gym/leg_counting-v0", oracle(), n=4, env_kwargs={"size": 4})
    assert all(t.success for t in trajectories)
    json.dumps([t.model_dump(mode="json") for t in trajectories])


def test_the_composite_dataset_mixes_others_given_in_its_config():
    parts = [{"name": "leg_counting", "weight": 1, "config": {"max_animals": 3}}, {"name": "chain_sum", "weight": 1}]
    with pytest.raises(EnvArgumentError, match=re.escape("field 'datasets.1.config': Field required")):
        ReasoningGymEnv("composite", config={"datasets": parts})
    parts[1]["config"] = {}
    with pytest.raises(EnvArgumentError, match=re.escape("reasoning-gym's composite needs config={'datasets'")):
        agentenv.make("reasoning-gym/composite-v0")  # with its defaults: what `agentenv list` says it needs
    assert agentenv.spec("reasoning-gym/composite-v0").needs.startswith("config={'datasets': [")
    env = ReasoningGymEnv("composite", config={"datasets": parts}, size=6)
    check_env(env, actions=lambda e: [reference(e)])
    for task in env.tasks:
        env.reset(seed=0, options={"task": task})
        assert env.step(reference(env))[4]["success"] is True


def test_the_docs_example_runs_and_prints_what_it_says(capsys):
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[3] / "docs" / "adapters.md").read_text(encoding="utf-8")
    section = docs.split("\n## reasoning-gym\n", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE)[0]
    exec(compile(code, "docs/adapters.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    expected = [m.group(1) for line in code.splitlines() if (m := re.match(r"^print\(.*\)\s+# (.+)$", line))]
    assert printed == expected

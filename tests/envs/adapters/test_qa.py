r"""The question-answer env: the shipped set, a task set from a datasets split, the contract, hostile replies."""

from __future__ import annotations

import numpy as np
import pytest

import agentenv
from agentenv import Task, TaskFileError, TaskSet, Trajectory, check_env, tool_call_text
from agentenv.envs.adapters import qa
from agentenv.envs.adapters.qa import QAEnv
from tests.core.test_hostile_actions import HOSTILE

datasets = pytest.importorskip("datasets")

GSM8K_LIKE = [
    {"question": "Tom has 3 apples and buys 4 more. How many does he have?", "answer": "3 + 4 = 7\n#### 7"},
    {"question": "A pen costs $2. What do 500 pens cost?", "answer": "2 * 500 = 1000\n#### 1,000"},
]


def gsm8k_answer(row):
    return row["answer"].split("####")[-1]


def play(env: QAEnv, task: Task | str, reply) -> dict:
    env.reset(seed=0, options={"task": task})
    *_, info = env.step(reply)
    return info


# -- the shipped set --------------------------------------------------------------------------------


def test_registered_with_a_generated_set_that_its_oracle_solves():
    env = agentenv.make("qa-v0")
    assert len(env.tasks) == 36
    assert {(t.metadata.family, t.metadata.difficulty) for t in env.tasks} == {
        (f, d) for f in qa.FAMILIES for d in qa.DIFFICULTIES
    }
    trajs = agentenv.rollout("qa-v0", agentenv.spec("qa-v0").make_oracle(), tasks=env.tasks.ids)
    assert [t.task_reward for t in trajs] == [1.0] * len(env.tasks)
    assert qa.default_tasks().ids == qa.make_tasks().ids  # deterministic


def test_the_shipped_set_passes_check_env():
    check_env(agentenv.make("qa-v0"), actions=lambda env: [f"\\boxed{{{env.task.payload['reference']}}}"])
    check_env(agentenv.make("qa-v0"))  # no tools: default actions are none


def test_a_right_answer_scores_1_and_the_state_records_what_was_read():
    env = QAEnv()
    task = env.tasks[0]
    info = play(env, task, f"Let me think. \\boxed{{{task.payload['reference']}}}")
    assert (info["task_reward"], info["success"], info["failure"]) == (1.0, True, "none")
    assert env.state.answer == task.payload["reference"] and env.state.correct is True
    info = play(env, task, "\\boxed{-1}")
    assert (info["task_reward"], info["failure"]) == (0.0, "policy")
    assert env.state.answer == "-1" and env.state.correct is False


def test_mutate_makes_a_new_question_of_the_same_family_and_difficulty():
    env = QAEnv()
    rng = np.random.default_rng(0)
    for task in env.tasks[::5]:
        variant = env.mutate(task, rng)
        assert variant is not None and variant.id != task.id
        assert variant.metadata == task.metadata
        assert play(env, variant, f"\\boxed{{{variant.payload['reference']}}}")["success"]
    assert env.mutate(qa.from_dataset(GSM8K_LIKE, answer=gsm8k_answer)[0], rng) is None


def test_an_openai_message_is_an_answer_but_a_tool_call_is_a_format_error():
    env = QAEnv()
    task = env.tasks[0]
    assert play(env, task, {"role": "assistant", "content": f"\\boxed{{{task.payload['reference']}}}"})["success"]
    info = play(env, task, tool_call_text("submit", answer=task.payload["reference"]))
    assert info["error_kind"] == "format" and info["task_reward"] == 0.0 and info["failure"] != "infra"


# -- attacks ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "error_kind"),
    [
        (" ".join(str(i) for i in range(1, 101)), None),  # one answer, a wrong one
        ("\\boxed{41, 42, 43}", None),
        ("".join(f"\\boxed{{{i}}}" for i in range(40, 50)), "format"),  # more than one answer
        ("<answer>42</answer> or maybe <answer>41</answer>", "format"),
        ("<answer>41</answer> or maybe <ANSWER>42</ANSWER>", "format"),
    ],
)
def test_a_reply_stuffed_with_candidates_fails(reply, error_kind):
    env = QAEnv(TaskSet([Task(id="q", prompt="What is 6 * 7?", payload={"reference": "42"})]))
    info = play(env, "q", reply)
    assert info["task_reward"] == 0.0 and info["error_kind"] == error_kind
    assert info["failure"] == ("truncated" if error_kind else "policy")  # a format error ends the one turn


def test_a_reply_quoting_the_question_fails():
    question = "Is \\boxed{42} the answer to 6 * 7? Answer yes or no."
    env = QAEnv(TaskSet([Task(id="q", prompt=question, payload={"reference": "yes"})]))
    assert play(env, "q", question)["task_reward"] == 0.0
    quoted = play(env, "q", f"You asked: {question} \\boxed{{yes}}")  # two answers: 42 and yes
    assert quoted["task_reward"] == 0.0 and quoted["error_kind"] == "format"
    assert play(env, "q", "You asked me to answer in \\boxed{}: \\boxed{yes}")["task_reward"] == 1.0


@pytest.mark.parametrize(
    ("reply", "error_kind"),
    [
        ("x" * 1_000_000, "format"),  # past max_action_chars: not an answer
        ("\\boxed{42}\udcff", "format"),  # a lone surrogate is not text
        ("\x00\x1b\\boxed{4\x002}", None),  # control characters: an answer (a wrong one)
        ("1e999999", None),
        ("9" * 100_000, None),
        ("\\boxed{nan}", None),
        ("\\boxed{inf}", None),
        ("{" * 100_000, None),
        ("\\boxed{" * 15_000 + "}" * 15_000, "format"),  # a box inside a box
        (None, "format"),
        (12345, "format"),
    ],
)
def test_hostile_replies_score_zero_as_policy_failures_never_infra_or_an_exception(reply, error_kind):
    env = QAEnv(TaskSet([Task(id="q", prompt="What is 6 * 7?", payload={"reference": "42"})]))
    info = play(env, "q", reply)
    assert info["task_reward"] == 0.0 and info["error_kind"] == error_kind
    # An invalid reply is no answer: the one turn ends it, truncated; a valid one is a wrong answer.
    assert info["failure"] == ("truncated" if error_kind else "policy")
    assert (info["error"] is None) == (error_kind is None)  # the verifier never failed


def test_huge_reference_numbers_compare_exactly():
    big = "9" * 5000
    env = QAEnv(TaskSet([Task(id="q", prompt="Big?", payload={"reference": big})]))
    assert play(env, "q", f"\\boxed{{{big}}}")["success"]
    assert not play(env, "q", f"\\boxed{{{big}0}}")["success"]


# -- from a datasets split ----------------------------------------------------------------------------


def test_a_split_becomes_tasks_with_stable_ids_and_the_env_scores_them():
    split = datasets.Dataset.from_list(GSM8K_LIKE)
    tasks = qa.from_dataset(split, answer=gsm8k_answer)
    assert [t.payload for t in tasks] == [{"reference": "7", "aliases": []}, {"reference": "1,000", "aliases": []}]
    assert tasks[0].prompt == GSM8K_LIKE[0]["question"]
    assert tasks.ids == qa.from_dataset(list(GSM8K_LIKE), answer=gsm8k_answer).ids  # same rows, same ids
    assert tasks.ids[0].startswith("qa-0-") and tasks.ids[1].startswith("qa-1-")
    edited = [GSM8K_LIKE[0], {**GSM8K_LIKE[1], "question": "A pen costs $3."}]
    assert qa.from_dataset(edited, answer=gsm8k_answer).ids[1] != tasks.ids[1]
    env = agentenv.make("qa-v0", tasks=tasks)
    assert play(env, tasks.ids[1], "500 pens at $2: \\boxed{1000}")["success"]  # 1000 == 1,000
    assert not play(env, tasks.ids[1], "\\boxed{100}")["success"]
    check_env(env, actions=lambda e: [f"\\boxed{{{e.task.payload['reference']}}}"])


def test_a_split_from_a_local_file_with_ids_metadata_and_number_answers(tmp_path):
    import json

    path = tmp_path / "qa.jsonl"
    rows = [
        {"uid": 10, "q": "2 + 2?", "a": 4, "level": "1", "subject": "math"},
        {"uid": 11, "q": "Capital of France?", "a": ["Paris", "paris, france"], "level": "3", "subject": "geo"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    split = datasets.load_dataset("json", data_files=str(path))["train"]
    metadata = {"difficulty": "level", "family": "subject", "tags": "subject"}
    tasks = qa.from_dataset(split, question="q", answer="a", id="uid", metadata=metadata)
    assert tasks.ids == ["10", "11"]
    assert tasks[0].payload["reference"] == "4" and tasks[0].metadata.difficulty == 1
    assert tasks[1].metadata.family == "geo" and tasks[1].metadata.tags == ("geo",)
    assert tasks[1].payload == {"reference": "Paris", "aliases": ["paris, france"]}
    env = QAEnv(tasks)
    assert play(env, "11", "<answer>Paris, France</answer>")["success"]  # an alias
    assert qa.from_dataset(split, question="q", answer="a", id="uid", id_prefix="demo").ids == ["demo/10", "demo/11"]


def test_tasks_saved_as_jsonl_load_by_path_as_a_training_config_names_them(tmp_path):
    tasks = qa.from_dataset(GSM8K_LIKE, answer=gsm8k_answer)
    tasks.to_jsonl(tmp_path / "gsm8k.jsonl")
    env = agentenv.make("qa-v0", tasks=str(tmp_path / "gsm8k.jsonl"))
    assert env.tasks.ids == tasks.ids and play(env, tasks.ids[0], "\\boxed{7}")["success"]


def test_float_answers_are_written_as_numbers_and_match_equal_values():
    tasks = qa.from_dataset([{"question": "Half?", "answer": 0.5}, {"question": "Big?", "answer": 1e20}])
    assert [t.payload["reference"] for t in tasks] == ["0.5", "1e+20"]
    env = QAEnv(tasks)
    assert play(env, tasks.ids[1], "\\boxed{100,000,000,000,000,000,000}")["success"]


def test_a_float32_column_keeps_the_value_its_data_says_not_the_widened_one():
    split = datasets.Dataset.from_list([{"question": "Tenth?", "answer": 0.1}, {"question": "Third?", "answer": 1 / 3}])
    split = split.cast_column("answer", datasets.Value("float32"))  # read back as 0.10000000149011612
    tasks = qa.from_dataset(split)
    assert [t.payload["reference"] for t in tasks] == ["0.1", "0.33333334"]
    assert play(QAEnv(tasks), tasks.ids[0], "\\boxed{0.1}")["success"]


# -- bad input -----------------------------------------------------------------------------------------


def test_a_missing_column_fails_before_reading_with_a_did_you_mean():
    split = datasets.Dataset.from_list([{"question": "q", "answr": "1"}])
    with pytest.raises(TaskFileError, match=r"no column 'answer' for answer\. Did you mean 'answr'\?"):
        qa.from_dataset(split)
    with pytest.raises(TaskFileError, match=r"no column 'questoin'.*Did you mean 'question'\?"):
        qa.from_dataset(split, question="questoin", answer="answr")


def test_a_record_missing_a_field_names_its_index_and_the_field():
    with pytest.raises(TaskFileError, match=r"record 1: no column 'answer' for answer\. Did you mean 'answe'\?"):
        qa.from_dataset([{"question": "a", "answer": "1"}, {"question": "b", "answe": "2"}])
    with pytest.raises(TaskFileError, match=r"record 0: answer= \(a function of the row\) raised KeyError: 'answr'"):
        qa.from_dataset([{"question": "a", "answer": "1"}], answer=lambda row: row["answr"])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, r"record 1: answer \(column 'answer'\) is missing \(None\)"),
        ("  ", r"record 1: answer \(column 'answer'\) is empty"),
        ([], r"record 1: answer \(column 'answer'\) is an empty list"),
        (True, r"record 1: answer \(column 'answer'\) is a bool"),
        ({"x": 1}, r"record 1: answer \(column 'answer'\) is a dict, expected text or a number"),
        (float("nan"), r"record 1: answer \(column 'answer'\) is nan"),
        pytest.param(10**5000, r"record 1: answer \(column 'answer'\) is an integer too large", id="10**5000"),
        ("a\udcffb", r"record 1: answer \(column 'answer'\) holds a lone surrogate"),
        # Text that normalises to nothing: an empty reply would equal it.
        (".", r"record 1: answer \(column 'answer'\) is '\.', which is no answer once normalised"),
        ("$$", r"record 1: answer \(column 'answer'\) is '\$\$', which is no answer"),
        (["4", "\u200b"], r"record 1: answer \(column 'answer'\)\[1\] is '\\u200b', which is no answer"),
    ],
)
def test_a_bad_answer_value_names_the_record_and_the_field(value, message):
    with pytest.raises(TaskFileError, match=message):
        qa.from_dataset([{"question": "a", "answer": "1"}, {"question": "b", "answer": value}])


def test_a_dataset_dict_is_refused_with_its_split_names():
    split = datasets.Dataset.from_list(GSM8K_LIKE)
    picked = r"got a DatasetDict of the splits 'train', 'test': pick one, e\.g\. dataset\['train'\]"
    with pytest.raises(TypeError, match=picked):
        qa.from_dataset(datasets.DatasetDict({"train": split, "test": split}))
    with pytest.raises(TypeError, match="got one record"):
        qa.from_dataset(GSM8K_LIKE[0])
    with pytest.raises(TypeError, match="got str"):
        qa.from_dataset("gsm8k")


def test_bad_metadata_and_repeated_ids_are_clear_errors():
    rows = [
        {"question": "a", "answer": "1", "level": "hard", "id": "x"},
        {"question": "b", "answer": "2", "level": 1, "id": "x"},
    ]
    with pytest.raises(ValueError, match=r"metadata has no field 'dificulty'\. Did you mean 'difficulty'\?"):
        qa.from_dataset(rows, metadata={"dificulty": "level"})
    bad_level = r"record 0: metadata\['difficulty'\] \(column 'level'\) is 'hard', expected an integer"
    with pytest.raises(TaskFileError, match=bad_level):
        qa.from_dataset(rows, metadata={"difficulty": "level"})
    with pytest.raises(TaskFileError, match=r"record 1: id 'x' repeats record 0's"):
        qa.from_dataset(rows, id="id")
    levels = {"hard": 3}
    tasks = qa.from_dataset(rows[:1], metadata={"difficulty": lambda row: levels[row["level"]]})
    assert tasks[0].metadata.difficulty == 3


def test_a_data_source_that_fails_while_read_names_the_record():
    def rows():
        yield {"question": "a", "answer": "1"}
        raise OSError("corrupt parquet page")

    with pytest.raises(TaskFileError, match=r"record 1: reading the split failed: OSError: corrupt parquet page"):
        qa.from_dataset(rows())

    def first_fails():
        raise OSError("no such shard")
        yield

    with pytest.raises(TaskFileError, match=r"record 0: reading the split failed: OSError: no such shard"):
        qa.from_dataset(first_fails())


@pytest.mark.slow  # datasets builds a generator-backed split in seconds
def test_a_generator_split_of_datasets_that_raises_names_the_record():
    def gen():
        yield {"question": "a", "answer": "1"}
        raise ValueError("bad shard")

    split = datasets.IterableDataset.from_generator(gen)
    with pytest.raises(TaskFileError, match=r"record 1: reading the split failed: .*bad shard"):
        qa.from_dataset(split)


def test_a_bug_in_the_answer_check_is_a_zero_reward_never_infra_or_an_exception(monkeypatch):
    env = QAEnv()

    def broken(*args):
        raise RecursionError("a library bug")

    monkeypatch.setattr(qa, "matches", broken)
    info = play(env, env.tasks[0], "\\boxed{1}")
    assert info["task_reward"] == 0.0 and info["failure"] == "policy" and "verifier failed" in info["error"]


def test_a_payload_without_a_reference_is_refused_when_the_env_is_made():
    with pytest.raises(ValueError, match=r"task 'q': payload field 'reference'"):
        QAEnv(TaskSet([Task(id="q", prompt="?", payload={"answer": "1"})]))
    for payload in ({"reference": "\\(\\)"}, {"reference": "4", "aliases": ["..."]}):  # an empty reply would equal them
        with pytest.raises(ValueError, match="no answer once normalised"):
            QAEnv(TaskSet([Task(id="q", prompt="?", payload=payload)]))


@pytest.mark.parametrize("action", list(HOSTILE.values()), ids=list(HOSTILE))
def test_the_suites_hostile_actions_end_a_qa_episode_as_the_policys_failure_and_serialise(action):
    env = QAEnv(TaskSet([Task(id="q", prompt="What is 6 * 7?", payload={"reference": "42"})]))
    *_, terminated, truncated, info = play_raw(env, action)
    assert (terminated or truncated) and info["task_reward"] == 0.0
    assert info["failure"] in ("policy", "truncated") and info["error_kind"] in (None, "format")
    traj = Trajectory(task=env.task, messages=env.messages, transitions=env.transitions, failure=info["failure"])
    assert Trajectory.model_validate_json(traj.model_dump_json()).turns == 1


def play_raw(env: QAEnv, action) -> tuple:
    env.reset(seed=0, options={"task": "q"})
    return env.step(action)


def test_mutate_draws_again_for_a_question_other_than_the_one_given(monkeypatch):
    env = QAEnv()
    task = next(t for t in env.tasks if t.metadata.family == "reverse" and t.metadata.difficulty == 0)  # 5 words
    variants = [env.mutate(task, np.random.default_rng(seed)) for seed in range(40)]
    assert all(v is not None and v.prompt != task.prompt for v in variants)
    # A family with nothing else to ask at that difficulty makes no variant.
    monkeypatch.setitem(qa._GENERATORS, "reverse", lambda rng, d: (task.prompt, task.payload["reference"]))
    assert env.mutate(task, np.random.default_rng(0)) is None

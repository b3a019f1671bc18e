"""`GRPOConfig`: invalid values fail at construction with a message that says the fix,
and TOML and YAML files read into the same config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentenv.trainers.config import GRPOConfig


def _problem(**kwargs) -> str:
    with pytest.raises(ValueError) as info:
        GRPOConfig(**kwargs)
    return str(info.value)


def test_defaults_construct_and_round_trip_through_to_dict() -> None:
    config = GRPOConfig()
    assert config.batch_size % config.group_size == 0
    assert GRPOConfig.from_dict(config.to_dict()) == config


def test_group_size_1_is_refused_with_a_group_size_to_use() -> None:
    message = _problem(group_size=1)
    assert "group_size must be >= 2" in message
    assert "group_size=4" in message


@pytest.mark.parametrize(("batch_size", "group_size"), [(10, 4), (2, 4), (7, 3), (0, 4)])
def test_batch_size_not_a_multiple_of_group_size_suggests_one_that_is(batch_size, group_size) -> None:
    message = _problem(batch_size=batch_size, group_size=group_size)
    assert f"batch_size ({batch_size}) must be a positive multiple of group_size ({group_size})" in message
    suggested = int(re.search(r"try batch_size=(\d+)", message).group(1))
    GRPOConfig(batch_size=suggested, group_size=group_size)  # the suggestion is valid


@pytest.mark.parametrize(
    ("field", "typo", "meant"),
    [
        ("loss", "dr-grpo", "dr_grpo"),
        ("loss", "dapoo", "dapo"),
        ("advantage", "batchstd", "batch_std"),
        ("step_advantage", "gigp", "gigpo"),
    ],
)
def test_an_unknown_choice_lists_the_choices_and_guesses_the_intended_one(field, typo, meant) -> None:
    message = _problem(**{field: typo})
    assert f"{field} must be one of" in message
    assert f"Did you mean {meant!r}" in message  # the closest guess first


def test_a_model_that_is_neither_tiny_a_path_nor_a_hub_id_is_refused() -> None:
    message = _problem(model="my-model")
    assert "'my-model'" in message and "hub id" in message


def test_an_existing_local_model_path_and_a_hub_id_are_accepted(tmp_path) -> None:
    assert GRPOConfig(model=str(tmp_path)).model == str(tmp_path)
    assert GRPOConfig(model="Qwen/Qwen2.5-0.5B-Instruct").model == "Qwen/Qwen2.5-0.5B-Instruct"


def test_a_missing_local_model_path_is_refused(tmp_path) -> None:
    missing = tmp_path / "checkpoints" / "step-10"
    message = _problem(model=str(missing))
    assert str(missing) in message


def test_max_new_tokens_must_leave_room_in_max_seq_len() -> None:
    message = _problem(max_new_tokens=256, max_seq_len=256)
    assert "max_new_tokens (256) must be below max_seq_len (256)" in message


def test_a_negative_clip_range_is_refused() -> None:
    assert "eps_low must be >= 0 or None, got -0.1" in _problem(eps_low=-0.1)
    assert GRPOConfig(eps_low=None).eps_low is None


@pytest.mark.parametrize("device", ["gpu", "cuda0", "tpu"])
def test_a_bad_device_string_is_refused_naming_the_valid_forms(device) -> None:
    message = _problem(device=device)
    assert f"got {device!r}" in message
    assert "'cuda:N'" in message


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:1"])
def test_the_documented_device_strings_are_accepted(device) -> None:
    assert GRPOConfig(device=device).device == device


def test_a_cuda_device_without_an_index_number_is_refused() -> None:
    assert "device must be" in _problem(device="cuda:first")


def test_every_problem_is_reported_at_once() -> None:
    message = _problem(group_size=1, loss="nope", top_p=0.0)
    assert "group_size" in message and "loss" in message and "top_p" in message


# --- files ----------------------------------------------------------------------------------

TOML = """\
model = "tiny"
seed = 3
steps = 10
group_size = 2
batch_size = 4
learning_rate = 0.0001
loss = "dapo"
eps_high = 0.28
tool_prompt = "compact"

[envs]
"arithmetic-v0" = 2.0
"guess-number-v0" = 1.0
"""

YAML = """\
model: tiny
seed: 3
steps: 10
group_size: 2
batch_size: 4
learning_rate: 0.0001
loss: dapo
eps_high: 0.28
tool_prompt: compact
envs:
  arithmetic-v0: 2.0
  guess-number-v0: 1.0
"""


def test_toml_and_yaml_files_read_into_equal_configs(tmp_path) -> None:
    (tmp_path / "run.toml").write_text(TOML)
    (tmp_path / "run.yaml").write_text(YAML)
    from_toml = GRPOConfig.from_file(tmp_path / "run.toml")
    from_yaml = GRPOConfig.from_file(tmp_path / "run.yaml")
    assert from_toml == from_yaml
    assert from_toml == GRPOConfig(
        seed=3,
        steps=10,
        group_size=2,
        batch_size=4,
        learning_rate=1e-4,
        loss="dapo",
        eps_high=0.28,
        tool_prompt="compact",
        envs={"arithmetic-v0": 2.0, "guess-number-v0": 1.0},
    )


def test_a_list_of_env_ids_means_equal_weights(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("envs: [arithmetic-v0, guess-number-v0]\n")
    assert GRPOConfig.from_file(path).envs == {"arithmetic-v0": 1.0, "guess-number-v0": 1.0}


@pytest.mark.parametrize(("suffix", "text"), [(".toml", "learning_rat = 0.1\n"), (".yaml", "learning_rat: 0.1\n")])
def test_an_unknown_key_names_the_file_and_the_close_field(tmp_path, suffix, text) -> None:
    path = tmp_path / f"run{suffix}"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        GRPOConfig.from_file(path)
    message = str(info.value)
    assert str(path) in message
    assert "unknown field 'learning_rat'" in message and "Did you mean 'learning_rate'" in message
    assert "\n" not in message  # one problem, one line


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('steps = "ten"\n', "steps"),
        ("steps = 10.0\n", "steps"),
        ('learning_rate = "fast"\n', "learning_rate"),
        ('bf16 = "yes"\n', "bf16"),
        ('envs = "arithmetic-v0"\n', "envs"),
    ],
)
def test_a_wrongly_typed_value_names_the_field(tmp_path, text, field) -> None:
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"field '{field}' expects") as info:
        GRPOConfig.from_file(path)
    assert str(path) in str(info.value)


def test_an_int_is_accepted_where_a_float_is_expected(tmp_path) -> None:
    path = tmp_path / "run.toml"
    path.write_text("learning_rate = 1\ngamma = 1\n")
    config = GRPOConfig.from_file(path)
    assert config.learning_rate == 1 and config.gamma == 1


def test_yaml_null_is_accepted_only_for_optional_fields(tmp_path) -> None:
    ok = tmp_path / "ok.yaml"
    ok.write_text("max_turns: null\neps_low: null\n")
    assert GRPOConfig.from_file(ok).max_turns is None
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: null\n")
    with pytest.raises(ValueError, match="field 'steps'"):
        GRPOConfig.from_file(bad)


def test_a_non_numeric_env_weight_names_the_env(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("envs:\n  arithmetic-v0: high\n")
    with pytest.raises(ValueError, match="arithmetic-v0"):
        GRPOConfig.from_file(path)


def test_an_invalid_value_in_a_file_fails_like_one_passed_in_python(tmp_path) -> None:
    path = tmp_path / "run.toml"
    path.write_text("group_size = 4\nbatch_size = 10\n")
    with pytest.raises(ValueError, match="try batch_size=8"):
        GRPOConfig.from_file(path)


def test_file_errors_say_what_is_wrong(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        GRPOConfig.from_file(tmp_path / "missing.toml")
    json_file = tmp_path / "run.json"
    json_file.write_text("{}")
    with pytest.raises(ValueError, match=r"expected a \.toml, \.yaml or \.yml file"):
        GRPOConfig.from_file(json_file)
    broken = tmp_path / "run.toml"
    broken.write_text("steps = = 3\n")
    with pytest.raises(ValueError, match="invalid TOML"):
        GRPOConfig.from_file(broken)
    listed = tmp_path / "run.yml"
    listed.write_text("- steps\n")
    with pytest.raises(ValueError, match="expected a mapping"):
        GRPOConfig.from_file(listed)


# --- the model: documentation, the miner, the examples ----------------------------------


def test_every_field_is_documented_in_help_and_the_json_schema() -> None:
    import pydoc

    from agentenv.trainers.modes import LOSS_MODES

    assert all(field.description for field in GRPOConfig.model_fields.values())
    page = pydoc.render_doc(GRPOConfig, renderer=pydoc.plaintext)
    assert "max_new_tokens: int = 128" in page and "Tokens the model may generate per turn" in page
    assert "One of: 'grpo', 'dapo'" in page
    schema = GRPOConfig.model_json_schema()["properties"]
    assert schema["gamma"]["description"].startswith("Discount of step rewards")
    assert schema["loss"]["enum"] == list(LOSS_MODES)


def test_the_miner_is_a_miner_config_given_as_one_or_as_a_table_of_its_fields() -> None:
    from agentenv.miner import MinerConfig

    as_table = GRPOConfig(miner={"temperature": 0.5})
    assert isinstance(as_table.miner, MinerConfig) and as_table.miner.temperature == 0.5
    assert as_table == GRPOConfig(miner=MinerConfig(temperature=0.5))
    assert GRPOConfig.from_dict(as_table.to_dict()) == as_table
    assert "field 'miner' expects MinerConfig | None, got 3" in _problem(miner=3)


def test_an_unknown_keyword_in_python_is_refused_with_a_guess() -> None:
    message = _problem(learning_rat=0.1)
    assert (
        message
        == "invalid GRPOConfig: unknown field 'learning_rat'. Did you mean 'learning_rate', 'sft_learning_rate'?"
    )


@pytest.mark.parametrize("path", sorted(Path(__file__).parents[2].glob("examples/*.toml")), ids=lambda p: p.name)
def test_the_example_configs_load(path) -> None:
    config = GRPOConfig.from_file(path)
    assert config.envs and config.steps >= 1


def test_training_at_temperature_0_is_refused_with_the_reason() -> None:
    message = _problem(temperature=0.0)
    assert "temperature" in message
    GRPOConfig(temperature=0.0001, eval_temperature=0.0)  # greedy evaluation stays allowed


@pytest.mark.parametrize("loss", ["grpo", "dr_grpo"])
def test_eps_high_on_a_loss_with_one_clip_range_is_refused_not_ignored(loss) -> None:
    message = _problem(loss=loss, eps_high=0.3)
    assert f"eps_high has no effect with loss {loss!r}" in message and "eps_low" in message


@pytest.mark.parametrize("loss", ["dapo", "gspo", "cispo"])
def test_eps_high_is_taken_by_a_loss_that_clips_each_way_apart(loss) -> None:
    assert GRPOConfig(loss=loss, eps_high=0.3).eps_high == 0.3


def test_episode_balancing_is_for_token_mean_losses_only() -> None:
    assert GRPOConfig(loss="dapo", episode_balanced=True).episode_balanced
    assert "episode_balanced applies to token-mean losses" in _problem(loss="grpo", episode_balanced=True)


# --- values with no meaning: negative seeds, infinity, NaN ---------------------------------


def test_a_negative_seed_is_refused_at_construction() -> None:
    # numpy and gymnasium refuse negative seeds: train() died in numpy after building everything.
    assert _problem(seed=-1) == "invalid GRPOConfig: seed must be >= 0, got -1"
    assert "seed must be < " in _problem(seed=2**64)  # past what torch.manual_seed takes
    assert GRPOConfig(seed=0).seed == 0


FLOAT_FIELDS = [name for name, field in GRPOConfig.model_fields.items() if field.annotation in (float, float | None)]
"""Every float field, optional ones included (envs' weights: tested apart)."""


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("field", FLOAT_FIELDS)
def test_every_float_field_must_be_a_finite_number(field: str, value: float) -> None:
    # A learning rate, KL weight or clip norm of inf trains on NaN weights; none has a meaning.
    message = _problem(**{field: value})
    assert message == f"invalid GRPOConfig: {field} must be a finite number, got {value!r}"


def test_the_float_fields_checked_include_the_ones_that_took_infinity() -> None:
    taken = {
        "learning_rate",
        "max_grad_norm",
        "kl_coef",
        "step_advantage_weight",
        "truncation_penalty",
        "dist_timeout_s",
    }
    assert taken <= set(FLOAT_FIELDS)


def test_an_infinite_env_weight_or_toml_inf_names_the_field(tmp_path) -> None:
    assert "envs.arithmetic-v0 must be a finite number, got inf" in _problem(envs={"arithmetic-v0": float("inf")})
    path = tmp_path / "run.toml"
    path.write_text("learning_rate = inf\n")
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: learning_rate must be a finite number, got inf$"):
        GRPOConfig.from_file(path)


# --- files that are not config files -----------------------------------------------------

_LAUGHS = b"env_kwargs: {arithmetic-v0: {max_turns: [&a [x, x, x, x, x, x, x, x, x, x]"
_LAUGHS += b"".join(b", &%c [%s]" % (c, b", ".join([b"*%c" % (c - 1)] * 10)) for c in b"bcdefghi") + b"]}}\n"


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("dir.toml", None, "is a directory; give a .toml or .yaml file"),
        ("big.toml", b"seed = " + b"9" * 5000 + b"\n", "invalid TOML: an integer of more than 4300 digits"),
        ("big.yaml", b"seed: " + b"9" * 5000 + b"\n", "invalid YAML: an integer of more than 4300 digits"),
        ("bad.toml", b"seed = 1\n# \xff\n", "not UTF-8 text: byte 0xff at byte 12; save the file as UTF-8"),
        ("bad.yml", b"seed: 1\n# \xff\n", "not UTF-8 text: byte 0xff at byte 11"),
        ("deep.toml", b"a = " + b"[" * 3000 + b"]" * 3000 + b"\n", "invalid TOML: nested too deeply"),
        ("deep.yaml", b"a: " + b"[" * 3000 + b"]" * 3000 + b"\n", "invalid YAML: nested too deeply"),
        # Aliases: a few lines that expand to 10^9 values, or without end (checking them hung).
        ("laughs.yaml", _LAUGHS, "invalid YAML: it expands to more than 100,000 values"),
        ("cycle.yaml", b"env_kwargs: {arithmetic-v0: {max_turns: &a [*a]}}\n", "an alias inside itself"),
    ],
)
def test_a_file_that_cannot_be_read_as_a_config_is_a_value_error_naming_it(tmp_path, name, content, expected) -> None:
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        GRPOConfig.from_file(path)
    message = str(info.value)
    assert str(path) in message and expected in message
    assert "\n" not in message and "set_int_max_str_digits" not in message


def test_env_weights_that_each_are_finite_but_sum_to_infinity_are_refused() -> None:
    assert "env weights sum to infinity" in _problem(envs={"arithmetic-v0": 1e308, "guess-number-v0": 1e308})


def test_an_empty_stop_string_is_refused() -> None:
    # "" is in every text: every turn ended at its first token, and nothing said why.
    with pytest.raises(ValueError, match="stop holds an empty string"):
        GRPOConfig(stop=["</tool_call>", ""])


def test_nan_or_infinity_in_env_kwargs_is_refused_naming_the_argument(tmp_path) -> None:
    # It reached the env (max_turns=nan ran with no turn limit) and config.json recorded null.
    path = tmp_path / "run.yaml"
    path.write_text("env_kwargs: {arithmetic-v0: {max_turns: .nan, x: [1, .inf]}}\n")
    with pytest.raises(ValueError, match=r"env_kwargs\.arithmetic-v0\.max_turns must be a finite number"):
        GRPOConfig.from_file(path)


def test_a_toml_file_with_a_byte_order_mark_loads(tmp_path) -> None:
    path = tmp_path / "run.toml"
    path.write_bytes(b"\xef\xbb\xbfsteps = 3\n")  # as Notepad saves UTF-8; tomllib read it as a bad statement
    assert GRPOConfig.from_file(path).steps == 3

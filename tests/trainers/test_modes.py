"""The mode tables: each loss and advantage mode is declared once, and the config, the
losses, the advantages and the trainer all read the same rows."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import pytest
import torch

import agentenv.trainers
from agentenv.trainers import GRPOConfig
from agentenv.trainers.advantages import group_advantages
from agentenv.trainers.batch import turn_advantages
from agentenv.trainers.losses import LOSSES, batch_share, compute_loss, loss_kwargs
from agentenv.trainers.modes import LOSS_MODES, STEP_ADVANTAGES, TASK_ADVANTAGES, LossMode


def test_every_loss_row_has_its_function_and_the_function_defaults_are_the_row() -> None:
    assert list(LOSSES) == list(LOSS_MODES)
    for name, mode in LOSS_MODES.items():
        assert LOSSES[name].__name__ == f"{name}_loss"
        params = inspect.signature(LOSSES[name]).parameters
        assert {k: params[k].default for k in mode.clip} == dict(mode.clip), name
        assert ("max_len" in params) == mode.needs_max_len, name


@pytest.mark.parametrize(
    ("loss", "eps_low", "eps_high", "expected"),
    [
        ("grpo", None, None, {"eps": 0.2}),
        ("grpo", 0.1, 0.5, {"eps": 0.1}),  # one range, both ways: eps_low sets it
        ("dapo", None, 0.3, {"eps_low": 0.2, "eps_high": 0.3}),
        ("dr_grpo", None, None, {"eps": 0.2, "max_len": 64}),
        ("gspo", 1e-4, None, {"eps_low": 1e-4, "eps_high": 4e-4}),
        ("cispo", None, None, {"eps_low": None, "eps_high": 0.28}),  # no lower bound, as in the paper
    ],
)
def test_loss_kwargs_are_the_row_defaults_with_the_config_overrides(loss, eps_low, eps_high, expected) -> None:
    assert loss_kwargs(loss, eps_low=eps_low, eps_high=eps_high, max_len=64) == expected


@pytest.mark.parametrize("loss", list(LOSS_MODES))
def test_a_micro_batch_counts_in_the_unit_its_loss_averages_over(loss) -> None:
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])  # 3 tokens in 2 live rows
    expected = {"token": 3.0, "sequence": 2.0}[LOSS_MODES[loss].averaging]
    assert batch_share(loss, mask) == expected


def test_a_new_row_is_a_name_the_config_accepts(monkeypatch) -> None:
    monkeypatch.setitem(LOSS_MODES, "ppo", LossMode("plain PPO-clip", averaging="token", clip={"eps": 0.2}))
    monkeypatch.setitem(TASK_ADVANTAGES, "rank", "rank within the group")
    monkeypatch.setitem(STEP_ADVANTAGES, "td", "one-step TD")
    config = GRPOConfig(loss="ppo", advantage="rank", step_advantage="td")
    assert (config.loss, config.advantage, config.step_advantage) == ("ppo", "rank", "td")


def test_an_unknown_name_fails_the_same_way_wherever_it_is_given() -> None:
    match = r"must be one of .*, got 'stdd'\. Did you mean 'std'"
    with pytest.raises(ValueError, match=match):
        GRPOConfig(advantage="stdd")
    with pytest.raises(ValueError, match=match):
        group_advantages([1.0, 0.0], ["g", "g"], mode="stdd")
    with pytest.raises(ValueError, match=r"step_mode must be one of .*, got 'gigp'\. Did you mean 'gigpo'"):
        turn_advantages([], [], [], task_mode="std", step_mode="gigp", step_weight=1.0, gamma=1.0)
    with pytest.raises(ValueError, match=r"loss must be one of .*Did you mean 'cispo'"):
        compute_loss("cipso")
    with pytest.raises(ValueError, match=r"loss must be one of .*Did you mean 'cispo'"):
        loss_kwargs("cipso", eps_low=None, eps_high=None, max_len=1)


def test_the_config_the_tables_and_the_advantages_need_no_torch() -> None:
    # What advantages.py promises: plain Python, usable without the train extra.
    code = textwrap.dedent("""
        import sys
        import agentenv.trainers
        from agentenv.trainers import GRPOConfig
        from agentenv.trainers.advantages import anchor_state_advantages, combine, group_advantages
        from agentenv.trainers.modes import LOSS_MODES
        from agentenv.trainers.metrics import rollout_metrics
        from agentenv.trainers.task_sampler import UniformSampler

        config = GRPOConfig(loss="dapo", miner={}, importance_weighting=True)
        task = group_advantages([1.0, 0.0, 0.0, 1.0], ["g"] * 4, mode=config.advantage)
        step = anchor_state_advantages([[1.0], [0.0], [0.0], [1.0]], [["s"]] * 4, ["g"] * 4)
        assert [round(a[0]) for a in combine(task, step, 1.0)] == [2, -2, -2, 2]
        print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_trainer_and_the_policy_load_on_first_use() -> None:
    from agentenv.trainers.policy import TransformersPolicy
    from agentenv.trainers.trainer import GRPOTrainer

    assert agentenv.trainers.GRPOTrainer is GRPOTrainer
    assert agentenv.trainers.TransformersPolicy is TransformersPolicy
    assert {"GRPOConfig", "GRPOTrainer", "TransformersPolicy"} <= set(dir(agentenv.trainers))
    with pytest.raises(AttributeError, match="GRPOTrainr"):
        _ = agentenv.trainers.GRPOTrainr  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("loss", "balanced"), [(name, False) for name in LOSS_MODES] + [("dapo", True), ("cispo", True)]
)
def test_micro_batches_weighted_by_their_share_give_the_whole_batchs_loss_kl_included(loss, balanced) -> None:
    # Rows of different policy lengths: a token-mean and a mean of sequences differ, so a
    # KL term averaged in the wrong unit would depend on how the batch is split.
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 6, generator=g) * 3
    old = logp + torch.randn(4, 6, generator=g) * 0.05
    ref = logp + torch.randn(4, 6, generator=g) * 0.5
    adv = torch.randn(4, 1, generator=g).expand(4, 6)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0], [0, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]]).float()
    kwargs = {**loss_kwargs(loss, eps_low=None, eps_high=None, max_len=8, episode_balanced=balanced), "kl_coef": 0.3}

    def loss_of(rows: slice) -> torch.Tensor:
        return compute_loss(
            loss,
            logp=logp[rows],
            old_logp=old[rows],
            advantages=adv[rows],
            mask=mask[rows],
            ref_logp=ref[rows],
            **kwargs,
        ).loss

    parts = [slice(0, 1), slice(1, 4)]
    shares = [batch_share(loss, mask[p], episode_balanced=balanced) for p in parts]
    split = sum(loss_of(p) * s / sum(shares) for p, s in zip(parts, shares, strict=True))
    torch.testing.assert_close(split, loss_of(slice(0, 4)), atol=1e-6, rtol=1e-6)

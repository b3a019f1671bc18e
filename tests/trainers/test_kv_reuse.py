"""The KV cache kept between turns (`TransformersPolicy(reuse_cache=True)`).

What a user relies on: reuse changes how much the model is fed, never what it
samples. Episodes here run 2 to 9 turns (the env ends each at a turn set by its
task), so rows leave the batch at different turns, and with a concurrency below
the episode count new episodes join a batch whose cache is already warm.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import agentenv
from agentenv.envs.guess_number import GuessNumberEnv
from agentenv.trainers.generation import KVPrefix, reusable, sample
from agentenv.trainers.model import lean_attention
from agentenv.trainers.policy import TransformersPolicy
from agentenv.trainers.tokens import build_tiny_tokenizer


class UnevenEnv(GuessNumberEnv):
    """Every action goes on (no format ending); the episode ends at a turn its task sets."""

    max_turns = 9
    max_format_errors = 100

    def is_done(self) -> bool:
        return self.turn >= 2 + self.task.payload["secret"] % 8


def _env() -> UnevenEnv:
    return UnevenEnv(tool_prompt="compact")


@pytest.fixture(scope="module")
def tok() -> Any:
    trajs = agentenv.rollout("guess-number-v0", agentenv.spec("guess-number-v0").make_oracle(), n=20)
    return build_tiny_tokenizer([m["content"] for t in trajs for m in t.messages])


def _qwen(tok: Any, **overrides: Any) -> torch.nn.Module:
    shape: dict[str, Any] = {"num_attention_heads": 2, "num_key_value_heads": 1}
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        tie_word_embeddings=True,
        **{**shape, **overrides},
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="module")
def model(tok: Any) -> torch.nn.Module:
    return _qwen(tok)


@pytest.fixture
def fed(model: torch.nn.Module) -> Iterator[list[int]]:
    """The number of input tokens of each forward call."""
    sizes: list[int] = []
    handle = model.register_forward_pre_hook(lambda _m, _a, kw: sizes.append(kw["input_ids"].numel()), with_kwargs=True)
    yield sizes
    handle.remove()


def _rollout(
    policy: TransformersPolicy, *, n: int = 6, concurrency: int | None = None, groups: bool = False
) -> list[agentenv.Trajectory]:
    """``n`` episodes of different tasks, or with ``groups`` two groups of n / 2 episodes
    that open with one prompt each (as GRPO samples them: one task, one seed)."""
    policy.reset()
    if groups:
        tasks = [task.id for task in _env().tasks][: n // 2]
        per_group = [t for t in tasks[:2] for _ in range(n // 2)]
        seeds = [7] * (n // 2) + [8] * (n // 2)
        return agentenv.rollout(_env, policy, tasks=per_group, seeds=seeds, concurrency=concurrency)
    return agentenv.rollout(_env, policy, n=n, seed=0, concurrency=concurrency)


def _generations(trajs: list[agentenv.Trajectory]) -> tuple[list[list[int]], list[list[float]]]:
    gens = [g for t in trajs for g in t.generations if g is not None]
    return [g.token_ids for g in gens], [g.logprobs for g in gens]


@pytest.mark.parametrize(
    ("concurrency", "groups"), [(None, False), (4, False), (None, True)], ids=["one-batch", "episodes-join", "groups"]
)
def test_reuse_samples_the_same_tokens_with_the_same_logprobs(model, tok, concurrency, groups) -> None:
    kept = TransformersPolicy(model, tok, max_new_tokens=6, seed=3, reuse_cache=True)
    fresh = TransformersPolicy(model, tok, max_new_tokens=6, seed=3, reuse_cache=False)
    with_reuse = _rollout(kept, concurrency=concurrency, groups=groups)
    without = _rollout(fresh, concurrency=concurrency, groups=groups)
    assert [t.turns for t in with_reuse] == [t.turns for t in without]
    if not groups:
        assert len({t.turns for t in with_reuse}) >= 3  # rows leave the batch at different turns
    tokens, logprobs = _generations(with_reuse)
    tokens_fresh, logprobs_fresh = _generations(without)
    assert tokens == tokens_fresh
    for a, b in zip(logprobs, logprobs_fresh, strict=True):
        assert a == pytest.approx(b, abs=1e-5)  # a prefill and a cached decode round differently


@pytest.mark.filterwarnings("ignore:an episode reached max_context_tokens")
def test_reuse_samples_the_same_tokens_when_rows_stop_at_their_room(model, tok) -> None:
    """Rows cut at their own room (max_context_tokens) leave the batch's cache as
    rows that stop do: the samples are those of sampling without reuse."""
    env = _env()
    prompt = len(TransformersPolicy(model, tok).delta.prompt_ids(env.reset(seed=0)[0]))
    env.close()
    settings = dict(max_new_tokens=6, max_context_tokens=prompt + 260, seed=3)
    with_reuse = _rollout(TransformersPolicy(model, tok, reuse_cache=True, **settings))  # type: ignore[arg-type]
    without = _rollout(TransformersPolicy(model, tok, reuse_cache=False, **settings))  # type: ignore[arg-type]
    gens = [g for t in with_reuse for g in t.generations]
    assert any(g is None for g in gens)  # some turns found the context full
    assert any(g is not None and len(g.token_ids) < 6 and g.finish_reason == "length" for g in gens)  # cut at its room
    assert [t.turns for t in with_reuse] == [t.turns for t in without]
    tokens, logprobs = _generations(with_reuse)
    tokens_fresh, logprobs_fresh = _generations(without)
    assert tokens == tokens_fresh
    for a, b in zip(logprobs, logprobs_fresh, strict=True):
        assert a == pytest.approx(b, abs=1e-5)


def test_reuse_samples_the_same_tokens_with_grouped_query_attention(tok) -> None:
    # Four query heads on two key/value heads, attention held lean as the trainer has it
    # (`lean_attention`): prefills with a padding mask take sdpa's grouped path.
    model = _qwen(tok, num_attention_heads=4, num_key_value_heads=2)
    assert lean_attention(model) == 1
    kept = TransformersPolicy(model, tok, max_new_tokens=6, seed=3, reuse_cache=True)
    fresh = TransformersPolicy(model, tok, max_new_tokens=6, seed=3, reuse_cache=False)
    with_reuse, without = _rollout(kept, groups=True), _rollout(fresh, groups=True)
    tokens, logprobs = _generations(with_reuse)
    tokens_fresh, logprobs_fresh = _generations(without)
    assert tokens == tokens_fresh
    for a, b in zip(logprobs, logprobs_fresh, strict=True):
        assert a == pytest.approx(b, abs=1e-5)


def test_a_group_prefills_its_prompt_once(model, tok, fed) -> None:
    policy = TransformersPolicy(model, tok, max_new_tokens=2, seed=3, reuse_cache=True)
    env = _env()
    messages = list(env.reset(seed=0)[0])
    env.close()
    prompt = len(policy.delta.prompt_ids(messages))
    policy.act([agentenv.Conversation(i, messages) for i in range(4)])
    # The prompt but its last token once, then each row's last prompt token, then a token each.
    assert fed[:2] == [prompt - 1, 4]


@pytest.mark.parametrize("group", [3, 1], ids=["groups", "no-two-rows-alike"])
def test_an_opening_all_prompts_share_is_prefilled_once_and_samples_as_without_sharing(model, fed, group) -> None:
    """Distinct prompts that open alike (a system prompt): the opening is prefilled
    once for the batch, then each prompt's own ids, and the samples are those of a
    batch that prefills every row whole."""
    from agentenv.trainers.generation import COMMON_MIN_TOKENS

    g = torch.Generator().manual_seed(0)
    opening = torch.randint(5, 60, (COMMON_MIN_TOKENS + 4,), generator=g).tolist()
    tails = [torch.randint(5, 60, (n,), generator=g).tolist() for n in (2, 5, 3)]
    prompts = [opening + tail for tail in tails for _ in range(group)]
    runs = []
    for share in (True, False):
        fed.clear()
        out = sample(
            model, prompts, stop_ids=[], pad_id=0, max_new_tokens=6,
            generator=torch.Generator().manual_seed(3), share_prompts=share, keep_cache=share,
        )  # fmt: skip
        runs.append((out, list(fed)))
    (shared, shared_fed), (whole, whole_fed) = runs
    assert shared.token_ids == whole.token_ids
    for a, b in zip(shared.logprobs, whole.logprobs, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    assert whole_fed[0] == len(prompts) * (len(opening) + 5)  # every row whole, left-padded
    # The opening once, each prompt's own ids but its last (padded to the longest),
    # then every row's last prompt id.
    assert shared_fed[:3] == [len(opening), 3 * (5 - 1), len(prompts)]


def test_reuse_feeds_each_turn_only_what_follows_the_cache(model, tok, fed) -> None:
    _rollout(TransformersPolicy(model, tok, max_new_tokens=6, seed=3, reuse_cache=False))
    without = sum(fed)
    fed.clear()
    trajs = _rollout(TransformersPolicy(model, tok, max_new_tokens=6, seed=3, reuse_cache=True))
    assert max(t.turns for t in trajs) >= 5
    assert sum(fed) < without / 2


def test_the_cache_is_dropped_when_the_weights_change(tok) -> None:
    model = _qwen(tok)
    env = _env()
    kept = TransformersPolicy(model, tok, max_new_tokens=4, seed=0, reuse_cache=True)
    fresh = TransformersPolicy(model, tok, max_new_tokens=4, seed=0, reuse_cache=False)
    conv = agentenv.Conversation(0, list(env.reset(seed=0)[0]))
    [gen] = kept.act([conv])
    assert fresh.act([conv])[0].token_ids == gen.token_ids
    assert kept._kv is not None
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)  # in place, as an optimiser step writes
    obs, *_ = env.step(gen.action)
    env.close()
    conv = agentenv.Conversation(0, [*conv.messages, {"role": "assistant", "content": gen.action}, *obs])
    [after] = kept.act([conv])
    [expected] = fresh.act([conv])  # a stale cache would give other log-probs
    assert after.token_ids == expected.token_ids
    assert after.logprobs == pytest.approx(expected.logprobs, abs=1e-5)


def test_out_of_memory_with_the_cache_samples_again_without_it(model, tok) -> None:
    policy = TransformersPolicy(model, tok, max_new_tokens=4, seed=0, reuse_cache=True)
    kept: list[Any] = []  # the caches kept from an earlier turn
    prefix_of = policy._prefix

    def recording(*args: Any) -> Any:
        prefix = prefix_of(*args)
        kept.extend([prefix.cache] if prefix is not None else [])
        return prefix

    policy._prefix = recording  # type: ignore[method-assign]

    def short_of_memory(_m: Any, _a: Any, kw: dict[str, Any]) -> None:
        cached = kw.get("cache", kw.get("past_key_values"))  # the name depends on the transformers version
        if any(cached is c for c in kept) and kw["input_ids"].shape[1] > 1:  # a turn's first call, from a kept cache
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    handle = model.register_forward_pre_hook(short_of_memory, with_kwargs=True)
    try:
        with pytest.warns(UserWarning, match="out of memory"):
            trajs = _rollout(policy, n=3)
    finally:
        handle.remove()
    assert all(t.failure is not agentenv.Failure.INFRA for t in trajs)
    assert all(len(g.token_ids) >= 1 for t in trajs for g in t.generations if g is not None)
    assert policy._kv is None  # caching stays off until reset
    policy.reset()
    _rollout(policy, n=2)
    assert policy._kv is not None


def test_models_whose_cache_or_attention_cannot_take_holes_do_not_reuse(tok) -> None:
    assert reusable(_qwen(tok))
    sliding = _qwen(tok, use_sliding_window=True, sliding_window=16, max_window_layers=0)
    assert not reusable(sliding)
    assert not TransformersPolicy(sliding, tok, reuse_cache=True).reuse_cache


def test_sample_refuses_a_prefix_that_the_prompt_does_not_extend(model) -> None:
    first = sample(model, [[5, 6, 7]], stop_ids=[0], pad_id=1, max_new_tokens=2, keep_cache=True)
    prefix = first.prefix
    assert isinstance(prefix, KVPrefix)
    held = prefix.ids[0]
    with pytest.raises(ValueError, match="not a proper prefix"):
        sample(model, [[9, *held[1:], 4]], stop_ids=[0], pad_id=1, max_new_tokens=2, prefix=prefix)
    with pytest.raises(ValueError, match="not a proper prefix"):
        sample(model, [held], stop_ids=[0], pad_id=1, max_new_tokens=2, prefix=prefix)


def test_the_update_runs_without_the_rollouts_kv_cache_held(tmp_path, monkeypatch) -> None:
    from agentenv.trainers import GRPOConfig, GRPOTrainer
    from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    cfg = GRPOConfig(
        output_dir=str(tmp_path / "run"), max_new_tokens=8, max_seq_len=128, report_to=[], batch_size=4,
        group_size=2, eval_episodes=0,
    )  # fmt: skip
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg)
    held: list[object] = []
    update = trainer.updater.update

    def holding(*a: Any, **k: Any) -> Any:
        held.append(trainer.policy._kv)
        return update(*a, **k)

    monkeypatch.setattr(trainer.updater, "update", holding)
    trainer.train_step()
    assert trainer.policy.reuse_cache and held == [None]  # every episode ended: its cache is freed first


def _fed_per_phase(tmp_path: Any, reuse: bool, share: bool) -> tuple[int, int, list[list[int]]]:
    """Tokens fed to the model in one step's sampling and in its update, and the ids a
    second sampling (with the trained weights) draws."""
    from agentenv.trainers import GRPOConfig, GRPOTrainer
    from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    cfg = GRPOConfig(
        output_dir=str(tmp_path / f"{reuse}-{share}"), max_new_tokens=6, max_seq_len=160, report_to=[],
        batch_size=4, group_size=4, eval_episodes=0, reuse_kv_cache=reuse, share_prompts=share,
    )  # fmt: skip
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=cfg)
    fed = {"sample": 0, "update": 0}
    phase = ["sample"]

    def count(_m: Any, args: Any, _o: Any) -> None:
        fed[phase[0]] += args[0].numel()

    trainer.model.get_input_embeddings().register_forward_hook(count)
    update = trainer.updater.update

    def updating(*a: Any, **k: Any) -> Any:
        phase[0] = "update"
        return update(*a, **k)

    trainer.updater.update = updating  # type: ignore[method-assign]
    assert not trainer.train_step().get("skipped_update")
    phase[0] = "sample"
    batch = trainer.collector.collect(1, trainer.policy)
    ids = [g.token_ids for t in batch.groups[0] for g in t.generations if g is not None]
    return fed["sample"], fed["update"], ids


def test_cross_turn_reuse_and_prompt_sharing_are_separate_switches(tmp_path) -> None:
    """`reuse_kv_cache` keeps the cache between turns; `share_prompts` runs a group's
    prompt once, in sampling and in the update. Each switch changes only what its own
    part feeds the model, and neither changes what is sampled."""
    both, no_reuse, no_share = (_fed_per_phase(tmp_path, *s) for s in ((True, True), (False, True), (True, False)))
    assert no_reuse[0] > both[0] and no_reuse[1] == both[1]  # turns re-fed; the update shares as before
    assert no_share[1] > both[1]  # each row runs its prompt in the update
    assert no_share[0] > both[0]  # and in sampling: each row prefills the group's prompt
    assert both[2] == no_reuse[2] == no_share[2]

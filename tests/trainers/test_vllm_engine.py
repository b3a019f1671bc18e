"""The vLLM rollout engine, on vLLM's CPU build in float32: token-exact episodes, log-probs
equal to the trainer's, weights pushed after a step, LoRA pushed merged, and a GRPO run.

Needs the vllm extra; skipped without it unless AGENTENV_REQUIRE_VLLM=1 (scripts/test.sh
sets it after installing it), which makes a missing vLLM a failure. One engine serves the
module (starting one takes seconds in eager mode, about a minute compiled)."""

from __future__ import annotations

import copy
import importlib.util
import os

import pytest
import torch

import agentenv
from agentenv.trainers.batch import build_examples, collate
from agentenv.trainers.logprobs import policy_logprobs
from tests.trainers.toy import SayEnv, tiny_tokenizer

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("AGENTENV_REQUIRE_VLLM") == "1":
        pytest.fail("AGENTENV_REQUIRE_VLLM=1 but vLLM is not installed (pip install -e '.[vllm]')")
    pytest.skip("needs vLLM (the vllm extra)", allow_module_level=True)

from agentenv.trainers.model import merged_weights
from agentenv.trainers.vllm_engine import VLLMEngine, VLLMPolicy

pytestmark = pytest.mark.slow

TOLERANCE = 1e-4
"""The engine's float32 log-probs against the trainer's recomputation (about 1e-6 here)."""


def _model(tokenizer, seed: int = 0):
    """A tiny Qwen2 whose heads vLLM's CPU attention takes (head size 32)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    ).eval()


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def setup(tok):
    model = _model(tok)
    engine = VLLMEngine(model, tok, max_model_len=512, enforce_eager=True, kv_cache_gb=0.25)
    yield model, engine
    engine.close()


def _policy(engine, tok, **kw):
    return VLLMPolicy(engine, tok, max_new_tokens=kw.pop("max_new_tokens", 12), max_context_tokens=512, **kw)


def _gaps(model, trajs, pad_id, temperature=1.0):
    """|engine log-prob - trainer log-prob| over every generated token of ``trajs``."""
    batch = collate(build_examples(trajs, [[0.0] * t.turns for t in trajs], max_seq_len=512), pad_id)
    with torch.no_grad():
        logp, _ = policy_logprobs(model, batch, temperature=temperature, share_prompts=False)
    m = batch.mask.bool()
    assert m.sum() > 0
    return (logp[m] - batch.old_logp[m]).abs()


def _forced(model, prompt, ids):
    """The model's log-probs of ``ids`` after ``prompt``, teacher-forced."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)


def test_episodes_are_token_exact_and_the_engines_log_probs_are_the_trainers(setup, tok):
    model, engine = setup
    policy = _policy(engine, tok)
    trajs = agentenv.rollout(SayEnv, policy, n=6, seed=0)
    for i, traj in enumerate(trajs):
        gens = [g for g in traj.generations if g is not None]
        assert len(gens) == traj.turns == 2
        ids = [t for g in gens for t in (*(g.prompt_ids or []), *g.token_ids)]
        assert ids == policy._episodes[i].ids  # appended turn by turn, never re-tokenised
        assert gens[1].prompt_ids and gens[1].prompt_ids[0] != gens[0].prompt_ids[0]  # only the observation
        assert all(len(g.logprobs) == len(g.token_ids) for g in gens)
        assert traj.messages[2]["content"] == tok.decode(
            gens[0].token_ids[:-1] if gens[0].finish_reason == "stop" else gens[0].token_ids, skip_special_tokens=True
        )
    assert float(_gaps(model, trajs, policy.pad_id).max()) < TOLERANCE


def test_log_probs_are_those_sampled_from_at_the_temperature(setup, tok):
    model, engine = setup
    policy = _policy(engine, tok, temperature=0.7)
    trajs = agentenv.rollout(SayEnv, policy, n=4, seed=0)
    assert float(_gaps(model, trajs, policy.pad_id, temperature=0.7).max()) < TOLERANCE


def test_a_stop_string_ends_the_turn_with_the_completing_token_kept(setup, tok):
    _, engine = setup
    out = engine.sample([[5, 6, 7]] * 8, [40] * 8, stop_ids=[tok.eos_token_id], stop=["a"])
    for ids, logps, stopped in zip(out.token_ids, out.logprobs, out.stopped, strict=True):
        text = tok.decode(ids, skip_special_tokens=True)
        assert len(logps) == len(ids) and 1 <= len(ids) <= 40
        if stopped and ids[-1] != tok.eos_token_id:
            assert "a" in text and "a" not in tok.decode(ids[:-1], skip_special_tokens=True)
        elif not stopped:
            assert len(ids) == 40 and "a" not in text


def test_a_pushed_step_changes_the_engine_and_its_cached_prefixes_are_recomputed(setup, tok):
    model, engine = setup
    prompt = [[3 + i % 280 for i in range(300)]]  # whole blocks of the prefix cache (vLLM caches full blocks only)
    before = engine.sample(prompt, [8], stop_ids=[tok.eos_token_id], temperature=0.0)
    engine.sample(prompt, [8], stop_ids=[tok.eos_token_id], temperature=0.0)  # the prompt is in the prefix cache
    trained = copy.deepcopy(model)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    try:
        engine.push(trained)
        after = engine.sample(prompt, [8], stop_ids=[tok.eos_token_id], temperature=0.0)
        assert after.token_ids != before.token_ids or after.logprobs[0] != pytest.approx(before.logprobs[0], abs=1e-3)
        # The cached prompt was computed again: its continuation's log-probs are the new weights'.
        forced = _forced(trained, prompt[0], after.token_ids[0])
        assert float((forced - torch.tensor(after.logprobs[0])).abs().max()) < TOLERANCE
        policy = _policy(engine, tok)
        trajs = agentenv.rollout(SayEnv, policy, n=4, seed=1)
        assert float(_gaps(trained, trajs, policy.pad_id).max()) < TOLERANCE  # the new weights, whole prompts too
    finally:
        engine.push(model)


def test_lora_weights_are_pushed_merged_and_the_model_is_left_as_it_was(setup, tok):
    from peft import LoraConfig, get_peft_model

    model, engine = setup
    lora = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)  # B starts at zero: make the adapters matter
    state = {k: v.clone() for k, v in lora.state_dict().items()}
    merged = dict(merged_weights(lora))
    assert not any("lora_" in k or "base_layer" in k for k in merged)
    assert all(torch.equal(v, lora.state_dict()[k]) for k, v in state.items())  # not modified
    reference = copy.deepcopy(lora).merge_and_unload().state_dict()
    assert set(merged) == set(reference)
    for k, v in reference.items():
        torch.testing.assert_close(merged[k], v)
    try:
        engine.push(lora)
        policy = _policy(engine, tok)
        trajs = agentenv.rollout(SayEnv, policy, n=4, seed=2)
        assert float(_gaps(lora, trajs, policy.pad_id).max()) < TOLERANCE
    finally:
        engine.push(model)


def test_grpo_trains_through_the_engine_with_the_weights_pushed_every_step(tmp_path, tok):
    from agentenv.trainers import GRPOConfig, GRPOTrainer

    model = _model(tok, seed=3)
    config = GRPOConfig(
        steps=2, group_size=4, batch_size=8, max_new_tokens=8, max_seq_len=256, learning_rate=1e-2,
        eval_episodes=4, eval_every=0, output_dir=str(tmp_path / "run"), report_to=[], resume=False,
        rollout_engine="vllm", vllm={"enforce_eager": True, "kv_cache_gb": 0.25},
    )  # fmt: skip
    trainer = GRPOTrainer(model, tok, envs=[SayEnv], config=config)
    try:
        start = copy.deepcopy(model.state_dict())
        probe = [list(range(3, 40))]
        first = trainer.engine.sample(probe, [6], stop_ids=[tok.eos_token_id], temperature=0.0)
        metrics = trainer.train_step()
        trainer.step += 1
        assert not metrics.get("skipped_update") and metrics["time/push_s"] > 0
        assert any(not torch.equal(v, model.state_dict()[k]) for k, v in start.items())
        for key in ("logprob_gap_mean", "logprob_gap_max", "is_ratio_min", "is_ratio_mean", "is_ratio_max"):
            assert f"sampler/{key}" in metrics
        assert metrics["sampler/logprob_gap_max"] < TOLERANCE and metrics["sampler/masked_frac"] == 0.0
        second = trainer.engine.sample(probe, [6], stop_ids=[tok.eos_token_id], temperature=0.0)
        assert second.logprobs[0] != pytest.approx(first.logprobs[0], abs=1e-4)  # the engine holds the stepped weights
        trajs = agentenv.rollout(SayEnv, trainer.policy, n=4, seed=5)
        trainer.policy.reset()
        assert float(_gaps(model, trajs, trainer.policy.pad_id).max()) < TOLERANCE
        trainer.close()
        assert trainer.engine.closed
        assert 0.0 <= trainer.evaluate(4) <= 1.0  # the engine starts again, on the current weights
    finally:
        trainer.close()


def test_the_real_model_trains_through_the_engine_and_the_engine_follows_it(tmp_path):
    # SmolLM2-135M-Instruct (the smollm2 extra): one GRPO step on arithmetic through vLLM.
    from agentenv.trainers import GRPOConfig, GRPOTrainer

    config = GRPOConfig(
        model="smollm2-135m-instruct", envs={"arithmetic-v0": 1.0}, tool_prompt="compact", steps=1,
        group_size=2, batch_size=4, max_new_tokens=16, max_seq_len=512, max_turns=2, learning_rate=1e-4,
        eval_episodes=0,
        step_advantage="none", output_dir=str(tmp_path / "run"), report_to=[], resume=False,
        rollout_engine="vllm", vllm={"enforce_eager": True, "kv_cache_gb": 0.5}, micro_batch_size=4,
    )  # fmt: skip
    trainer = GRPOTrainer(config=config, model=config.model)
    try:
        assert trainer.engine is not None
        tok, source = trainer.tokenizer, trainer.sources[0]
        probe = [tok("The quick brown fox", add_special_tokens=False)["input_ids"]]
        first = trainer.engine.sample(probe, [6], stop_ids=[tok.eos_token_id], temperature=0.0)
        trainer.policy.reset()
        metrics = trainer.updater.update(  # one update on episodes the engine sampled, rewards made to differ
            [_varied(agentenv.rollout(source.factory, trainer.policy, tasks=[task] * 2)) for task in source.train[:2]],
            [source.reward_weights] * 2,
            step=trainer.step,
        )
        trainer.policy.reset()
        assert not metrics.get("skipped_update") and metrics["sampler/logprob_gap_max"] < TOLERANCE
        trainer.engine.push(trainer.model)
        second = trainer.engine.sample(probe, [6], stop_ids=[tok.eos_token_id], temperature=0.0)
        assert second.logprobs[0] != pytest.approx(first.logprobs[0], abs=1e-4)
        forced = _forced(trainer.model, probe[0], second.token_ids[0])
        assert float((forced - torch.tensor(second.logprobs[0])).abs().max()) < TOLERANCE
    finally:
        trainer.close()


def _varied(group):
    """The group with task rewards 0 and 1, so its advantages are not all zero."""
    return [t.model_copy(update={"task_reward": float(i % 2)}) for i, t in enumerate(group)]

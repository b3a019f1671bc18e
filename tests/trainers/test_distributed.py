"""Data-parallel training: two gloo ranks on the CPU against one process on the same batch.

The ranks are started with ``torch.multiprocessing`` (spawn) and join through the
environment variables torchrun would set. Every run replays the same recorded groups
(rollouts sample their tokens from a generator per rank, so fresh rollouts on two
ranks are other samples than on one process, though from the same tasks and seeds).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from agentenv.trainers import GRPOConfig, GRPOTrainer
from agentenv.trainers.distributed import DataParallel
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer

pytestmark = pytest.mark.slow  # processes that import torch and train

CASES = {
    "dapo": {"loss": "dapo"},
    "grpo": {"loss": "grpo", "kl_coef": 0.05, "ppo_epochs": 2},
    "dapo-fsdp": {"loss": "dapo", "data_parallel": "fsdp"},
}
"""A token-mean loss (whose unit is the whole batch's policy tokens); a sequence-mean one
with a reference model and a second epoch (old log-probs, clipping); the token-mean one
with the model sharded by FSDP2. One process ignores ``data_parallel``."""

GRAD_RTOL = 1e-5
"""Each gradient tensor agrees with one process's to this share of its largest entry
(measured: 9.3e-7). Not bit for bit, because the float sums run in another order: each
rank adds its own micro-batches and the all-reduce adds the ranks, where one process
adds every micro-batch in one sequence; prompt sharing also groups rows by micro-batch."""
PARAM_ATOL = 1e-5
"""The weights after the AdamW step, 1% of the learning rate (measured: 4.4e-7). Adam's
first step divides each gradient entry by its own magnitude, so an entry whose gradient
is near zero carries its rounding into the update; and it is blind to the gradient's
overall scale, which is why the gradients are compared as well."""


def _config(run_dir: Path, case: str, **overrides: object) -> GRPOConfig:
    base = dict(
        output_dir=str(run_dir),
        steps=1,
        group_size=4,
        batch_size=12,  # 3 groups: rank 0 trains on two, rank 1 on one (fewer micro-batches)
        max_new_tokens=12,
        max_seq_len=256,
        eval_episodes=0,
        micro_batch_size=3,
        learning_rate=1e-3,
        report_to=[],
        save_trajectories=False,
        resume=False,
        dist_timeout_s=60.0,
    )
    return GRPOConfig(**{**base, **CASES[case], **overrides})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _join_as(rank: int, world: int, port: int) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world)
    )
    torch.set_num_threads(1)


def _replaying(trainer: GRPOTrainer, recorded: dict[tuple[str, int], list]) -> GRPOTrainer:
    """The trainer's rollouts replaced by the recorded groups of the same draws."""

    def replay(draws, timer, round_, step, policy):  # type: ignore[no-untyped-def]
        return [recorded[(d.task.id, d.seed)] for d in draws]

    trainer.collector.rollout_groups = replay  # type: ignore[method-assign]
    return trainer


def _whole(t: torch.Tensor) -> torch.Tensor:
    """A tensor, or a sharded one gathered (a collective: every rank calls it)."""
    full = getattr(t, "full_tensor", None)
    return (full() if full is not None else t).detach().clone()


def _one_step(workdir: Path, case: str, recorded: dict) -> tuple[dict, dict, dict]:
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer)
    trainer = _replaying(GRPOTrainer(model, tokenizer, envs=[SayEnv], config=_config(workdir / case, case)), recorded)
    if trainer.config.kl_coef > 0:  # as `train` makes it, after the model is data-parallel
        trainer.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
    metrics = trainer.train_step()
    params = {n: _whole(p) for n, p in model.named_parameters()}
    grads = {n: _whole(p.grad) for n, p in model.named_parameters() if p.grad is not None}
    if trainer.dist.lockstep:  # a sharded checkpoint round trip: written whole, read back into shards
        trainer.step = 1
        trainer._checkpoint()
        config = _config(workdir / case, case, resume=True)
        fresh = GRPOTrainer(tiny_model(tokenizer, seed=1), tokenizer, envs=[SayEnv], config=config)
        assert fresh._maybe_resume() and fresh.step == 1
        metrics["_resumed_equal"] = all(
            torch.equal(_whole(p), params[n]) for n, p in fresh.model.named_parameters()
        ) and len(fresh.optimizer.state) == len(trainer.optimizer.state)
    return params, grads, metrics


def _rank_steps(rank: int, world: int, port: int, workdir: Path) -> None:
    _join_as(rank, world, port)
    recorded = pickle.loads((workdir / "groups.pkl").read_bytes())
    results = {case: _one_step(workdir, case, recorded) for case in CASES}
    torch.save(results, workdir / f"rank{rank}.pt")
    torch.distributed.destroy_process_group()


def _record_groups(workdir: Path) -> dict:
    tokenizer = tiny_tokenizer()
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=_config(workdir / "rec", "dapo"))
    n_groups = trainer.config.batch_size // trainer.config.group_size
    draws = trainer.sampler.sample(0, 0, n_groups)
    groups = trainer.collector.rollout_groups(draws, defaultdict(float), 0, 0, trainer.policy)
    return {(d.task.id, d.seed): g for d, g in zip(draws, groups, strict=True)}


def test_two_ranks_make_the_step_of_one_process_on_the_same_batch(tmp_path):
    recorded = _record_groups(tmp_path)
    (tmp_path / "groups.pkl").write_bytes(pickle.dumps(recorded))
    mp.spawn(_rank_steps, args=(2, _free_port(), tmp_path), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    for case in CASES:
        params, grads, metrics = _one_step(tmp_path / "one", case, recorded)
        for rank in ranks:
            r_params, r_grads, r_metrics = rank[case]
            assert r_grads.keys() == grads.keys() and grads
            for name, g in grads.items():
                torch.testing.assert_close(r_grads[name], g, rtol=0, atol=GRAD_RTOL * float(g.abs().max()))
            diff = max(float((r_params[n] - p).abs().max()) for n, p in params.items())
            gdiff = max(float((r_grads[n] - g).abs().max() / g.abs().max()) for n, g in grads.items())
            print(f"{case}: max |param difference| {diff:.2e}, max grad difference / tensor max {gdiff:.2e}")
            assert diff <= PARAM_ATOL
            assert r_metrics["loss"] == pytest.approx(metrics["loss"], rel=1e-5, abs=1e-7)
            assert r_metrics["groups"] == metrics["groups"] == 3
            assert r_metrics["reward/task"] == metrics["reward/task"]
            # The step's compute is the whole batch's on every rank, as in one process.
            assert r_metrics["tokens/trained"] == metrics["tokens/trained"] > 0
            assert r_metrics["tokens/generated"] == metrics["tokens/generated"]
    # FSDP's checkpoint holds the whole weights (rank 0 wrote them), and a sharded
    # trainer resumes from it to the same weights and optimiser state.
    written = torch.load(tmp_path / "dapo-fsdp" / "checkpoints" / "step-000001" / "model.pt", weights_only=True)
    fsdp_params = ranks[0]["dapo-fsdp"][0]
    assert all(torch.equal(written[n], p) for n, p in fsdp_params.items())
    assert all(rank["dapo-fsdp"][2]["_resumed_equal"] for rank in ranks)


def _rank_dies(rank: int, world: int, port: int, workdir: Path) -> None:
    from agentenv.trainers.distributed import RankFailure

    _join_as(rank, world, port)
    tokenizer = tiny_tokenizer()
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=_config(workdir / "run", "dapo"))
    if rank == 1:
        trainer.collector.rollout_groups = lambda draws, timer, round_, step, policy: os._exit(3)  # type: ignore[method-assign]
    try:
        trainer.train_step()
    except RankFailure as e:
        (workdir / f"rank{rank}.err").write_text(str(e))
        raise SystemExit(1) from None
    (workdir / f"rank{rank}.ok").write_text("finished")


def test_a_rank_that_dies_stops_the_other_with_the_reason(tmp_path):
    ctx = mp.start_processes(_rank_dies, args=(2, _free_port(), tmp_path), nprocs=2, join=False, start_method="spawn")
    try:
        for p in ctx.processes:
            p.join(timeout=240)  # a guard against a hang, not a measure
        alive = [p.pid for p in ctx.processes if p.is_alive()]
        assert not alive, "a rank still waits for the dead one"
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in ctx.processes] == [1, 3]
    message = (tmp_path / "rank0.err").read_text()
    assert message.startswith("rank 0 of 2: gathering the rollouts failed: another rank died")
    assert "resume from the last checkpoint" in message
    assert not (tmp_path / "rank0.ok").exists()


def test_torchrun_restarts_the_ranks_after_one_dies_and_the_run_resumes(tmp_path):
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("WORLD_SIZE", None)
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    command += ["--max-restarts", "1", str(Path(__file__).with_name("ddp_worker.py")), str(run_dir)]
    done = run_torchrun(command, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "failed (exitcode: 3) local_rank: 1" in done.stderr  # torchrun names the rank that died
    # Rank 0's own RankFailure shows only when it notices before torchrun stops it.
    assert "resumed from" in done.stdout and "at step 1" in done.stdout
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step-000002"
    assert (run_dir / "final").is_dir()


def run_torchrun(command: list[str], *, env: dict[str, str], cwd: Path, timeout_s: float = 300.0):
    """``command`` to its end; on a hang, every rank's Python stacks (the workers dump them
    on SIGUSR1) in the failure, and no process of it left behind."""
    proc = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGUSR1)  # the workers' faulthandler prints where each one waits
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(f"torchrun did not finish within {timeout_s:g} s:\n{out[-2000:]}\n{err[-8000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # workers orphaned by a launcher that died
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def test_leaving_a_process_group_that_never_lets_go_does_not_hang_the_run(tmp_path, monkeypatch, caplog):
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    destroy, release = dist.destroy_process_group, threading.Event()
    monkeypatch.setattr(dist, "destroy_process_group", lambda *a, **k: release.wait())  # as in pytorch#75097
    try:
        data = DataParallel(rank=0, world_size=1, timeout_s=0.2, owns_group=True)
        with caplog.at_level(logging.WARNING, logger="agentenv.trainers.distributed"):
            data.close()
        assert data.world_size == 1
        assert "leaving the process group did not finish within 0.2 s; going on without it" in caplog.text
    finally:
        release.set()
        destroy()

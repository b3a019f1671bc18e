"""A torchrun worker for tests/trainers/test_distributed.py: two steps on the toy env,
with a checkpoint after each; rank 1 dies in step 2 of the first attempt, so torchrun
(``--max-restarts 1``) must restart both ranks and the trainer resume from step 1.

    torchrun --standalone --nproc_per_node 2 --max-restarts 1 tests/trainers/ddp_worker.py RUN_DIR [ddp|fsdp]
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys

import torch

from agentenv.trainers import GRPOConfig, GRPOTrainer
from tests.trainers.toy import SayEnv, tiny_model, tiny_tokenizer


def main(run_dir: str, data_parallel: str = "ddp") -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for the stacks of a hung rank
    torch.set_num_threads(1)
    tokenizer = tiny_tokenizer()
    config = GRPOConfig(
        output_dir=run_dir,
        steps=2,
        save_every=1,
        group_size=4,
        batch_size=8,
        max_new_tokens=8,
        max_seq_len=128,
        eval_episodes=0,
        learning_rate=1e-3,
        report_to=[],
        dist_timeout_s=60.0,
        data_parallel=data_parallel,
    )
    trainer = GRPOTrainer(tiny_model(tokenizer), tokenizer, envs=[SayEnv], config=config)
    play = trainer.collector.rollout_groups
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"

    def dying(draws, timer, round_, step, policy):  # type: ignore[no-untyped-def]
        if first_attempt and trainer.dist.rank == 1 and trainer.step == 1:
            os._exit(3)  # a rank that dies mid-run, without a word
        return play(draws, timer, round_, step, policy)

    trainer.collector.rollout_groups = dying  # type: ignore[method-assign]
    trainer.train()


if __name__ == "__main__":
    main(*sys.argv[1:])

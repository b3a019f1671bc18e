"""The parts of data-parallel training that need no second process (the ranks
themselves are tested in test_distributed.py)."""

from __future__ import annotations

import pytest

from agentenv.trainers import GRPOConfig
from agentenv.trainers.distributed import DataParallel, RankFailure


def test_one_process_is_every_rank_at_once(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    one = DataParallel.from_environment()
    assert not one.active and one.is_writer
    assert one.seed_salt == ()  # the seeds one process had before data parallelism
    assert one.loss_scale == 1.0
    assert one.spread([3, 1, 2], lambda items: [x * 10 for x in items], what="x") == [30, 10, 20]
    assert one.total(2.5) == 2.5 and one.most(4) == 4


@pytest.mark.parametrize("world", [2, 3, 4])
def test_the_ranks_shares_are_the_whole_list_once(world):
    n = 11
    shares = [list(DataParallel(rank=r, world_size=world).mine(n)) for r in range(world)]
    assert sorted(i for share in shares for i in share) == list(range(n))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_a_batch_with_fewer_groups_than_ranks_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"2 groups for 4 ranks.*set batch_size >= 16"):
        DataParallel(rank=0, world_size=4).check_groups(2, 4)
    DataParallel(rank=0, world_size=4).check_groups(4, 4)


def test_sharding_refuses_what_it_does_not_do_with_the_setting_to_change():
    sharded = DataParallel(rank=0, world_size=2, shard=True)
    with pytest.raises(ValueError, match=r"does not support a reference model.*kl_coef=0"):
        sharded.check_sharding(kl_coef=0.1, sft_steps=0, lora_r=0)
    with pytest.raises(ValueError, match=r"warm start.*sft_steps=0"):
        sharded.check_sharding(kl_coef=0.0, sft_steps=5, lora_r=0)
    sharded.check_sharding(kl_coef=0.0, sft_steps=0, lora_r=0)
    DataParallel(rank=0, world_size=2).check_sharding(kl_coef=0.1, sft_steps=5, lora_r=4)  # DDP does all three


def test_asynchronous_rollouts_are_refused_on_several_ranks_with_the_setting_to_change():
    with pytest.raises(ValueError, match=r"async_rollouts = true does not run under torchrun.*set it false"):
        DataParallel(rank=0, world_size=2).check_async(True)
    DataParallel(rank=0, world_size=2).check_async(False)
    DataParallel().check_async(True)  # one process: fine


def test_a_broken_connection_becomes_one_error_naming_the_wait_and_the_way_back():
    rank = DataParallel(rank=1, world_size=2, timeout_s=30)
    with pytest.raises(RankFailure) as e, rank._guard("gathering the rollouts"):
        raise RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:5021. This is typically caused...")
    assert str(e.value).startswith("rank 1 of 2: gathering the rollouts failed: another rank died or did not answer")
    assert "within 30 s" in str(e.value) and "resume from the last checkpoint" in str(e.value)
    with pytest.raises(RuntimeError, match="shape mismatch") as other, rank._guard("a training forward pass"):
        raise RuntimeError("shape mismatch")  # a bug of this rank stays itself
    assert not isinstance(other.value, RankFailure)


def test_the_collective_timeout_and_mode_are_validated():
    with pytest.raises(ValueError, match=r"dist_timeout_s must be > 0"):
        GRPOConfig(dist_timeout_s=0)
    with pytest.raises(ValueError, match=r"data_parallel must be one of 'ddp', 'fsdp'"):
        GRPOConfig(data_parallel="zero3")

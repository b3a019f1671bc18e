"""WorldCache: persistence across instances, the first reply per key kept, failures that
never fail a step, and claims that coalesce concurrent misses."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from agentenv.envs.world import WorldCache


def test_replies_persist_in_the_file_and_the_first_per_key_stays(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cache = WorldCache(path)
    cache.put("k", "w", "t", "m", "first")
    cache.put("k", "w", "t", "m", "second")
    cache.close()
    again = WorldCache(path)
    assert again.get("k") == "first" and again.get("other") is None and len(again) == 1


def test_a_broken_cache_is_a_miss_and_a_dropped_write(tmp_path: Path) -> None:
    cache = WorldCache(tmp_path / "c.sqlite")
    cache._db.execute("DROP TABLE responses")  # as a corrupt or foreign file would be
    assert cache.get("k") is None
    cache.put("k", "w", "t", "m", "reply")  # logged, not raised
    cache.close()


def test_a_second_claim_waits_for_the_first_and_a_stuck_holder_does_not_block_forever() -> None:
    cache = WorldCache()
    order: list[str] = []
    entered = threading.Event()

    def holder() -> None:
        with cache.claim("k", 5):
            order.append("a in")
            entered.set()
            time.sleep(0.2)  # the second claim arrives meanwhile
            order.append("a out")

    t = threading.Thread(target=holder)
    t.start()
    entered.wait(5)
    with cache.claim("k", 5):
        order.append("b in")
    t.join()
    assert order == ["a in", "a out", "b in"]

    release = threading.Event()
    held = threading.Event()

    def stuck_holder() -> None:
        with cache.claim("s", 5):
            held.set()
            release.wait(10)

    t = threading.Thread(target=stuck_holder)
    t.start()
    held.wait(5)
    waiter = threading.Thread(target=lambda: cache.claim("s", 0.1).__enter__())
    waiter.start()
    waiter.join(5)  # gives up waiting after its 0.1 s and goes ahead
    assert not waiter.is_alive()
    assert "s" in cache._pending  # and the stuck holder's claim is still its own
    release.set()
    t.join()
    assert "s" not in cache._pending

"""The response cache: accepted replies, keyed by world, tool, arguments, state, model and the history shown.

One SQLite table, ``responses(key, world, tool, model_id, reply, created)``; the key
is `agentenv.envs.world.keys.cache_key`. Only replies that passed validation are
stored, as the canonical ``{"observation", "state_patch"}`` JSON, so a seeded
episode replays exactly from the cache, with no model call, in this run or a later
one. A file is shared by every env and process that opens it (WAL mode, a busy
timeout); ``WorldCache()`` with no path is in memory, shared by the envs of this
process that are handed the same object.

Concurrent misses of one key are coalesced (`claim`): the first caller asks the
model while the others wait for its answer, so the G episodes of a GRPO group that
start in the same state make one model call, not G.

A cache that fails (a full disk, a corrupt file) never fails a step: a read that
fails is a miss, a write that fails is logged and dropped. Left out: eviction (the
table grows with distinct calls), sharing over a network.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["WorldCache", "open_cache"]

logger = logging.getLogger("agentenv.envs.world")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    world TEXT NOT NULL,
    tool TEXT NOT NULL,
    model_id TEXT NOT NULL,
    reply TEXT NOT NULL,
    created REAL NOT NULL
)
"""


class WorldCache:
    """Accepted world-model replies, in SQLite (see the module docstring)."""

    def __init__(self, path: str | Path | None = None) -> None:
        """
        Args:
            path: The SQLite file (created if missing, parent folders too); None: in memory.
        """
        self.path = None if path is None else Path(path)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            ":memory:" if self.path is None else str(self.path), check_same_thread=False, isolation_level=None
        )
        self._db.execute("PRAGMA busy_timeout = 10000")
        if self.path is not None:
            self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute(_SCHEMA)
        self._pending: dict[str, threading.Event] = {}
        self._closed = False

    def get(self, key: str) -> str | None:
        """The stored reply, or None (a read that fails counts as a miss)."""
        try:
            with self._lock:
                row = self._db.execute("SELECT reply FROM responses WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as e:
            logger.warning("world cache read failed (%s); treated as a miss", e)
            return None
        return None if row is None else str(row[0])

    def put(self, key: str, world: str, tool: str, model_id: str, reply: str) -> None:
        """Store an accepted reply; the first one stored for a key stays."""
        try:
            with self._lock:
                self._db.execute(
                    "INSERT OR IGNORE INTO responses VALUES (?, ?, ?, ?, ?, ?)",
                    (key, world, tool, model_id, reply, time.time()),
                )
        except sqlite3.Error as e:
            logger.warning("world cache write failed (%s); the reply is not kept", e)

    def delete(self, key: str) -> None:
        """Drop an entry (one that no longer validates)."""
        try:
            with self._lock:
                self._db.execute("DELETE FROM responses WHERE key = ?", (key,))
        except sqlite3.Error as e:
            logger.warning("world cache delete failed (%s)", e)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    @contextmanager
    def claim(self, key: str, timeout_s: float) -> Iterator[None]:
        """Hold ``key`` while asking the model. A caller that finds it held waits (up to
        ``timeout_s``) until it is released, then holds it in turn: it reads the cache again
        and asks the model itself only if the first caller stored nothing."""
        deadline = time.monotonic() + timeout_s
        mine: threading.Event | None = None
        while mine is None:
            with self._lock:
                held = self._pending.get(key)
                if held is None:
                    mine = self._pending[key] = threading.Event()
                    break
            if not held.wait(max(0.0, deadline - time.monotonic())):
                break  # the holder is stuck: go ahead without the key (a duplicate call at worst)
        try:
            yield
        finally:
            if mine is not None:
                with self._lock:
                    del self._pending[key]
                mine.set()

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()


_open: dict[Path | None, WorldCache] = {}
_open_lock = threading.Lock()


def open_cache(path: str | Path | None = None) -> WorldCache:
    """This process's cache for ``path`` (None: in memory), opened on first use: the envs of a
    process that name the same file share one connection, so their equal misses coalesce."""
    key = None if path is None else Path(path).resolve()
    with _open_lock:
        cache = _open.get(key)
        if cache is None or cache._closed:
            cache = _open[key] = WorldCache(key)
        return cache

"""Checking a saved SQLite database before an env puts it back (browser and tool-API snapshots).

A snapshot on disk may have been edited: a database restored into an episode must be
SQLite, undamaged, and hold exactly its seed's schema, or a trigger or a view put
there by hand would run in the episode as the app writes or the verifier reads.
"""

from __future__ import annotations

import sqlite3
from typing import Any

__all__ = ["check_same_schema"]


def check_same_schema(data: bytes, seed: bytes, what: str = "the snapshot's database") -> None:
    """`ValueError` unless ``data`` (a serialised database) is SQLite, passes
    ``PRAGMA quick_check`` and has ``seed``'s schema; empty bytes are an empty database."""
    saved, expected = _schema(data, what), _schema(seed, "the seed database")
    if saved != expected:
        differ = sorted({f"{kind} {name}" for kind, name, *_ in set(saved) ^ set(expected)})
        raise ValueError(f"{what} does not have the seed's schema (differs in: {', '.join(differ) or 'order'})")


def _schema(data: bytes, what: str) -> list[tuple[Any, ...]]:
    """The schema (``sqlite_master`` but its page numbers) of a serialised SQLite database."""
    if not data:  # an empty file is an empty database (SQLite cannot deserialise it)
        return []
    db = sqlite3.connect(":memory:")
    try:
        db.deserialize(data)
        rows = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        (check,) = db.execute("PRAGMA quick_check").fetchone()
    except sqlite3.DatabaseError as e:
        raise ValueError(f"{what} is not a SQLite database: {e}") from None
    finally:
        db.close()
    if check != "ok":
        raise ValueError(f"{what} is damaged: {check}")
    return rows

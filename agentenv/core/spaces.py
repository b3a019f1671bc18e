"""Gymnasium spaces for chat messages and actions.

`gymnasium.spaces.Text` draws from an alphanumeric charset by default and checks
every character against it; model text is arbitrary Unicode, so these spaces
accept any `str` up to a length and sample from a wide range of code points.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from gymnasium.spaces import Space

from agentenv.core.types import Message, ToolCall

__all__ = ["ActionSpace", "MessagesSpace", "UnicodeText"]

_ROLES = ("system", "user", "assistant", "tool")
# Printable planes: Latin through CJK and emoji, skipping surrogates (invalid in str).
_SAMPLE_RANGES = ((0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x4E00, 0x4FFF), (0x1F600, 0x1F64F))


def _random_text(rng: np.random.Generator, max_length: int) -> str:
    chars = []
    for _ in range(int(rng.integers(0, min(max_length, 64) + 1))):
        lo, hi = _SAMPLE_RANGES[int(rng.integers(len(_SAMPLE_RANGES)))]
        chars.append(chr(int(rng.integers(lo, hi + 1))))
    return "".join(chars)


class UnicodeText(Space[str]):
    """Any Unicode string of at most ``max_length`` characters."""

    def __init__(self, max_length: int = 100_000, *, seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = max_length

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return _random_text(self.np_random, self.max_length)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"UnicodeText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length


class MessagesSpace(Space[list[Message]]):
    """A list of OpenAI-shape chat messages (the observation of every agentenv env)."""

    def __init__(self, max_content_length: int = 1_000_000, *, seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.content = UnicodeText(max_content_length)

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(m, dict) and m.get("role") in _ROLES and self.content.contains(m.get("content")) for m in x
        )

    def sample(self, mask: Any = None, probability: Any = None) -> list[Message]:
        n = int(self.np_random.integers(1, 4))
        return [
            cast(
                Message,
                {
                    "role": _ROLES[int(self.np_random.integers(1, 4))],
                    "content": _random_text(self.np_random, self.content.max_length),
                },
            )
            for _ in range(n)
        ]

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "MessagesSpace()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessagesSpace)


class ActionSpace(Space[Any]):
    """Model text, a `ToolCall`, or an OpenAI assistant message dict."""

    def __init__(self, max_length: int = 100_000, *, seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.text = UnicodeText(max_length)

    def contains(self, x: Any) -> bool:
        if isinstance(x, (str, ToolCall)):
            return not isinstance(x, str) or self.text.contains(x)
        return (
            isinstance(x, dict) and x.get("role", "assistant") == "assistant" and ("content" in x or "tool_calls" in x)
        )

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return _random_text(self.np_random, self.text.max_length)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"ActionSpace(max_length={self.text.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActionSpace)

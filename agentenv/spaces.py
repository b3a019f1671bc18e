"""Gymnasium spaces for chat messages and actions.

`gymnasium.spaces.Text` draws from an alphanumeric charset by default and checks
every character against it; model text is arbitrary Unicode, so these spaces
accept any `str` up to a length and sample from a wide range of code points.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Space

from agentenv.types import ToolCall

__all__ = ["ActionSpace", "MessagesSpace", "UnicodeText"]

_ROLES = ("system", "user", "assistant", "tool")
# Printable planes: Latin through CJK and emoji, skipping surrogates (invalid in str).
_SAMPLE_RANGES = ((0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x4E00, 0x4FFF), (0x1F600, 0x1F64F))


class UnicodeText(Space[str]):
    """Any Unicode string of at most ``max_length`` characters."""

    def __init__(self, max_length: int = 100_000, *, seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = max_length

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(0, min(self.max_length, 64) + 1))
        chars = []
        for _ in range(length):
            lo, hi = _SAMPLE_RANGES[int(self.np_random.integers(len(_SAMPLE_RANGES)))]
            chars.append(chr(int(self.np_random.integers(lo, hi + 1))))
        return "".join(chars)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"UnicodeText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length


class MessagesSpace(Space[list[dict[str, Any]]]):
    """A list of OpenAI-shape chat messages (the observation of every agentenv env)."""

    def __init__(self, max_content_length: int = 1_000_000, *, seed: int | np.random.Generator | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.content = UnicodeText(max_content_length)

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(m, dict)
            and m.get("role") in _ROLES
            and self.content.contains(m.get("content"))
            for m in x
        )

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        self.content.np_random = self.np_random
        n = int(self.np_random.integers(1, 4))
        return [
            {"role": _ROLES[int(self.np_random.integers(1, 4))], "content": self.content.sample()}
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
        return isinstance(x, dict) and x.get("role", "assistant") == "assistant" and (
            "content" in x or "tool_calls" in x
        )

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        self.text.np_random = self.np_random
        return self.text.sample()

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"ActionSpace(max_length={self.text.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActionSpace)

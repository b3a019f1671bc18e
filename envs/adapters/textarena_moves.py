"""Moves for the ``"random"`` opponent in two-player games that do not list their legal moves.

Most TextArena games name the legal moves (or a few forms of them) in their messages,
and the random opponent draws from those (`agentenv.envs.adapters.textarena_games`).
The games here name a template or one example only, so each has a function that lists
its candidate moves from the live game's own state: the current player's pieces and
the squares they may reach, the cards and slots of a hand, the fields to allocate
units to. The candidates need not all be legal: the opponent tries them in a random
order on a copy of the game and plays the first the game accepts, so a function errs
on the side of more. Each takes the game's raw TextArena env, the player to move and a
`random.Random` seeded by the game (a replay draws the same), and must return moves
written as the game reads them.

Left out: any strategy. The opponent is random among legal moves, as it is in every
other game; a function only makes the legal moves findable.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["FAMILIES", "candidate_moves"]

Generator = Callable[[Any, int, random.Random], list[str]]
_EIGHT = [(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if (dr, dc) != (0, 0)]
_ALLOCATIONS = 16
"""Random allocations drawn per ColonelBlotto turn (every one is legal)."""


def candidate_moves(family: str, env: Any, player: int, rng: random.Random) -> list[str]:
    """The candidate moves of ``family``'s game for ``player`` (none for a game not here)."""
    make = _GENERATORS.get(family)
    return [] if make is None else make(env, player, rng)


def _board(env: Any) -> list[list[str]]:
    return list(env.state.game_state["board"])


def _squares_of(board: Any, n: int, piece: str) -> Iterator[tuple[int, int]]:
    """The (row, column) of each of ``piece``'s squares on an ``n`` x ``n`` board, row by row."""
    return ((r, c) for r in range(n) for c in range(n) if board[r][c] == piece)


def _alquerque(env: Any, player: int, rng: random.Random) -> list[str]:
    """A step to any neighbour or a jump of two along any line, from each of the player's pieces."""
    board, n = _board(env), env.BOARD_N
    piece = "R" if player == 0 else "B"
    moves = []
    for r, c in _squares_of(board, n, piece):
        for dr, dc in _EIGHT:
            for step in (1, 2):
                tr, tc = r + dr * step, c + dc * step
                if 0 <= tr < n and 0 <= tc < n and not board[tr][tc]:
                    moves.append(f"[{_square(r, c, n)} {_square(tr, tc, n)}]")
    return moves


def _breakthrough(env: Any, player: int, rng: random.Random) -> list[str]:
    """One row forward (up for player 0), straight or diagonal, from each of the player's pieces."""
    board, n = _board(env), env.board_size
    piece, forward = ("W", 1) if player == 0 else ("B", -1)
    moves = []
    for r, c in _squares_of(board, n, piece):
        for dc in (-1, 0, 1):
            tr, tc = r + forward, c + dc
            if 0 <= tr < n and 0 <= tc < n:
                moves.append(f"[{chr(97 + c)}{r + 1}{chr(97 + tc)}{tr + 1}]")
    return moves


def _lines_of_action(env: Any, player: int, rng: random.Random) -> list[str]:
    """Along each of the eight lines from each of the player's pieces, as many squares as
    the line holds pieces (the game's rule; jumps over enemies are the game's to refuse)."""
    board, n = _board(env), env.BOARD_N
    side = "O" if player == 0 else "X"
    moves = []
    for r, c in _squares_of(board, n, side):
        for dr, dc in _EIGHT:
            distance = env._count_pieces_on_line(r, c, dr, dc)
            tr, tc = r + dr * distance, c + dc * distance
            if 0 <= tr < n and 0 <= tc < n and board[tr][tc] != side:
                moves.append(f"[{env.rc_to_coord(r, c)}{env.rc_to_coord(tr, tc)}]")
    return moves


def _golf(env: Any, player: int, rng: random.Random) -> list[str]:
    """Every action the game's parser knows, over every slot of the hand (rows and columns
    from 0 and from 1: the game says which it counts from)."""
    rows, columns = env.num_rows, env.num_columns
    slots = [(r, c) for r in range(rows + 1) for c in range(columns + 1)]
    return [
        "[draw]",
        "[take]",
        "[discard]",
        "[knock]",
        *(f"[swap {r} {c}]" for r, c in slots),
        *(f"[peek {r} {c}]" for r, c in slots),
    ]


_BRACKETED = re.compile(r"\[[^\[\]]+\]")


def _santorini(env: Any, player: int, rng: random.Random) -> list[str]:
    """The game's own list of valid moves (it shows them to a player only in its first prompt)."""
    return _BRACKETED.findall(env._get_valid_moves(player))


def _truth_and_deception(env: Any, player: int, rng: random.Random) -> list[str]:
    """The two guesses; while the players talk, either is a message the game accepts."""
    return ["[Fact 1]", "[Fact 2]"]


def _colonel_blotto(env: Any, player: int, rng: random.Random) -> list[str]:
    """Random allocations of exactly the units there are, over every field."""
    fields, units = list(env.field_names), int(env.num_total_units)
    moves = []
    for _ in range(_ALLOCATIONS):
        cuts = sorted(rng.randint(0, units) for _ in range(len(fields) - 1))
        shares = [b - a for a, b in zip([0, *cuts], [*cuts, units], strict=True)]
        moves.append("[" + " ".join(f"{field}{share}" for field, share in zip(fields, shares, strict=True)) + "]")
    return moves


def _tak(env: Any, player: int, rng: random.Random) -> list[str]:
    """Placing a flat stone, a wall or the capstone on each empty square, and moving the top
    piece of each stack the player holds one square, written with tuples (``(F0,)``) so the
    move holds one pair of square brackets, as an agent's reply must."""
    board, n = env.board, env.board_size
    moves = []
    for r in range(n):
        for c in range(n):
            stack = board[r][c]
            if not stack:
                moves += [f"[place () {{({r},{c}): ({kind}{player},)}}]" for kind in "FWC"]
            elif stack[-1].endswith(str(player)):
                for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0)):
                    tr, tc = r + dr, c + dc
                    if 0 <= tr < n and 0 <= tc < n:
                        moves.append(f"[move ({r},{c}) {{({tr},{tc}): ({stack[-1]},)}}]")
    return moves


def _square(r: int, c: int, n: int) -> str:
    """Alquerque's name of the square at row ``r`` (0 at the top), column ``c``."""
    return f"{'abcdefghij'[c]}{n - r}"


_GENERATORS: dict[str, Generator] = {
    "Alquerque": _alquerque,
    "Breakthrough": _breakthrough,
    "ColonelBlotto": _colonel_blotto,
    "Golf": _golf,
    "LinesOfAction": _lines_of_action,
    "SantoriniBaseFixed": _santorini,
    "Tak": _tak,
    "TruthAndDeception": _truth_and_deception,
}
FAMILIES = frozenset(_GENERATORS)
"""The games whose candidate moves are made here."""

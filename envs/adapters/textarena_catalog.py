"""Which TextArena games agentenv plays, and their ids: the catalogue `TextArenaEnv` reads.

`GAMES` holds every supported game and variant (by TextArena id) with its player count,
its difficulty rank and the move forms the ``"random"`` opponent also tries; `EXCLUDED` names
each game left out and why (the network, data missing from the wheel, three or more
players, a module that does not import on Python 3.11, scoring that pays blind play). `agentenv_id` and `game_info`
map between TextArena's ids and agentenv's. Nothing here imports textarena.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentenv.core.task import did_you_mean

__all__ = ["EXCLUDED", "GAMES", "GameInfo", "agentenv_id", "game_info"]

# -- which games -------------------------------------------------------------------

# family -> (players, TextArena variants: "" is the plain id ``Family-v0``). Checked against
# textarena 0.7.4 on Python 3.11 with loopback only: every one resets and plays offline
# (tests/envs/adapters/test_textarena_games.py sweeps them, slow).
_2048_VARIANTS = (
    *("ultra-easy", "mega-easy", "super-easy", "very-easy", "easy", "", "hard", "very-hard", "extreme"),
    *("3x3", "5x5", "6x6", "8x8", "10x10"),
)
_SUPPORTED: dict[str, tuple[int, tuple[str, ...]]] = {
    # one player
    "2048": (1, _2048_VARIANTS),
    "Blackjack": (1, ("", "long")),
    "Countdown": (1, ("",)),
    "Crosswords": (1, ("", "hardcore")),
    "Cryptarithm": (1, ("",)),
    "FifteenPuzzle": (1, ("",)),
    "FrozenLake": (1, ("", "random", "hardcore")),
    "GuessTheNumber": (1, ("", "hardcore")),
    "LightsOut": (1, ("",)),
    "LogicPuzzle": (1, ("", "hard")),
    "Mastermind": (1, ("", "hard", "extreme")),
    "PegJump": (1, ("",)),
    "RushHour": (1, ("",)),
    "Secretary": (1, ("", "long")),
    "Slitherlink": (1, ("",)),
    "Sokoban": (1, ("",)),
    "Sudoku": (1, ("very-easy", "easy", "", "medium", "hard")),
    "ThreeCardMonte": (1, ("",)),
    "TowerOfHanoi": (1, ("", "medium", "hard", "hardcore", "extreme")),
    # two players
    "Alquerque": (2, ("",)),
    "Battleship": (2, ("", "standard", "large", "extreme")),
    "Breakthrough": (2, ("tiny", "small", "", "large", "blind", "long")),
    "Briscola": (2, ("",)),
    "Chopsticks": (2, ("", "medium", "long")),
    "ColonelBlotto": (2, ("small", "", "large", "extreme")),
    "ConnectFour": (2, ("", "blind", "large")),
    "Crusade": (2, ("",)),
    "GameOfPureStrategy": (2, ("",)),
    "GermanWhist": (2, ("",)),
    "Golf": (2, ("", "medium")),
    "HighSociety": (2, ("",)),
    "IndianPoker": (2, ("short", "", "medium", "long", "extreme")),
    "IteratedMatchingPennies": (2, ("",)),
    "IteratedPrisonersDilemma": (2, ("",)),
    "IteratedRockPaperScissors": (2, ("",)),
    "IteratedTwoThirdsAverage": (2, ("",)),
    "IteratedUltimatumGame": (2, ("", "alternate")),
    "KuhnPoker": (2, ("", "short", "medium", "long", "extreme")),
    "LiarsDice": (2, ("small", "", "large")),
    "LinesOfAction": (2, ("",)),
    "MarketEntryGame": (2, ("",)),
    "MemoryGame": (2, ("", "medium", "hard")),
    "Nim": (2, ("", "medium", "large")),
    "Othello": (2, ("tiny", "small", "", "big", "huge", "hard")),
    "PigDice": (2, ("", "short", "long", "50", "100", "150", "200", "250", "300", "350", "400", "450", "500")),
    "Poker": (2, ("small", "", "long", "extreme")),
    "PublicGoodsGame": (2, ("",)),
    "QuantumTicTacToe": (2, ("",)),
    "SantoriniBaseFixed": (2, ("",)),
    "SimpleBlindAuction": (2, ("quick", "", "rich")),
    "SimpleNegotiation": (2, ("short", "", "long")),
    "SimpleTak": (2, ("", "medium", "large", "extreme")),
    "Snake": (2, ("", "standard", "large")),
    "Surround": (2, ("", "standard", "large")),
    "Tak": (2, ("", "medium", "hard")),
    "TicTacToe": (2, ("",)),
    "TruthAndDeception": (2, ("", "long", "extreme")),
    "WildTicTacToe": (2, ("",)),
}

_NLTK = "downloads NLTK corpora when imported (no network here)"
_JURY = "needs an OpenRouter API key (an LLM plays the judge or the other side over the network)"
_PY312 = "does not import on Python 3.11 (its module uses 3.12 f-string syntax)"
_MANY = "needs three or more players"
_AFTER = (
    "cannot be played here: a proposal is the bracket and what follows it ([Propose] $X.XX, [Propose] "
    "and 8 letters), and a move is the bracketed text alone, so the agent could only accept or reject"
)
EXCLUDED: dict[str, str] = {
    "BabyAiText": "imports the `gym` package, which textarena does not install",
    "Bandit": (
        "scores wrongly in textarena 0.7.4: it compares the chosen button with a dict, so no choice "
        "is correct, and pays the regret, so the worst button earns the most"
    ),
    "CharacterConclave": _MANY,
    "Checkers": _PY312,
    "Chess": _PY312,
    "Codenames": _NLTK,
    "Debate": _JURY,
    "DontSayIt": _NLTK,
    "GuessWho": _JURY,
    "Hangman": _NLTK,
    "IteratedStagHunt": _PY312,
    "Klondike": _PY312,
    "LetterAuction": _NLTK,
    "Minesweeper": (
        "lets the player step on a mine in textarena 0.7.4: a mine is an invalid move with a retry, "
        "so guessing costs nothing and boards blown up on still count as cleared"
    ),
    "NewRecruit": _AFTER,
    "ReverseTicTacToe": _PY312,
    "ScenarioPlanning": _JURY,
    "ScorableGames": "lacks its game configurations in the textarena 0.7.4 wheel",
    "SecretMafia": _MANY,
    "Set": (
        "scores wrongly in textarena 0.7.4: the same card three times ([1, 1, 1]) is a Set, and the "
        "reward is the count of Sets, so blind play scores a solve on every seed"
    ),
    "SettlersOfCatan": _MANY,
    "Sokoban-v0-medium": "takes from a second to minutes per reset to generate a level (over 100 s for seed 1)",
    "SpellingBee": _NLTK,
    "SpiteAndMalice": "fails in its two-player reset inside textarena ('TwoPlayerState' has no 'logs')",
    "Stratego": "never finishes a reset (textarena 0.7.4)",
    "Taboo": _MANY,
    "TwoDollar": _AFTER,
    "ThreePlayerGOPS": _MANY,
    "ThreePlayerIPD": _MANY,
    "ThreePlayerTicTacToe": _MANY,
    "TwentyQuestions": _JURY,
    "UltimateTexasHoldem": _PY312,
    "UltimateTicTacToe": (
        "never ends a full board in textarena 0.7.4: a drawn small board leaves its cell of the big "
        "board open, so a board can be left with no legal move; the side to move can only forfeit"
    ),
    "UsedCar": "is missing from the textarena 0.7.4 wheel (no module)",
    "UsedCarNegotiation": "lacks its data file (blue_book.txt) in the textarena 0.7.4 wheel",
    "WordChains": _NLTK,
    "WordLadder": _NLTK,
    "WordSearch": _NLTK,
    "Wordle": _NLTK,
}
"""TextArena games left out (a game, or one variant by its TextArena id), each with the reason."""

_CANDIDATE_MOVES: dict[str, tuple[str, ...]] = {
    # By game, or by TextArena id where the variant's size matters. Their messages name an
    # example or a template, and every move has one of these forms.
    # Two example moves (columns up to 15, piles up to 5 of up to 11):
    "ConnectFour": tuple(f"[col {column}]" for column in range(15)),
    "Nim": tuple(f"[{pile} {count}]" for pile in range(5) for count in range(1, 12)),
    # One example cell: the second shot had no candidate left (grids of 5, 10, 14 and 20).
    **{
        f"Battleship-v0{variant}": tuple(f"[{chr(65 + row)}{col}]" for row in range(size) for col in range(size))
        for variant, size in (("", 5), ("-standard", 10), ("-large", 14), ("-extreme", 20))
    },
    # Templates only (cards by position in the hand, a hand count, a guess from 0 to 100, a cell):
    "Briscola": tuple(f"[play {card}]" for card in range(1, 4)),
    "GermanWhist": tuple(f"[play {card}]" for card in range(1, 14)),
    "Chopsticks": (
        *(f"[attack {mine} {theirs}]" for mine in range(2) for theirs in range(2)),
        *(f"[split {left} {right}]" for left in range(5) for right in range(5)),
    ),
    "IteratedTwoThirdsAverage": tuple(f"[{guess}]" for guess in range(101)),
    "Othello-v0-hard": tuple(f"[{row}, {col}]" for row in range(8) for col in range(8)),  # valid moves hidden
    "QuantumTicTacToe": tuple(f"[{a},{b}]" for a in range(9) for b in range(9) if a != b),  # the board names cells
}

_DIFFICULTY_WORDS = (
    "ultra-easy",
    "mega-easy",
    "super-easy",
    "very-easy",
    "easy",
    "",
    "medium",
    "hard",
    "very-hard",
    "hardcore",
    "extreme",
)
_TA_ID = re.compile(r"^(?P<name>[A-Za-z0-9]+)-v(?P<version>\d+)(?:-(?P<variant>[A-Za-z0-9-]+?))?(?:-(?:raw|train))?$")


@dataclass(frozen=True, slots=True)
class GameInfo:
    """One supported TextArena game (a game and variant)."""

    ta_id: str
    """TextArena's id, e.g. ``"Sudoku-v0-hard"``."""
    family: str
    """The game, e.g. ``"Sudoku"``: the tasks' metadata family."""
    variant: str
    """The variant, "" for the plain game."""
    players: int
    """1 or 2."""
    difficulty: int
    """The rank of the variant's difficulty word within the game (0 = easiest)."""
    random_opponent: bool
    """Whether the ``"random"`` opponent can play this game: every two-player game here (the
    moves its messages name, the forms below, or those `textarena_moves` makes from its state)."""
    candidate_moves: tuple[str, ...] = ()
    """Moves the random opponent also tries, for games that name too few in their messages."""

    @property
    def raw_id(self) -> str:
        """TextArena's id of the game without observation wrappers."""
        return f"{self.ta_id}-raw"

    @property
    def tags(self) -> tuple[str, ...]:
        tags = ["textarena", f"players:{self.players}"]
        if self.variant and self.variant not in _DIFFICULTY_WORDS:
            tags.append(f"variant:{self.variant}")
        return tuple(tags)


def _build_games() -> dict[str, GameInfo]:
    games: dict[str, GameInfo] = {}
    for family, (players, variants) in _SUPPORTED.items():
        ranked = sorted((v for v in variants if v in _DIFFICULTY_WORDS), key=_DIFFICULTY_WORDS.index)
        plain = ranked.index("") if "" in ranked else 0
        for variant in variants:
            ta_id = f"{family}-v0" + (f"-{variant}" if variant else "")
            games[ta_id] = GameInfo(
                ta_id=ta_id,
                family=family,
                variant=variant,
                players=players,
                difficulty=ranked.index(variant) if variant in ranked else plain,
                random_opponent=players == 2,
                candidate_moves=_CANDIDATE_MOVES.get(ta_id, _CANDIDATE_MOVES.get(family, ())),
            )
    return games


GAMES: dict[str, GameInfo] = _build_games()
"""Every supported game, by TextArena id."""


def agentenv_id(ta_id: str) -> str:
    """The agentenv id of a TextArena id: ``Sudoku-v0-hard`` -> ``textarena/Sudoku-hard-v0``."""
    match = _TA_ID.match(ta_id)
    if match is None:
        raise ValueError(f"expected a TextArena id like 'Sudoku-v0' or 'Sudoku-v0-hard', got {ta_id!r}")
    name, version, variant = match["name"], match["version"], match["variant"]
    return f"textarena/{name}-{variant}-v{version}" if variant else f"textarena/{name}-v{version}"


def game_info(game: str) -> GameInfo:
    """The supported game named by a TextArena id (``-raw``/``-train`` suffixes allowed) or
    an agentenv id; a `KeyError` that says why otherwise (left out, or a did-you-mean)."""
    if not isinstance(game, str):
        raise TypeError(f"game must be a TextArena id such as 'TicTacToe-v0', got {type(game).__name__}")
    name = game.removesuffix("-raw").removesuffix("-train")
    if name in GAMES:
        return GAMES[name]
    by_agentenv_id = _by_agentenv_id()
    for key in (game, f"textarena/{game}"):
        if key in by_agentenv_id:
            return by_agentenv_id[key]
    family = name.split("-v")[0].removeprefix("textarena/")
    as_ta = re.fullmatch(r"(?:textarena/)?(?P<name>[A-Za-z0-9]+)-(?P<variant>[A-Za-z0-9-]+)-v(?P<version>\d+)", name)
    variant = f"{as_ta['name']}-v{as_ta['version']}-{as_ta['variant']}" if as_ta else name
    for key in (name, variant, family):
        if key in EXCLUDED:
            raise KeyError(f"TextArena game {game!r} is not supported: it {EXCLUDED[key]}")
    hint = did_you_mean(name, GAMES) or did_you_mean(game, by_agentenv_id)
    raise KeyError(f"no supported TextArena game {game!r}.{hint or f' {len(GAMES)} are supported; see GAMES.'}")


def why_not(env_id: str) -> str | None:
    """Why ``env_id`` (``textarena/...``) is not registered, when it names a game left out
    (the registry's message for ``make``); None for a name that is no game at all."""
    try:
        game_info(env_id)
    except KeyError as e:
        return str(e.args[0]) if "is not supported" in str(e.args[0]) else None
    return None


_AGENTENV_IDS: dict[str, GameInfo] = {}


def _by_agentenv_id() -> dict[str, GameInfo]:
    if not _AGENTENV_IDS:
        _AGENTENV_IDS.update({agentenv_id(info.ta_id): info for info in GAMES.values()})
    return _AGENTENV_IDS

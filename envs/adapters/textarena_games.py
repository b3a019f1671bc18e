"""TextArena's text games as agentenv envs: `TextArenaEnv` and the ``textarena/...`` ids.

`TextArenaEnv(game="TicTacToe-v0")` plays one TextArena game per episode. The agent
plays one side; a single-player game is a multi-turn episode, a two-player game is
played against a fixed opponent that moves inside `step`, so each step is one agent
move and everything up to its next turn.

Actions. A TextArena move is text in square brackets (``[4]``, ``[e2e4]``,
``[Bid on Item 0: 250]``). A reply is plain text holding exactly one answer, a bracketed
move, read by the rule every adapter reads answers by (`agentenv.envs.answers.extract_move`):
text around it (reasoning, and anything before the last ``</think>``) is allowed and
never reaches the game, so a reply cannot talk to the opponent or stuff several
candidate moves into one turn; ``<answer>[4]</answer>`` and ``\\boxed{[4]}`` are [4]. API
models may call the ``move`` tool instead (same rule on its argument), once per reply. A
reply with no move, more than one answer (``[1] [2]``, ``[[4]]``, two ``<answer>`` tags, a
bracket or tag left open, several ``move`` calls), or a move with control characters is
a format error (an error observation and the format penalty); the game never sees it.
One bracket holding a list (``[4, 5, 6]``) is one move: the game reads it.
Nor does a move once the game is over (a tool error): after TextArena's last move its
current player may be the opponent, and a move sent then would be charged to it. A bracketed move the rules reject is
the game's business: TextArena shows the player why and, after its error allowance,
scores it as a loss, and so does this env.

Rewards. The task reward is the agent's TextArena reward at the end of the game,
mapped to [0, 1]: single-player games clip it to [0, 1] (1 is solved; games that give
partial credit on a loss, such as the share of pegs right, keep it; -1 for a forfeit
becomes 0); two-player games compare it with the opponent's: higher (a win) is 1, equal
(a draw) 0.5 and lower (a loss) 0. Some games pay a tie as a shared win, 1 each
(MarketEntryGame, PublicGoodsGame): it is a draw here, or matching the opponent would pay. A game
that ends on the agent's invalid move scores 0 whatever credit the game gives: kept,
one good guess and then a repeated one would lock in GuessTheNumber's credit for
closeness without searching. An episode cut by ``max_turns`` before the game ended
scores 0. A move that crashes the
library ends the episode with 0 (the agent's move caused it, so it is the policy's
failure, never ``infra``).

Opponents. ``"random"`` (the default, for every two-player game) plays a uniformly
random legal move among the bracketed moves the game lists in its messages, or, for
games that list none, among moves made from the game's state
(`agentenv.envs.adapters.textarena_moves`), each checked on a copy of the game before it
is played, drawn from a generator seeded by the game's seed (the task's) and the move
count, so a seed replays the same game; a function ``(observation) -> move`` (the
observation: what the game told that player since its last move); or any agentenv
`Policy`, e.g. `agentenv.OpenAIPolicy`, which gets its whole conversation with the
game every turn. An opponent that raises, returns no text, or whose backend fails is
``infra`` (never the agent's failure, never a win). An opponent's move the rules
reject is handled by the game like the agent's. When the game cannot go on after the
agent's move (the library crashes on the opponent's move, the random opponent finds no
legal move) the episode ends unsolved, with 0: the agent's moves led there, and as
``infra`` it would be a way to dodge a loss.

Ids. TextArena's ``Name-vN`` is ``textarena/Name-vN``, and a variant ``Name-vN-variant``
is ``textarena/Name-variant-vN`` (``Sudoku-v0-hard`` -> ``textarena/Sudoku-hard-v0``).
TextArena's ``-raw`` and ``-train`` ids are the same game with other observation
wrappers: this env reads the game unwrapped and renders each turn's new messages
itself (the conversation keeps the history), so they map to the plain id.

Tasks: one per game seed (``num_tasks`` seeds); the metadata's family is the game
(``Sudoku``), its difficulty the rank of the variant's difficulty word within the game
(``very-easy`` < ``easy`` < plain < ``medium`` < ``hard`` < ...), other variants
(sizes, lengths) are tags. Snapshots hold the game's seed and every move played,
and restore replays them (games are deterministic given both: each game's use of
Python's global ``random`` is kept to its own state); a game that does not replay to
the same log is reported by name, never faked, and a snapshot of another game or whose
state (seed, side, outcome) is not what its moves replay to is refused.

Left out: games that need the network or data not in the wheel (NLTK corpora, an
OpenRouter jury, missing files), games for three or more players, games whose
modules do not import on this Python, and games TextArena scores so that blind or bad
play is paid (Bandit, Minesweeper, Set); `EXCLUDED` says which and why.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import random
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from agentenv import (
    AutoParser,
    CallOutcome,
    Conversation,
    Env,
    Generation,
    InfraError,
    ParseError,
    Policy,
    PolicyFailure,
    State,
    Task,
    TaskSet,
    ToolCall,
    ToolError,
    tool,
)
from agentenv.core import _safejson
from agentenv.core.types import Action, Message
from agentenv.envs.adapters.textarena_catalog import EXCLUDED, GAMES, GameInfo, agentenv_id, game_info
from agentenv.envs.adapters.textarena_moves import candidate_moves
from agentenv.envs.answers import AmbiguousAnswer, extract_move

__all__ = [
    "EXCLUDED",
    "GAMES",
    "GameInfo",
    "GamePayload",
    "MoveParser",
    "Opponent",
    "TextArenaEnv",
    "agentenv_id",
    "canonical_move",
    "game_info",
    "make_tasks",
    "register_all",
]

MAX_LISTED_MOVES = 64
"""The random opponent's candidates per player: the first this many moves the game named."""
MAX_MOVE_CHARS = 256
"""A longer move (inside its brackets) is a format error: no TextArena move is this long."""
TEXT_MOVE_ID = "text-move"
"""The id of the ``move`` call a plain-text reply becomes (its result is shown as a user message)."""

# -- moves ---------------------------------------------------------------------------


def canonical_move(text: str) -> str:
    """The one bracketed move in ``text`` (``"I play [4] now"`` -> ``"[4]"``), read by
    `agentenv.envs.answers.extract_move`; a `ValueError` saying what is wrong when there is
    none, more than one answer (an `AmbiguousAnswer`), or one TextArena should not see."""
    try:
        body = extract_move(text)
    except AmbiguousAnswer as e:
        raise AmbiguousAnswer(
            f"{e} (exactly one move in square brackets per reply; brackets for the move only)"
        ) from None
    if body is None:
        raise ValueError("no move found: write your move in square brackets, e.g. [4]")
    if not body.strip():
        raise ValueError("the move in brackets is empty")
    if len(body) > MAX_MOVE_CHARS:
        raise ValueError(f"the move is {len(body)} characters long; the limit is {MAX_MOVE_CHARS}")
    for ch in body:
        if ch < " " or "\x7f" <= ch <= "\x9f":
            raise ValueError(f"the move holds the control character U+{ord(ch):04X}")
    return f"[{body}]"


Move = Annotated[str, AfterValidator(canonical_move)]


class MoveParser:
    """A plain-text reply is a ``move`` call (its one bracketed move); tool-call markup, a
    JSON object and OpenAI ``tool_calls`` are read as `AutoParser` reads them."""

    format_hint = "Reply with your move in square brackets, e.g. [4]: exactly one bracketed move per reply."

    def __init__(self) -> None:
        self._auto = AutoParser()

    def parse(self, action: Action) -> list[ToolCall]:
        text: Any = action
        if isinstance(action, dict) and not action.get("tool_calls"):
            text = action.get("content") or ""
        if type(text) is not str or "<tool_call>" in text or "</tool_call>" in text or text.lstrip()[:1] == "{":
            return self._auto.parse(action)
        try:
            return [ToolCall("move", {"move": canonical_move(text)}, TEXT_MOVE_ID)]
        except ValueError as e:
            raise ParseError(str(e)) from None


# -- opponents -----------------------------------------------------------------------

Opponent = Callable[[str], str]
"""A scripted opponent: what the game told it since its last move -> its move."""
OpponentArg = Opponent | Policy | Literal["random"] | None

_OPPONENT_INSTRUCTIONS = (
    "You are playing a text game against another player. Each reply is one move: write it in square brackets, e.g. [4]."
)


class _OpponentFailed(Exception):
    """The opponent failed (raised, returned no text, its backend gave up): ``infra``."""


class _GameStuck(Exception):
    """The game cannot go on after the agent's move: the library crashed on the opponent's
    move, or the random opponent found no legal move. The agent's moves led there, so the
    episode ends unsolved; as ``infra`` it would be a way to dodge a loss."""


# -- one live game ---------------------------------------------------------------------

_RANDOM_LOCK = threading.RLock()
"""Held while a game runs with the `random` module's functions pointing at its own generator."""
_RANDOM_FUNCTIONS = tuple(name for name in random.__all__ if name[0].islower() and hasattr(random.Random, name))
"""The `random` module's functions (``seed``, ``choice``, ``shuffle``, ...): each is a method of one
hidden generator; TextArena's games call them through the module (``random.choice``)."""
_GAME_ID = -1  # textarena.GAME_ID, without importing textarena here


def _functions_of(rng: random.Random) -> dict[str, Any]:
    """``rng``'s methods under the `random` module's function names."""
    return {name: getattr(rng, name) for name in _RANDOM_FUNCTIONS}


@contextlib.contextmanager
def _drawing_from(functions: dict[str, Any]) -> Iterator[None]:
    """While inside, the `random` module's functions are ``functions`` (see `_functions_of`),
    which draw from one game's generator: a game's
    ``random.seed(seed)`` and ``random.choice`` reach its own generator, so no other
    code's draws change its course, and it changes no one else's. Rebinding ~25 names
    costs a few microseconds where ``random.getstate`` and ``setstate`` cost tens."""
    with _RANDOM_LOCK:
        module = vars(random)
        outer = {name: module[name] for name in _RANDOM_FUNCTIONS}
        module.update(functions)
        try:
            yield
        finally:
            module.update(outer)


class _Game:
    """A TextArena game played through its raw env: its randomness kept to its own generator
    (see `_drawing_from`) and every move logged, so that (seed, moves) rebuild it exactly."""

    def __init__(self, info: GameInfo, seed: int, *, collect_moves: bool) -> None:
        """``collect_moves``: keep the moves the game's messages name (the random opponent's candidates)."""
        import textarena

        self.info = info
        self.seed = seed
        self.collect_moves = collect_moves
        self.moves: list[str] = []
        self.listed: dict[int, dict[str, None]] = {}
        """Per player, every move the game's messages to it named (in order, once each)."""
        self.rng = random.Random(seed)
        self._functions = _functions_of(self.rng)
        with _drawing_from(self._functions):  # made inside too: a game may keep `random.random` (Secretary)
            self.env = textarena.make(info.raw_id)
            self.env.reset(num_players=info.players, seed=seed)

    @property
    def current(self) -> int:
        return int(self.env.state.current_player_id)

    @property
    def done(self) -> bool:
        return bool(self.env.state.done)

    def observe(self) -> list[tuple[Any, ...]]:
        """The messages waiting for the player to move (consumed). The moves the game's
        messages name are kept per player: the random opponent's candidates."""
        player, messages = self.env.get_observation()
        messages = list(messages)
        if self.collect_moves:
            listed = self.listed.setdefault(player, {})
            if len(listed) < MAX_LISTED_MOVES:
                listed.update(dict.fromkeys(_listed_moves(messages)))
        return messages

    def waiting(self, player: int) -> list[tuple[Any, ...]]:
        """The messages waiting for ``player`` (consumed), e.g. the last ones of a game that ended."""
        observations = self.env.state.observations
        messages = list(observations.get(player, ()))
        observations[player] = []
        return messages

    def play(self, move: str) -> None:
        with _drawing_from(self._functions):
            self.env.step(move)
        self.moves.append(move)

    def is_legal(self, move: str) -> bool:
        """Whether the current player may play ``move``: tried on a copy of the game."""
        scratch = random.Random()
        scratch.setstate(self.rng.getstate())
        with _drawing_from(_functions_of(scratch)):
            try:
                trial = copy.deepcopy(self.env)
                state, player = trial.state, trial.state.current_player_id
                turn = state.turn
                trial.step(move)
                if state.done:
                    return not state.game_info.get(player, {}).get("invalid_move", False)
                return bool(state.turn > turn)  # textarena counts a turn only for a valid move
            except Exception:  # noqa: BLE001 - a candidate the game chokes on is not legal
                return False

    def result(self, player: int) -> tuple[float | None, str | None]:
        """The player's TextArena reward and the reason the game gave. The reward is None
        when the game gave none that is a finite number: some games' invalid-move paths
        pass their message where the reward goes (Countdown, Cryptarithm in 0.7.4)."""
        state = self.env.state
        rewards = state.rewards if isinstance(state.rewards, dict) else {}
        info = state.game_info.get(player) if isinstance(state.game_info, dict) else None
        reason = info.get("reason") if isinstance(info, dict) else None
        reward = rewards.get(player)
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            if reward is not None and reason is None:
                reason = str(reward)
            reward = None
        return (None if reward is None else float(reward)), (None if reason is None else str(reason)[:1000])

    def outcome(self, player: int) -> dict[str, Any]:
        """What `ArenaState` keeps of the ended game, by field, for ``player`` (see `_NOT_OVER`)."""
        reward, reason = self.result(player)
        info = self.env.state.game_info
        forfeit = bool(isinstance(info, dict) and (info.get(player) or {}).get("invalid_move"))
        other = self.result(1 - player)[0] if self.info.players == 2 else None
        return {"game_reward": reward, "reason": reason, "forfeit": forfeit, "opponent_reward": other}

    def fingerprint(self) -> str:
        """A digest of the game's log: what replaying the moves must reproduce."""
        digest = hashlib.blake2b(digest_size=16)
        for entry in self.env.state.logs:
            digest.update(repr(entry).encode("utf-8", "backslashreplace"))
        return digest.hexdigest()


def _render(messages: Sequence[tuple[Any, ...]], player: int) -> str:
    """TextArena messages as a player reads them, one ``[SENDER] text`` per message; the
    player's own moves are left out (they are its previous replies)."""
    lines = []
    for message in messages:
        sender, text = message[0], message[1]
        kind = message[2] if len(message) > 2 else None
        if sender == player and getattr(kind, "name", None) == "PLAYER_ACTION":
            continue
        name = "GAME" if sender == _GAME_ID else f"Player {sender}"
        lines.append(f"[{name}] {text}")
    return "\n".join(lines)


_MOVE_IN_TEXT = re.compile(r"\[[^\[\]\n]{1,64}\]")


def _listed_moves(messages: Sequence[tuple[Any, ...]]) -> list[str]:
    """The bracketed moves the game's own messages name (candidates for the random opponent)."""
    found: dict[str, None] = {}
    for message in messages:
        if message[0] == _GAME_ID:
            for move in _MOVE_IN_TEXT.findall(str(message[1])):
                found.setdefault(move)
    return list(found)


# -- the env ---------------------------------------------------------------------------


class GamePayload(BaseModel):
    """A task's payload: which game seed, and which side the agent plays."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(ge=0, lt=2**63)
    player: Literal[0, 1] = 0


class _SavedMessage(BaseModel):
    """One message of a `Policy` opponent's conversation, as a snapshot keeps it."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: str


class _Saved(BaseModel):
    """A snapshot's game (`TextArenaEnv.snapshot_external`), checked before it is replayed."""

    model_config = ConfigDict(extra="forbid")

    game: str | None = None
    """The TextArena id (None in snapshots taken before it was kept)."""
    moves: list[Annotated[str, Field(max_length=4 * MAX_MOVE_CHARS)]]
    """Every move the game was sent, both sides, in order."""
    log: str
    """`_Game.fingerprint` of the game when the snapshot was taken."""
    opponent: list[_SavedMessage] = []
    """A `Policy` opponent's conversation."""


_NOT_OVER: dict[str, Any] = {"game_reward": None, "reason": None, "forfeit": False, "opponent_reward": None}
"""`ArenaState`'s outcome fields while the game goes on (`_Game.outcome` once it ended)."""


class ArenaState(State):
    seed: int = 0
    player: int = 0
    """The agent's player id in the game."""
    moves: int = 0
    """Moves the game was sent so far, both sides (invalid ones included)."""
    last_moves: list[str] = []
    """The moves of the last step: the agent's, then the opponent's replies."""
    done: bool = False
    game_reward: float | None = None
    """The agent's reward as TextArena gave it, at the end of the game."""
    opponent_reward: float | None = None
    """The opponent's, in a two-player game: a draw is a tie of the two, whatever their value."""
    reason: str | None = None
    """Why the game ended, in the game's words."""
    crashed: str | None = None
    """The library's error when the agent's move crashed it (the episode ends, unsolved)."""
    forfeit: bool = False
    """The game ended on the agent's invalid move (it scores 0, partial credit or not)."""


class TextArenaEnv(Env[ArenaState]):
    """A TextArena game: the agent plays one side, moves in square brackets; see the module doc."""

    payload_type = GamePayload
    max_turns = 100
    max_calls_per_action = 1  # one move a turn: more `move` calls in one reply would make several
    format_penalty = 0.1
    instructions = (
        "You are playing {game}, a text game{against}. Each reply is one move: write it in square "
        "brackets, e.g. [4]. Exactly one bracketed move per reply; text outside the brackets is "
        "not sent to the game."
    )

    def __init__(
        self,
        tasks: TaskSet | Iterable[Task] | None = None,
        *,
        game: str,
        opponent: OpponentArg = None,
        player: Literal[0, 1, "alternate"] = 0,
        num_tasks: int = 1000,
        max_opponent_moves: int = 50,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            tasks: The task set (default: `make_tasks` of ``game``, ``num_tasks`` seeds).
            game: A TextArena id (``"TicTacToe-v0"``, ``"Sudoku-v0-hard"``) or its agentenv id.
            opponent: For two-player games: ``"random"`` (the default where the game lists its
                legal moves), a function ``(observation) -> move``, or a `Policy` such as
                `agentenv.OpenAIPolicy`. None for a single-player game.
            player: The agent's side in a two-player game: 0 (moves first), 1, or
                ``"alternate"`` (by seed: even seeds 0, odd seeds 1).
            num_tasks: How many seeds the default task set has.
            max_opponent_moves: Opponent moves in a row (retries of invalid moves included)
                before the opponent is taken to be stuck (an ``infra`` failure).
            **kwargs: `Env`'s (``max_turns``, ``lean``, ...).
        """
        self.game = game_info(game)
        self.opponent = self._check_opponent(opponent)
        # Told apart once: isinstance against a runtime Protocol costs microseconds a step.
        self._opponent_is_policy = isinstance(self.opponent, Policy)
        if player not in (0, 1, "alternate"):
            raise ValueError(f"player must be 0, 1 or 'alternate', got {player!r}")
        if self.game.players == 1 and player != 0:
            raise ValueError(f"{self.game.ta_id} is a single-player game: player must be 0, got {player!r}")
        if type(num_tasks) is not int or num_tasks < 1:
            raise ValueError(f"num_tasks must be an int >= 1, got {num_tasks!r}")
        if type(max_opponent_moves) is not int or max_opponent_moves < 1:
            raise ValueError(f"max_opponent_moves must be an int >= 1, got {max_opponent_moves!r}")
        self.player_choice = player
        self.num_tasks = num_tasks
        self.max_opponent_moves = max_opponent_moves
        self._live: _Game | None = None
        self._opponent_messages: list[Message] = []
        self._intro = ""  # what the game told the agent before its first move
        kwargs.setdefault("parser", MoveParser())
        super().__init__(tasks, **kwargs)

    def _check_opponent(self, opponent: OpponentArg) -> Opponent | Policy | Literal["random"] | None:
        game = self.game
        if game.players == 1:
            if opponent is not None:
                raise ValueError(f"{game.ta_id} is a single-player game: it takes no opponent")
            return None
        if opponent is None:
            if not game.random_opponent:
                raise ValueError(
                    f"{game.ta_id} is a two-player game and needs an opponent: pass opponent=... "
                    "(a function observation -> move, or a Policy such as agentenv.OpenAIPolicy); "
                    "the 'random' opponent cannot play it (the game does not list its legal moves)"
                )
            return "random"
        if opponent == "random" or isinstance(opponent, Policy) or callable(opponent):
            return opponent
        raise TypeError(
            f"opponent must be 'random', a function observation -> move or a Policy, got {type(opponent).__name__}"
        )

    # -- tasks -----------------------------------------------------------------------

    def default_tasks(self) -> TaskSet:
        return make_tasks(self.game.ta_id, self.num_tasks, player=self.player_choice)

    def mutate(self, task: Task, rng: np.random.Generator) -> Task | None:
        """The same game and side with a new seed."""
        seed = int(rng.integers(1 << 31))
        return _task(self.game, seed, GamePayload.model_validate(task.payload).player, f"{task.id}~s{seed}")

    # -- the episode -----------------------------------------------------------------

    def initial_state(self, task: Task) -> ArenaState:
        seed, player = self._seed_and_side(task)
        self._live = None  # a failure below leaves no game to step
        self._opponent_messages = []
        self._live = _Game(self.game, seed, collect_moves=self.opponent == "random")
        state = ArenaState(seed=seed, player=player)
        try:
            self._intro = self._until_agent_turn(state)
        except _GameStuck as e:  # before any move of the agent's: not its doing
            self._live = None
            raise InfraError(f"{self.game.ta_id} could not start: {e}") from e
        return state

    def system_prompt(self, task: Task) -> str:
        against = " against an opponent" if self.game.players == 2 else ""
        return self.instructions.format(game=self.game.ta_id, against=against)

    def render_intro(self, task: Task) -> list[Message]:
        return [
            {"role": "system", "content": self.system_prompt(task)},
            {"role": "user", "content": self._intro},
        ]

    @tool
    def move(self, move: Move) -> str:
        """Play one move in the game.

        Args:
            move: The move in square brackets, e.g. "[4]".
        """
        game, state = self._game(), self.state
        if state.done or state.crashed is not None or game.done:
            # Never reaches the game: its outcome is read once, when it ended.
            raise ToolError("the game is over; no more moves")
        state.last_moves = [move]
        try:
            game.play(move)
            state.moves += 1
            return self._until_agent_turn(state)
        except InfraError:
            raise
        except Exception as e:  # noqa: BLE001 - a library bug the agent's move reached ends the episode
            what = str(e) if isinstance(e, _GameStuck) else f"{type(e).__name__}: {e}"
            state.crashed = _safejson.clean_text(what)[:300]
            raise ToolError(f"the game cannot go on after this move ({state.crashed}); the episode ends") from None

    def render_result(self, outcome: CallOutcome) -> Message:
        message = super().render_result(outcome)
        if outcome.call.id == TEXT_MOVE_ID:  # a plain-text reply: the game answers as the user
            return {"role": "user", "content": message["content"]}
        return message

    def is_done(self) -> bool:
        return self.state.done or self.state.crashed is not None

    def verify(self, task: Task) -> dict[str, float]:
        state = self.state
        if not state.done or state.crashed is not None or state.game_reward is None or state.forfeit:
            return {"task": 0.0}
        reward, other = state.game_reward, state.opponent_reward
        if self.game.players == 1:
            return {"task": min(max(reward, 0.0), 1.0)}
        if other is not None:  # a tie of 1 each (MarketEntryGame, PublicGoodsGame) is a draw, not a win
            return {"task": 1.0 if reward > other else 0.5 if reward == other else 0.0}
        return {"task": (min(max(reward, -1.0), 1.0) + 1.0) / 2.0}

    def snapshot_external(self) -> dict[str, Any]:
        game = self._game()
        opponent = [_SavedMessage.model_validate(message) for message in self._opponent_messages]
        return _Saved(
            game=self.game.ta_id, moves=list(game.moves), log=game.fingerprint(), opponent=opponent
        ).model_dump()

    def restore_external(self, data: Any) -> None:
        """Rebuild the game by replaying the snapshot's moves from its seed. Refused (`ValueError`):
        a snapshot of another game, or one whose state the replay does not give back (another
        seed or side than its task's, another outcome than the game's)."""
        saved, state = _Saved.model_validate(data), self.state
        self._live = None
        if saved.game is not None and saved.game != self.game.ta_id:
            raise ValueError(f"a snapshot of a {saved.game} game cannot be restored into a {self.game.ta_id} env")
        seed, player = self._seed_and_side(self.task)
        if (state.seed, state.player) != (seed, player):
            raise ValueError(
                f"the snapshot's state plays seed {state.seed} as player {state.player}, its task "
                f"{self.task.id!r} seed {seed} as player {player}"
            )
        game = _Game(self.game, state.seed, collect_moves=self.opponent == "random")
        for i, move in enumerate(saved.moves):
            if game.done:
                raise ValueError(f"the snapshot's moves go on after the game ended (move {i} of {len(saved.moves)})")
            game.observe()
            try:
                game.play(move)
            except Exception as e:  # a game that played never logged a move it crashed on
                raise ValueError(f"the snapshot's move {i} ({move!r:.80}) does not replay: {type(e).__name__}") from e
        if not game.done:
            game.observe()  # the agent had read these when the snapshot was taken
        if game.fingerprint() != saved.log:
            raise ValueError(
                f"TextArena game {self.game.ta_id} did not replay to the snapshot's state from its seed and "
                "moves: it is not deterministic, so its snapshots cannot be restored"
            )
        # What verify reads must be the replayed game's, never the snapshot's word for it.
        expected = game.outcome(state.player) if game.done else _NOT_OVER
        kept = {field: getattr(state, field) for field in expected}
        if (state.done, state.moves, kept) != (game.done, len(game.moves), expected):
            raise ValueError(
                f"the snapshot's state (done {state.done}, {state.moves} moves, {kept}) is not what its moves "
                f"replay to (done {game.done}, {len(game.moves)} moves, {expected})"
            )
        self._live = game
        self._opponent_messages = [{"role": m.role, "content": m.content} for m in saved.opponent]

    def on_close(self) -> None:
        self._live = None

    # -- internals ---------------------------------------------------------------------

    def _seed_and_side(self, task: Task) -> tuple[int, int]:
        payload = GamePayload.model_validate(task.payload)
        if payload.player not in range(self.game.players):
            raise ValueError(f"task {task.id!r}: player {payload.player} does not exist in {self.game.ta_id}")
        return payload.seed, payload.player

    def _game(self) -> _Game:
        if self._live is None:
            raise InfraError(f"no live {self.game.ta_id} game (its reset failed); reset again")
        return self._live

    def _until_agent_turn(self, state: ArenaState) -> str:
        """Let the opponent move until the agent's turn or the end; what the agent is told."""
        game, agent = self._game(), state.player
        for _ in range(self.max_opponent_moves):
            if game.done or game.current == agent:
                break
            move = self._opponent_move(game)
            try:
                game.play(move)
            except Exception as e:
                raise _GameStuck(f"{type(e).__name__} on the opponent's move {move!r:.80}: {e}") from e
            state.moves += 1
            state.last_moves.append(move)
        else:
            raise InfraError(f"the opponent made {self.max_opponent_moves} moves in a row without the game ending")
        if game.done:
            state.done = True
            for field, value in game.outcome(agent).items():
                setattr(state, field, value)
            told = _render(game.waiting(agent), agent)
            return f"{told}\n[GAME] Game over: {state.reason}" if state.reason else told
        return _render(game.observe(), agent)

    def _opponent_move(self, game: _Game) -> str:
        player = game.current
        messages = game.observe()
        opponent = self.opponent
        try:
            if opponent == "random":
                return _random_move(game, player, messages)
            if self._opponent_is_policy:
                return self._policy_move(opponent, _render(messages, player))  # type: ignore[arg-type]
            if not callable(opponent):  # a two-player game always has one (checked in __init__)
                raise _OpponentFailed(f"no opponent to play {self.game.ta_id}")
            reply = opponent(_render(messages, player))
        except _GameStuck:
            raise
        except _OpponentFailed as e:
            raise InfraError(f"the opponent failed: {e}") from None
        except Exception as e:  # the opponent's failure is never the agent's
            raise InfraError(f"the opponent raised {type(e).__name__}: {e}") from e
        if not isinstance(reply, str):
            raise InfraError(f"the opponent returned {type(reply).__name__}, expected the move as text")
        return _opponent_text(reply)

    def _policy_move(self, policy: Policy, observation: str) -> str:
        if not self._opponent_messages:
            self._opponent_messages.append({"role": "system", "content": _OPPONENT_INSTRUCTIONS})
        self._opponent_messages.append({"role": "user", "content": observation})
        output = policy.act([Conversation(0, list(self._opponent_messages))])[0]
        if isinstance(output, PolicyFailure):
            raise _OpponentFailed(output.error)
        action = output.action if isinstance(output, Generation) else output
        text = action.get("content") if isinstance(action, dict) else action
        if not isinstance(text, str):
            raise _OpponentFailed(f"its reply holds no text ({type(text).__name__})")
        self._opponent_messages.append({"role": "assistant", "content": text})
        return _opponent_text(text)


def _opponent_text(reply: str) -> str:
    """What the game gets from the opponent: its one bracketed move, else its reply (clipped)."""
    try:
        return canonical_move(reply)
    except ValueError:
        return reply[: 4 * MAX_MOVE_CHARS]


def _random_move(game: _Game, player: int, messages: Sequence[tuple[Any, ...]]) -> str:
    """A uniformly random legal move among those the game's latest messages name, else among
    those its earlier ones named (the rules and examples of its first message included),
    else among the catalogue's forms for the game and the moves `textarena_moves` makes
    from its state (games that name no legal moves); each checked on a copy of the game,
    drawn from a generator seeded by the game's seed and the move count (a replay draws
    the same)."""
    rng = random.Random(f"{game.seed}:{len(game.moves)}")
    latest = _listed_moves(messages)
    earlier = [move for move in game.listed.get(player, {}) if move not in latest]
    made = candidate_moves(game.info.family, game.env, player, rng)
    forms = [move for move in (*game.info.candidate_moves, *made) if move not in latest and move not in earlier]
    for group in (latest, earlier, forms):
        rng.shuffle(group)
        for move in group:
            if game.is_legal(move):
                return move
    tried = len(latest) + len(earlier) + len(forms)
    raise _GameStuck(f"the random opponent found no legal move among the {tried} the game named")


# -- tasks and ids ---------------------------------------------------------------------------


def make_tasks(game: str, n: int = 1000, *, player: Literal[0, 1, "alternate"] = 0, start: int = 0) -> TaskSet:
    """``n`` tasks of ``game``, one per seed ``start .. start + n - 1``."""
    info = game_info(game)
    tasks = []
    for seed in range(start, start + n):
        side = (seed % 2 if player == "alternate" else player) if info.players == 2 else 0
        tasks.append(_task(info, seed, side))
    return TaskSet(tasks)


def _task(info: GameInfo, seed: int, player: int, task_id: str | None = None) -> Task:
    side = f" as player {player}" if info.players == 2 else ""
    return Task(
        id=task_id or f"{info.ta_id}:{seed}" + (f":p{player}" if info.players == 2 else ""),
        prompt=f"Play TextArena's {info.ta_id}{side} (game seed {seed}).",
        payload={"seed": seed, "player": player},
        metadata={"family": info.family, "difficulty": info.difficulty, "tags": info.tags},
    )


def register_all() -> None:
    """Register ``textarena/<game>-v0`` for every supported game (agentenv's ``textarena``
    namespace calls this on first use)."""
    from agentenv.registry import register

    for info in GAMES.values():
        who = "single-player" if info.players == 1 else "two-player, against a fixed opponent"
        register(
            agentenv_id(info.ta_id),
            "agentenv.envs.adapters.textarena_games:TextArenaEnv",
            description=f"TextArena's {info.ta_id} ({who}); moves in square brackets, reward from the game.",
            override=True,
            game=info.ta_id,
        )

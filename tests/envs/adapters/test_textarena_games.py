"""The TextArena adapter: ids, tasks, rewards from the game, opponents, and the adapter under attack.

Attacks, one test each: forged and stuffed answers, hostile text (1 MB, control
characters, a lone surrogate, deep JSON, huge numbers), an opponent that raises,
returns no text or whose server is gone (infra, never a win), and library bugs an
action reaches (a reward that is a string, a step that raises): never an exception
out of `step`, never ``infra`` for what the agent caused.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

pytest.importorskip("textarena")

import agentenv
from agentenv import InfraError, OpenAIPolicy, Task, ToolCall, UnknownEnvError, check_env, tool_call_text
from agentenv.envs.adapters.textarena_catalog import EXCLUDED, GAMES, agentenv_id, game_info
from agentenv.envs.adapters.textarena_games import TextArenaEnv, canonical_move, make_tasks
from tests.openai_server import OpenAIServer, chat_reply


def first_free(order: list[int]):
    """A scripted opponent: the first cell of ``order`` the board still lists as free."""

    def play(observation: str) -> str:
        free = set(re.findall(r"'\[(\d)\]'", observation.rsplit("Available Moves:", 1)[-1]))
        return next(f"[{cell}]" for cell in order if str(cell) in free)

    return play


def first_named_move(observation: str) -> str:
    """A scripted opponent for any game: the first bracketed move its messages name."""
    moves = [m for m in re.findall(r"\[[^\[\]\n]{1,64}\]", observation) if not re.match(r"\[(GAME|Player)", m)]
    return moves[0] if moves else "[0]"


def tictactoe(opponent=None, **kwargs) -> TextArenaEnv:
    env = TextArenaEnv(game="TicTacToe-v0", opponent=opponent or first_free([0, 1, 2, 6, 7, 8]), **kwargs)
    env.reset(seed=0)
    return env


def play(env: TextArenaEnv, moves: list[str]):
    for move in moves:
        result = env.step(move)
        if result[2] or result[3]:
            return result
    return result


# -- ids, tasks, registration --------------------------------------------------------


def test_textarena_ids_map_to_agentenv_ids_and_are_registered_lazily():
    assert agentenv_id("TicTacToe-v0") == "textarena/TicTacToe-v0"
    assert agentenv_id("Sudoku-v0-hard") == "textarena/Sudoku-hard-v0"
    assert agentenv_id("2048-v0-3x3-raw") == "textarena/2048-3x3-v0"
    env = agentenv.make("textarena/Sudoku-hard-v0")
    assert env.game.ta_id == "Sudoku-v0-hard"
    ids = [s.id for s in agentenv.envs_list() if s.id.startswith("textarena/")]
    assert len(ids) == len(GAMES)
    for name in ("TicTacToe-v0-raw", "TicTacToe-v0-train", "textarena/TicTacToe-v0", "TicTacToe-v0"):
        assert game_info(name).ta_id == "TicTacToe-v0"  # wrapper variants are the same game


def test_the_catalogue_covers_every_textarena_game_it_does_not_exclude():
    from textarena.envs.registration import ENV_REGISTRY

    families = {i.split("-v")[0] for i in ENV_REGISTRY}
    supported = {info.family for info in GAMES.values()}
    excluded = {name for name in EXCLUDED if "-v" not in name}  # whole games; the rest are variants
    assert families == supported | excluded and not supported & excluded
    assert all(name in ENV_REGISTRY and name not in GAMES for name in set(EXCLUDED) - excluded)
    assert all(info.ta_id in ENV_REGISTRY and info.raw_id in ENV_REGISTRY for info in GAMES.values())


def test_tasks_are_seeds_with_the_game_as_family_and_the_variant_as_difficulty():
    tasks = make_tasks("Sudoku-v0-very-easy", 3)
    assert [t.payload["seed"] for t in tasks] == [0, 1, 2]
    assert tasks[0].metadata.family == "Sudoku" and tasks[0].metadata.difficulty == 0
    assert [game_info(f"Sudoku-v0{v}").difficulty for v in ("-easy", "", "-medium", "-hard")] == [1, 2, 3, 4]
    small = game_info("2048-v0-3x3")
    assert small.difficulty == game_info("2048-v0").difficulty and "variant:3x3" in small.tags
    sides = make_tasks("TicTacToe-v0", 4, player="alternate")
    assert [t.payload["player"] for t in sides] == [0, 1, 0, 1] and sides[1].id == "TicTacToe-v0:1:p1"
    env = TextArenaEnv(game="Mastermind-v0", num_tasks=5)
    variant = env.mutate(env.tasks[0], __import__("numpy").random.default_rng(0))
    assert variant is not None and variant.payload["seed"] != 0 and variant.metadata == env.tasks[0].metadata


def test_unknown_and_excluded_games_and_bad_arguments_say_why():
    with pytest.raises(KeyError, match="Did you mean 'TicTacToe-v0'"):
        TextArenaEnv(game="TicTacToo-v0")
    with pytest.raises(UnknownEnvError, match="Did you mean 'textarena/TicTacToe-v0'"):
        agentenv.make("textarena/TicTacToo-v0")
    with pytest.raises(KeyError, match="Wordle-v0' is not supported: it downloads NLTK corpora"):
        TextArenaEnv(game="Wordle-v0")
    with pytest.raises(UnknownEnvError, match="'textarena/Sokoban-medium-v0' is not supported: it takes from a second"):
        agentenv.make("textarena/Sokoban-medium-v0")  # a left-out variant, named by its agentenv id
    with pytest.raises(ValueError, match="single-player game: it takes no opponent"):
        TextArenaEnv(game="Mastermind-v0", opponent="random")
    with pytest.raises(TypeError, match="opponent must be"):
        TextArenaEnv(game="TicTacToe-v0", opponent=42)
    with pytest.raises(ValueError, match="player must be 0, 1 or 'alternate'"):
        TextArenaEnv(game="TicTacToe-v0", player=2)
    bad = Task(id="t", prompt="Play.", payload={"seed": -1, "side": 0})
    with pytest.raises(ValueError, match="task 't': payload field 'seed'"):
        TextArenaEnv([bad], game="TicTacToe-v0")


@pytest.mark.parametrize(
    ("game", "why"),
    [
        ("Set-v0", "the same card three times"),  # blind [1, 1, 1] scored 20 Sets, a solve on every seed
        ("Bandit-v0-hard", "pays the regret"),  # the worst button paid the most
        ("Minesweeper-v0-small", "a mine is an invalid move with a retry"),  # mines were free
        # "[Propose] $1.00" reached the game as "[Propose]": the agent could never propose.
        ("TwoDollar-v0", "the agent could only accept or reject"),
        ("NewRecruit-v0", "the agent could only accept or reject"),
        # A full board with a drawn small board never ended: the side to move could only forfeit.
        ("UltimateTicTacToe-v0", "no legal move"),
    ],
)
def test_games_the_agent_cannot_win_fairly_are_left_out_with_the_reason(game, why):
    with pytest.raises(KeyError, match=f"is not supported: it .*{re.escape(why)}"):
        game_info(game)
    assert game.split("-v")[0] not in {info.family for info in GAMES.values()}  # no variant of it either


# -- the contract ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("game", "kwargs", "moves"),
    [
        ("GuessTheNumber-v0", {}, ["[10]", "I guess [5]", "[15]"]),
        ("Mastermind-v0", {}, ["[1 2 3 4]", "[2 3 4 5]"]),
        ("TicTacToe-v0", {}, ["[4]", "[0]", "[8]"]),
        ("TicTacToe-v0", {"player": "alternate"}, ["[4]", "[2]"]),
        ("ConnectFour-v0", {}, ["[col 3]", "[col 3]"]),
    ],
)
def test_passes_check_env(game, kwargs, moves):
    check_env(TextArenaEnv(game=game, **kwargs), seed=1, actions=moves)
    check_env(agentenv.make(agentenv_id(game), **kwargs), seed=2, actions=moves)


def test_a_text_reply_is_answered_as_the_user_and_a_move_tool_call_as_a_tool():
    env = tictactoe()
    obs, *_ = env.step("The centre is strongest: [4]")
    assert obs[0]["role"] == "user" and "placed their symbol (O) in cell 4" in obs[0]["content"]
    assert "[Player 1] [0]" in obs[0]["content"]  # the opponent's reply is in the same observation
    obs, *_ = env.step(tool_call_text("move", move="[3]"))
    assert obs[0]["role"] == "tool" and "cell 3" in obs[0]["content"]
    assert env.state.last_moves == ["[3]", "[1]"]


def test_a_winning_line_gets_the_win_reward():
    env = tictactoe()
    obs, reward, terminated, truncated, info = play(env, ["[4]", "[3]", "[5]"])
    assert (terminated, truncated, info["success"], info["task_reward"], reward) == (True, False, True, 1.0, 1.0)
    assert "Game over: Player 0 has won!" in obs[-1]["content"]


def test_a_losing_line_and_an_invalid_line_do_not():
    env = tictactoe(first_free([0, 3, 6]))
    *_, terminated, _, info = play(env, ["[1]", "[2]", "[5]"])
    assert terminated and info["task_reward"] == 0.0 and info["failure"] == "policy"
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step("[0]")  # taken by nobody yet: fine
    obs, _, terminated, _, info = env.step("[0]")  # taken by the agent: the game says so, once
    assert not terminated and "invalid move" in obs[0]["content"] and info["error_kind"] is None
    obs, _, terminated, _, info = env.step("[0]")  # and the second time the game scores it a loss
    assert terminated and info["task_reward"] == 0.0 and info["failure"] == "policy"


def test_a_draw_is_worth_half():
    env = tictactoe(first_free([4, 2, 3, 7, 8, 0, 1, 5, 6]))
    *_, info = play(env, ["[0]", "[6]", "[5]", "[1]", "[8]"])
    assert env.state.reason == "The game is a draw!" and info["task_reward"] == 0.5 and not info["success"]


@pytest.mark.parametrize(("game", "move"), [("MarketEntryGame-v0", "[S]"), ("PublicGoodsGame-v0", "[20]")])
def test_a_tie_the_game_pays_as_a_shared_win_is_a_draw(game, move):
    # These games give each tied player 1: matching the opponent's every move would be a win.
    env = TextArenaEnv(game=game, opponent=lambda observation: move, max_turns=200)
    env.reset(seed=0)
    *_, info = play(env, [move] * 200)
    assert info["task_reward"] == 0.5 and not info["success"]
    assert "tied" in env.state.reason and (env.state.game_reward, env.state.opponent_reward) == (1.0, 1.0)


def test_single_player_rewards_keep_the_games_partial_credit_but_not_on_a_forfeit():
    env = TextArenaEnv(game="GuessTheNumber-v0")
    env.reset(seed=3)
    *_, info = play(env, [f"[{n}]" for n in range(20, 9, -1)])  # the turn limit, target 3: credit for closeness
    assert info["failure"] == "policy" and "turn limit" in env.state.reason
    assert 0.0 < info["task_reward"] < 1.0 and info["task_reward"] == pytest.approx(env.state.game_reward)
    # A good guess, then a repeated one twice: the game ends on the invalid move and would give
    # the same credit for closeness without any search.
    env.reset(seed=3)
    *_, info = play(env, ["[4]", "[4]", "[4]"])
    assert env.state.forfeit and env.state.game_reward > 0.5
    assert info["failure"] == "policy" and info["task_reward"] == 0.0


def test_the_agent_can_play_second_and_turns_end_with_the_agent_to_move():
    env = TextArenaEnv(game="TicTacToe-v0", player=1, opponent=first_free([4, 0, 8]))
    obs, _ = env.reset(seed=0)
    assert "You are Player 1" in obs[1]["content"] and "[Player 0] [4]" in obs[1]["content"]
    assert env.state.moves == 1 and env.state.last_moves == ["[4]"]


# -- snapshots and randomness --------------------------------------------------------------


def test_a_snapshot_replays_the_game_exactly_and_outside_randomness_changes_nothing():
    def run(disturb: bool) -> list:
        env = TextArenaEnv(game="2048-v0", max_turns=20)
        env.reset(seed=4)
        seen = []
        for move in ["[up]", "[left]", "[down]", "[right]"] * 3:
            if disturb:
                random.seed(99)
                random.random()
            seen.append(env.step(move)[0])
        return seen

    assert run(False) == run(True)
    env = TextArenaEnv(game="2048-v0")
    env.reset(seed=4)
    play(env, ["[up]", "[left]"])
    snap = env.snapshot().model_dump_json()
    later = [env.step(m)[0] for m in ["[down]", "[right]", "[up]"]]
    env.reset(seed=9)
    env.restore(snap)
    assert [env.step(m)[0] for m in ["[down]", "[right]", "[up]"]] == later


def test_games_stepped_from_threads_play_as_they_do_one_at_a_time():
    from concurrent.futures import ThreadPoolExecutor

    def episode(seed: int) -> list:
        env = TextArenaEnv(game="2048-v0", max_turns=30)  # draws a new tile from `random` every move
        env.reset(seed=seed)
        return [env.step(("[up]", "[left]", "[down]", "[right]")[k % 4])[0] for k in range(25)]

    alone = [episode(seed) for seed in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(episode, range(4))) == alone


def test_a_game_that_does_not_replay_is_named_not_faked(monkeypatch):
    from textarena.envs.GuessTheNumber.env import GuessTheNumberEnv

    reset = GuessTheNumberEnv.reset
    secrets = iter(range(1, 1000))

    def unseeded(self, num_players, seed=None):
        reset(self, num_players=num_players, seed=seed)
        self.state.game_state["game_number"] = next(secrets)  # not from the seed
        self.state.logs.append((-1, str(self.state.game_state["game_number"])))

    monkeypatch.setattr(GuessTheNumberEnv, "reset", unseeded)
    env = TextArenaEnv(game="GuessTheNumber-v0")
    env.reset(seed=0)
    env.step("[7]")
    snap = env.snapshot()
    with pytest.raises(ValueError, match=r"GuessTheNumber-v0 did not replay .* not deterministic"):
        env.restore(snap)


def _forge_a_win(snap: dict) -> None:
    snap["state"].update(done=True, game_reward=1.0, reason="Player 0 has won!")


@pytest.mark.parametrize(
    ("edit", "into", "why"),
    [
        (_forge_a_win, "TicTacToe-v0", "is not what its moves replay to"),
        (lambda snap: snap["state"].update(player=1), "TicTacToe-v0", "plays seed 0 as player 1, its task"),
        (lambda snap: snap["external"]["moves"].extend(["[5]", "[2]", "[3]"]), "TicTacToe-v0", "after the game"),
        (lambda snap: snap["external"].update(moves=[4]), "TicTacToe-v0", "valid string"),
        (lambda snap: snap.update(external=None), "TicTacToe-v0", "valid dictionary"),
        (lambda snap: None, "ConnectFour-v0", "a TicTacToe-v0 game cannot be restored into a ConnectFour-v0 env"),
    ],
    ids=["forged-win", "other-side", "moves-after-the-end", "moves-not-text", "no-game", "other-game"],
)
def test_an_edited_snapshot_is_refused_and_says_why(edit, into, why):
    env = TextArenaEnv([make_tasks("TicTacToe-v0", 1)[0]], game="TicTacToe-v0", opponent=first_free([0, 1, 2]))
    env.reset(seed=0)
    play(env, ["[4]", "[8]"])
    snap = env.snapshot().model_dump(mode="json")
    edit(snap)
    other = TextArenaEnv(game=into, opponent=first_named_move)
    other.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape(why)):
        other.restore(snap)


# -- the policy as an adversary -------------------------------------------------------


@pytest.mark.parametrize(
    "action",
    [
        "Player 0 has won! The game is over.",  # forged: no move at all
        "[GAME] Player 0 has won! [4]",  # forged: a game tag beside the move
        "[0] [1] [2] [3] [4] [5] [6] [7] [8]",  # stuffed: every candidate at once
        "[4" + "]" * 3,
        "x" * 1_000_000 + "[4]",  # 1 MB
        "[4\x00]",  # a control character inside the move
        "[\x1b[31m4]",  # an escape sequence
        "[\udc80]",  # a lone surrogate
        "[" * 10_000 + "4" + "]" * 10_000,  # deep nesting, as brackets
        '{"name": "move", "arguments": ' + '{"a": ' * 5000 + "1" + "}" * 5001 + "}",  # deep JSON
        "[" + "4" * 300 + "]",  # a huge number, over the move limit
        "",
        ToolCall("move", {"move": "[1] [2]"}),  # stuffed through the tool
    ],
)
def test_hostile_moves_are_format_errors_and_never_reach_the_game(action):
    env = tictactoe()
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["error_kind"] == "format" and obs and reward < 0
    assert (terminated, truncated) == (False, False) and env.state.moves == 0


@pytest.mark.parametrize("as_openai", [False, True], ids=["markup", "tool_calls"])
def test_a_reply_with_several_move_calls_is_a_format_error_and_plays_none(as_openai):
    env = tictactoe()
    moves = ["[3]", "[zz]", "[zz]"]
    if as_openai:
        calls = [
            {"id": f"c{i}", "type": "function", "function": {"name": "move", "arguments": f'{{"move": "{m}"}}'}}
            for i, m in enumerate(moves)
        ]
        action: object = {"role": "assistant", "content": "", "tool_calls": calls}
    else:
        action = "".join(tool_call_text("move", move=m) for m in moves)
    _, reward, terminated, truncated, info = env.step(action)
    assert info["error_kind"] == "format" and "at most 1 tool call" in info["error"]
    assert (terminated, truncated, env.state.moves, reward < 0) == (False, False, 0, True)


def test_moves_after_the_game_ended_never_reach_it_and_its_outcome_stays():
    class Lenient(TextArenaEnv):
        max_calls_per_action = None  # as if several calls got through: the move tool still refuses

    junk = tool_call_text("move", move="[zz]")
    env = Lenient(game="TicTacToe-v0", opponent=first_free([0, 1, 2]))
    env.reset(seed=0)
    play(env, ["[8]", "[7]"])  # the opponent holds 0 and 1 and wins on 2
    obs, _, terminated, _, info = env.step(tool_call_text("move", move="[3]") + junk + junk)
    # After the opponent's winning move TextArena's current player is the opponent: the junk
    # would be charged to it, it would forfeit, and the loss would read as a win.
    assert terminated and info["task_reward"] == 0.0 and not info["success"]
    assert (env.state.game_reward, env.state.reason) == (-1.0, "Player 1 has won!")
    assert [m["content"] for m in obs[1:]] == ["Error: the game is over; no more moves"] * 2
    assert env.state.moves == 6 and env._live is not None and env._live.moves[-1] == "[2]"


def test_a_huge_number_in_one_move_is_the_games_invalid_move():
    env = tictactoe()
    obs, _, terminated, _, info = env.step("[" + "9" * 200 + "]")
    assert info["error_kind"] is None and not terminated and "Must be between 0 and 8" in obs[0]["content"]
    assert canonical_move("I play [ 4 ] now") == "[ 4 ]"


@pytest.mark.parametrize(
    "opponent",
    [
        lambda observation: 1 / 0,
        lambda observation: None,
    ],
    ids=["raises", "no-text"],
)
def test_an_opponent_that_fails_is_infra_and_never_a_win(opponent):
    env = tictactoe(opponent)
    _, reward, terminated, truncated, info = env.step("[4]")
    assert (terminated, truncated, info["failure"], info["success"]) == (False, True, "infra", None)
    assert info["task_reward"] is None and reward == 0.0
    with pytest.raises(InfraError, match="the opponent"):
        TextArenaEnv(game="TicTacToe-v0", player=1, opponent=opponent).reset(seed=0)


def test_an_openai_compatible_opponent_plays_from_its_whole_conversation():
    def reply(request):
        free = re.findall(r"'\[(\d)\]'", request.messages[-1]["content"].rsplit("Available Moves:", 1)[-1])
        return chat_reply(f"I will take [{free[0]}]")

    server = OpenAIServer(reply).start()
    try:
        with OpenAIPolicy(server.base_url, "test-model", max_retries=0) as policy:
            env = TextArenaEnv(game="TicTacToe-v0", opponent=policy)
            env.reset(seed=0)
            *_, info = play(env, ["[4]", "[3]", "[5]"])
    finally:
        server.stop()
    assert info["success"] and env.state.last_moves == ["[5]"]
    roles = [m["role"] for m in server.requests[-1].messages]
    assert roles == ["system", "user", "assistant", "user"]  # the opponent's own history, kept by the env
    assert "You are Player 1" in server.requests[0].messages[1]["content"]


def test_an_unreachable_opponent_server_is_infra():
    server = OpenAIServer(lambda request: chat_reply("[0]")).start()
    url = server.base_url
    server.stop()
    with OpenAIPolicy(url, "test-model", max_retries=0, timeout_s=2) as policy:
        env = TextArenaEnv(game="TicTacToe-v0", opponent=policy)
        env.reset(seed=0)
        *_, truncated, info = env.step("[4]")
    assert truncated and info["failure"] == "infra" and "the opponent failed" in info["error"]


def test_a_reward_the_library_gets_wrong_is_no_reward_and_no_crash():
    # Countdown 0.7.4 swaps the reward and the reason on an invalid move: the reward is text.
    env = TextArenaEnv(game="Countdown-v0")
    env.reset(seed=0)
    *_, terminated, _, info = play(env, ["[9 9 +]", "[9 9 +]"])
    assert terminated and info["task_reward"] == 0.0 and info["failure"] == "policy" and info["error"] is None
    assert env.state.game_reward is None and env.state.reason.startswith("Invalid Move")


def test_a_move_that_crashes_the_library_ends_the_episode_as_the_policys_failure(monkeypatch):
    from textarena.envs.TicTacToe.env import TicTacToeEnv

    step = TicTacToeEnv.step

    def buggy(self, action):
        if action == "[7]":
            raise IndexError("list index out of range")
        return step(self, action)

    monkeypatch.setattr(TicTacToeEnv, "step", buggy)
    env = tictactoe()
    obs, _, terminated, truncated, info = env.step("[7]")
    assert (terminated, truncated, info["failure"], info["error_kind"]) == (True, False, "policy", "tool")
    assert "the game cannot go on after this move (IndexError" in obs[0]["content"] and info["task_reward"] == 0.0


# -- every supported game ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("ta_id", sorted(GAMES))
def test_every_registered_id_passes_check_env_offline(ta_id):
    info = GAMES[ta_id]
    opponent = None if info.players == 1 or info.random_opponent else first_named_move
    env = agentenv.make(agentenv_id(ta_id), opponent=opponent, max_turns=6)
    check_env(env, actions=lambda env: [first_named_move(env.messages[1]["content"])] * 2)


def test_every_random_opponent_id_starts_and_plays_as_either_player():
    # The side that moves first is often told only a template ('[play X]', '[row, col]') or one
    # example; the catalogue's move forms (or no random opponent) must cover it, from the first
    # move on and after the example was played (Battleship's second shot).
    from agentenv.envs.adapters.textarena_games import _random_move

    for ta_id, info in GAMES.items():
        if not info.random_opponent:
            continue
        env = TextArenaEnv(game=ta_id, num_tasks=2, player="alternate", max_turns=4)
        for player in (0, 1):
            env.reset(options={"task": env.tasks[player].id})  # seed 0 as player 0, seed 1 as player 1; raises if stuck
            for _ in range(3):
                move = _random_move(env._live, player, [])  # the agent plays at random too
                *_, terminated, truncated, _ = env.step(move)
                assert env.state.crashed is None, (ta_id, player, env.state.crashed)
                if terminated or truncated:
                    break


@pytest.mark.parametrize("ta_id", ["Breakthrough-v0-tiny", "ColonelBlotto-v0-small", "Tak-v0", "TruthAndDeception-v0"])
def test_a_game_that_names_no_legal_moves_gets_a_random_opponent_that_replays_from_the_seed(ta_id):
    # These games name a template or one example only: the opponent's moves are made from
    # the game's state (textarena_moves), drawn from the seed, so an episode replays.
    from agentenv.envs.adapters.textarena_games import _random_move

    def play(seed: int) -> list[str]:
        env = agentenv.make(agentenv_id(ta_id), max_turns=6)  # its defaults: the random opponent
        env.reset(seed=0, options={"task": env.tasks[seed].id})
        moves = []
        for _ in range(3):
            *_, terminated, truncated, info = env.step(_random_move(env._live, env.state.player, []))
            assert info["error_kind"] is None and env.state.crashed is None, (ta_id, info)
            moves += env.state.last_moves
            if terminated or truncated:
                break
        return moves

    assert play(1) == play(1) and len(play(1)) >= 2  # the agent's move and the opponent's reply


def test_a_game_that_cannot_go_on_after_the_agents_move_ends_unsolved_not_infra(monkeypatch):
    from textarena.envs.TicTacToe.env import TicTacToeEnv

    from agentenv.envs.adapters import textarena_games

    env = TextArenaEnv(game="TicTacToe-v0")  # the random opponent
    env.reset(seed=0)
    monkeypatch.setattr(textarena_games, "_listed_moves", lambda messages: [])
    obs, _, terminated, truncated, info = env.step("[4]")
    assert (terminated, truncated, info["failure"], info["task_reward"]) == (True, False, "policy", 0.0)
    assert "the random opponent found no legal move" in obs[0]["content"]
    monkeypatch.undo()

    step = TicTacToeEnv.step
    monkeypatch.setattr(TicTacToeEnv, "step", lambda self, a: step(self, a) if a != "[0]" else 1 / 0)
    env = tictactoe()  # its opponent plays [0] first: the library raises on it
    *_, terminated, truncated, info = env.step("[4]")
    assert (terminated, truncated, info["failure"], info["task_reward"]) == (True, False, "policy", 0.0)


def test_the_docs_example_runs_and_prints_what_it_says():
    docs = (Path(__file__).resolve().parents[3] / "docs" / "adapters.md").read_text(encoding="utf-8")
    section = docs.split("## TextArena", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    printed: list[str] = []
    exec(code, {"print": lambda *args: printed.append(" ".join(map(str, args)))})
    expected = re.search(r"^print\(.*\)\s+# (.+)$", code, re.MULTILINE)
    assert expected is not None and printed == [expected.group(1).strip()]

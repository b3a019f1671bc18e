"""From trajectories to training tensors, on hand-made trajectories with known ids.

Also the supervised warm start (`sft`), whose examples are built the same way.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import agentenv
from agentenv import Failure, Generation, Task, Trajectory, Transition
from agentenv.trainers.batch import anchor_keys, build_examples, collate, step_rewards, turn_advantages
from agentenv.trainers.sft import sft, trajectory_example
from agentenv.trainers.tokens import ChatDelta, build_tiny_tokenizer
from tests.trainers.toy import tiny_model

PAD = 0


def _transition(turn: int, action: str = "a", observation: str = "o", progress: float = 0.0) -> Transition:
    return Transition(turn, action, [], [{"role": "tool", "content": observation}], {"progress": progress}, {}, [], 0.0)


def _traj(
    generations: list[Generation | None],
    *,
    failure: Failure = Failure.POLICY,
    task_reward: float | None = 0.0,
    steps: list[tuple[str, str]] | None = None,
    progress: list[float] | None = None,
) -> Trajectory:
    steps = steps or [("a", "o")] * len(generations)
    progress = progress or [0.0] * len(steps)
    transitions = [_transition(k, a, o, p) for k, ((a, o), p) in enumerate(zip(steps, progress, strict=True))]
    return Trajectory(
        task=Task(id="t", prompt="p"),
        messages=[],
        transitions=transitions,
        generations=generations,
        failure=failure,
        task_reward=task_reward,
    )


def _gen(prompt: list[int], tokens: list[int], logprobs: list[float] | None = None) -> Generation:
    return Generation(
        action="x",
        prompt_ids=prompt,
        token_ids=tokens,
        logprobs=logprobs if logprobs is not None else [-0.5] * len(tokens),
    )


@pytest.fixture
def two_turns() -> Trajectory:
    return _traj([_gen([10, 11, 12], [20, 21], [-0.1, -0.2]), _gen([13, 14], [22, 23, 24], [-0.3, -0.4, -0.5])])


# --- build_examples ----------------------------------------------------------------------------


def test_sequence_is_prompt_and_generated_ids_in_order_with_the_mask_on_generated_ids(two_turns) -> None:
    [e] = build_examples([two_turns], [[0.5, -1.5]], max_seq_len=100)
    assert e.ids == [10, 11, 12, 20, 21, 13, 14, 22, 23, 24]
    assert e.mask == [0, 0, 0, 1, 1, 0, 0, 1, 1, 1]
    assert e.old_logp == pytest.approx([0, 0, 0, -0.1, -0.2, 0, 0, -0.3, -0.4, -0.5])
    assert e.turn_lengths == [2, 3]
    assert e.truncated is False


def test_each_turns_advantage_is_broadcast_onto_its_own_tokens(two_turns) -> None:
    [e] = build_examples([two_turns], [[0.5, -1.5]], max_seq_len=100)
    assert e.advantages == [0, 0, 0, 0.5, 0.5, 0, 0, -1.5, -1.5, -1.5]


def test_a_turn_without_a_generation_keeps_later_advantages_on_their_turn() -> None:
    # Turn 0 was played by a script: turn 1's tokens still get turn 1's advantage.
    traj = _traj([None, _gen([1, 2], [3, 4])])
    [e] = build_examples([traj], [[9.0, 2.0]], max_seq_len=100)
    assert e.ids == [1, 2, 3, 4]
    assert e.advantages == [0, 0, 2.0, 2.0]


def test_an_infra_trajectory_has_an_all_zero_mask(two_turns) -> None:
    infra = two_turns.model_copy(update={"failure": Failure.INFRA, "task_reward": None})
    [e] = build_examples([infra], [[0.0, 0.0]], max_seq_len=100)
    assert len(e.ids) == 10
    assert e.mask == [0] * 10


def test_a_sequence_longer_than_max_seq_len_is_cut_and_flagged(two_turns) -> None:
    [cut] = build_examples([two_turns], [[1.0, 1.0]], max_seq_len=6)
    assert cut.ids == [10, 11, 12, 20, 21, 13]
    assert len(cut.mask) == len(cut.old_logp) == len(cut.advantages) == 6
    assert cut.truncated is True
    [exact] = build_examples([two_turns], [[1.0, 1.0]], max_seq_len=10)
    assert exact.truncated is False


@pytest.mark.parametrize("logprobs", [[], [-0.5], [-0.5, -0.5, -0.5]], ids=["none", "fewer", "more"])
def test_a_turn_whose_logprobs_do_not_match_its_tokens_is_refused(logprobs) -> None:
    # Trained on, its tokens would get a made-up sampling log-prob of 0 (probability 1).
    traj = _traj([_gen([1], [2], logprobs=[-0.1]), _gen([1], [2, 3], logprobs=logprobs)])
    with pytest.raises(ValueError, match=f"turn 1: {len(logprobs)} log-probs for 2 generated tokens"):
        build_examples([traj], [[1.0, 1.0]], max_seq_len=100)


def test_a_turn_holding_its_whole_prompt_starts_a_new_sequence_of_the_same_episode() -> None:
    # A server re-rendered the conversation so that the first turn's ids are not its prefix.
    second = _gen([1, 7, 8, 5], [6], logprobs=[-0.3]).model_copy(update={"full_prompt": True})
    traj = _traj([_gen([1], [2, 3]), _gen([4], [5]), second])
    first, again = build_examples([_traj([_gen([9], [9])]), traj], [[0.0], [1.0, 2.0, 3.0]], max_seq_len=100)[1:]
    assert (first.ids, first.mask, first.turn_lengths) == ([1, 2, 3, 4, 5], [0, 1, 1, 0, 1], [2, 1])
    assert first.advantages == [0.0, 1.0, 1.0, 0.0, 2.0]
    assert (again.ids, again.mask, again.advantages) == ([1, 7, 8, 5, 6], [0, 0, 0, 0, 1], [0, 0, 0, 0, 3.0])
    assert again.old_logp[-1] == -0.3
    assert first.episode == again.episode == 1


def test_a_trajectory_without_generations_gives_an_empty_example_in_its_place(two_turns) -> None:
    # Examples stay aligned with the trajectories (the trainer pairs them with their groups).
    scripted = _traj([None, None])
    examples = build_examples([scripted, two_turns], [[1.0, 1.0], [1.0, 1.0]], max_seq_len=100)
    assert [e.ids[:1] for e in examples] == [[], [10]]
    assert examples[0].mask == []
    with pytest.raises(ValueError, match="at least one id"):
        collate(examples, pad_id=0)


# --- collate -----------------------------------------------------------------------------------


def test_collate_shifts_so_each_position_is_scored_against_the_next_token(two_turns) -> None:
    short = _traj([_gen([30], [31, 32], [-1.0, -2.0])])
    examples = build_examples([two_turns, short], [[0.5, -1.5], [2.0]], max_seq_len=100)
    batch = collate(examples, PAD)
    assert batch.input_ids.shape == batch.targets.shape == batch.mask.shape == (2, 10)
    # targets[t] = ids[t + 1]
    assert batch.targets[0, :9].tolist() == examples[0].ids[1:]
    assert batch.targets[1, :2].tolist() == [31, 32]
    # The mask selects exactly the generated ids as targets, with their log-probs and advantages.
    selected = batch.mask.bool()
    assert batch.targets[0][selected[0]].tolist() == [20, 21, 22, 23, 24]
    assert batch.old_logp[0][selected[0]].tolist() == pytest.approx([-0.1, -0.2, -0.3, -0.4, -0.5])
    assert batch.advantages[0][selected[0]].tolist() == [0.5, 0.5, -1.5, -1.5, -1.5]
    assert batch.targets[1][selected[1]].tolist() == [31, 32]
    assert batch.advantages[1][selected[1]].tolist() == [2.0, 2.0]


def test_collate_right_pads_and_masks_the_padding(two_turns) -> None:
    short = _traj([_gen([30], [31, 32])])
    batch = collate(build_examples([two_turns, short], [[1.0, 1.0], [1.0]], max_seq_len=100), PAD)
    assert batch.attention_mask[1].tolist() == [1, 1, 1] + [0] * 7
    assert batch.input_ids[1, 3:].tolist() == [PAD] * 7
    assert batch.mask[1, 2:].sum() == 0
    assert batch.mask[0, 9] == 0  # the last token predicts nothing


# --- advantages per turn --------------------------------------------------------------------------


def test_turn_advantages_without_step_term_are_the_group_advantages_per_turn() -> None:
    win = _traj([_gen([1], [2]), _gen([3], [4])], task_reward=1.0, failure=Failure.NONE)
    lose = _traj([_gen([1], [2]), _gen([3], [4]), _gen([5], [6])], task_reward=0.0)
    per_turn, rewards = turn_advantages(
        [win, lose], [0, 0], [{}, {}], task_mode="std", step_mode="none", step_weight=1.0, gamma=0.9
    )
    # mean 0.5, population std 0.5: +1 and -1 on every turn
    assert rewards == [1.0, 0.0]
    assert per_turn[0] == pytest.approx([1.0, 1.0], abs=1e-5)
    assert per_turn[1] == pytest.approx([-1.0, -1.0, -1.0], abs=1e-5)


def test_an_infra_trajectory_gets_zero_and_does_not_move_its_group() -> None:
    win = _traj([_gen([1], [2])], task_reward=1.0, failure=Failure.NONE)
    lose = _traj([_gen([1], [2])], task_reward=0.0)
    crashed = _traj([_gen([1], [2])], task_reward=None, failure=Failure.INFRA)
    per_turn, _ = turn_advantages(
        [win, lose, crashed], [0, 0, 0], [{}, {}, {}], task_mode="std", step_mode="none", step_weight=1.0, gamma=0.9
    )
    assert [a for [a] in per_turn] == pytest.approx([1.0, -1.0, 0.0], abs=1e-5)


@pytest.mark.parametrize("step_mode", ["none", "gigpo", "per_turn"])
@pytest.mark.parametrize("where", ["task", "step"])
@pytest.mark.parametrize("task_mode", ["std", "none"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e308, -1e200], ids=["nan", "inf", "1e308", "-1e200"])
def test_a_non_finite_or_overflowing_reward_is_left_out_like_infra_and_does_not_spoil_its_group(
    step_mode, where, task_mode, bad
) -> None:
    # Finite but huge rewards raised OverflowError in the group's std (1e200) or made
    # every advantage of the group NaN (1e308).
    win = _traj([_gen([1], [2])], task_reward=1.0, failure=Failure.NONE, steps=[("a", "b")], progress=[0.0])
    lose = _traj([_gen([1], [2])], task_reward=0.0, steps=[("a", "b")], progress=[0.0])
    broken = _traj(
        [_gen([1], [2])],
        task_reward=bad if where == "task" else 0.0,
        steps=[("a", "b")],
        progress=[bad if where == "step" else 0.0],
    )
    per_turn, _ = turn_advantages(
        [win, lose, broken], [0, 0, 0], [{}] * 3, task_mode=task_mode, step_mode=step_mode, step_weight=0.5, gamma=1.0
    )
    flat = [a for turns in per_turn for a in turns]
    assert all(math.isfinite(a) for a in flat) and flat[2] == 0.0
    assert flat[0] > 0 > flat[1]


def test_gigpo_step_term_compares_turns_from_the_same_state() -> None:
    # Equal task rewards (no task term). Both start from the same state; the first guess
    # of one eliminates more of the interval than the other's.
    a = _traj([_gen([1], [2])], steps=[("guess 8", "higher")], progress=[0.5])
    b = _traj([_gen([1], [2])], steps=[("guess 4", "higher")], progress=[0.25])
    per_turn, _ = turn_advantages(
        [a, b], [0, 0], [{}, {}], task_mode="std", step_mode="gigpo", step_weight=0.5, gamma=1.0
    )
    # returns 0.5 and 0.25: mean 0.375 -> +0.125 / -0.125, times the step weight 0.5
    assert [a for [a] in per_turn] == pytest.approx([0.0625, -0.0625], abs=1e-6)
    # With the std division (GiGPO's F_norm = std): std 0.125 -> +1 / -1, times 0.5
    per_turn, _ = turn_advantages(
        [a, b], [0, 0], [{}, {}], task_mode="std", step_mode="gigpo", step_weight=0.5, gamma=1.0, step_std=True
    )
    assert [a for [a] in per_turn] == pytest.approx([0.5, -0.5], abs=1e-4)


def _guesses(moves: list[str], won: bool) -> Trajectory:
    """An episode of guessing: one turn per guess; the last one hits if it ``won``."""
    steps = [(m, "correct" if won and i == len(moves) - 1 else "higher") for i, m in enumerate(moves)]
    gens: list[Generation | None] = [_gen([1], [2]) for _ in moves]
    return _traj(gens, task_reward=float(won), failure=Failure.NONE if won else Failure.POLICY, steps=steps)


@pytest.mark.parametrize("step_mode", ["gigpo", "per_turn"])
def test_by_default_winning_a_turn_sooner_weighs_little_next_to_winning(step_mode) -> None:
    """Task 0: every episode wins, two on turn 1 (a lucky guess), two on turn 2; the
    paths differ by one turn's discount. Task 1: one win, one loss. Divided by its std,
    the step term stretched task 0's discount to the unit a win over a loss gets, and
    a policy learned to guess for speed at the cost of winning. By default the step
    term stays in reward units: the sooner win's edge is the discount's 0.05."""
    sooner = [_guesses(["8", "13"], True), _guesses(["8", "13"], True)]
    later = [_guesses(["8", "14", "15"], True), _guesses(["8", "14", "15"], True)]
    task1 = [_guesses(["8", "12"], True), _guesses(["8", "12", "10", "11"], False)]
    trajs = [*sooner, *later, *task1]
    groups = [0, 0, 0, 0, 1, 1]

    def advantages(**kwargs: bool) -> list[list[float]]:
        per_turn, _ = turn_advantages(
            trajs, groups, [{}] * 6, task_mode="std", step_mode=step_mode, step_weight=1.0, gamma=0.95, **kwargs
        )
        return per_turn

    default = advantages()
    assert default[0][1] - default[2][1] == pytest.approx(1 - 0.95, abs=1e-6)
    assert max(abs(a) for row in default[:4] for a in row) < 0.05
    assert min(default[4]) > 0.99 and max(default[5]) < -0.99  # a win over a loss: the task term alone is +-1
    stretched = advantages(step_std=True)
    assert stretched[0][1] - stretched[2][1] == pytest.approx(2.0, abs=1e-3)  # +1 against -1


# --- anchor keys -----------------------------------------------------------------------------


def test_anchor_keys_are_equal_for_equal_histories() -> None:
    steps = [("guess 8", "higher"), ("guess 12", "lower"), ("guess 10", "correct")]
    a, b = _traj([None] * 3, steps=steps), _traj([None] * 3, steps=steps)
    assert anchor_keys(a) == anchor_keys(b)
    assert len(anchor_keys(a)) == 3
    assert len(set(anchor_keys(a))) == 3  # each turn of one episode is a new state


def test_higher_after_different_guesses_is_two_states() -> None:
    a = _traj([None] * 2, steps=[("guess 8", "higher"), ("guess 12", "lower")])
    b = _traj([None] * 2, steps=[("guess 4", "higher"), ("guess 12", "lower")])
    ka, kb = anchor_keys(a), anchor_keys(b)
    assert ka[0] == kb[0]  # the group shares the initial observation
    assert ka[1] != kb[1]


def test_anchor_keys_depend_on_the_whole_history_not_only_the_last_step() -> None:
    a = _traj([None] * 3, steps=[("guess 8", "higher"), ("guess 12", "lower"), ("x", "y")])
    b = _traj([None] * 3, steps=[("guess 9", "higher"), ("guess 12", "lower"), ("x", "y")])
    assert anchor_keys(a)[2] != anchor_keys(b)[2]


# --- sft: supervised examples from oracle trajectories ---------------------------------------------


@pytest.fixture(scope="module")
def oracle_trajectories() -> list[Trajectory]:
    return agentenv.rollout(
        "guess-number-v0", agentenv.spec("guess-number-v0").make_oracle(), n=20, env_kwargs={"tool_prompt": "compact"}
    )


@pytest.fixture(scope="module")
def tok(oracle_trajectories: list[Trajectory]) -> Any:
    return build_tiny_tokenizer([m["content"] for t in oracle_trajectories for m in t.messages])


def test_trajectory_example_masks_only_the_assistant_turns(tok, oracle_trajectories) -> None:
    delta = ChatDelta(tok, tok.eos_token)
    traj = oracle_trajectories[0]
    e = trajectory_example(delta, traj, max_seq_len=4096)
    masked = tok.decode([i for i, m in zip(e.ids, e.mask, strict=True) if m])
    unmasked = tok.decode([i for i, m in zip(e.ids, e.mask, strict=True) if not m])
    assistant = [m["content"] for m in traj.messages if m["role"] == "assistant"]
    assert masked == "".join(a + tok.eos_token for a in assistant)
    assert "<tool_call>" in masked
    assert traj.messages[0]["content"] not in masked and traj.messages[0]["content"] in unmasked
    assert traj.messages[1]["content"] in unmasked
    assert e.truncated is False
    # the sequence is the canonical one-shot tokenisation of the conversation
    assert (
        delta.mismatch(
            traj.messages[: max(i for i, m in enumerate(traj.messages) if m["role"] == "assistant") + 1], e.ids
        )
        == 0
    )


def test_trajectory_example_is_cut_at_max_seq_len(tok, oracle_trajectories) -> None:
    delta = ChatDelta(tok, tok.eos_token)
    e = trajectory_example(delta, oracle_trajectories[0], max_seq_len=20)
    assert len(e.ids) == len(e.mask) == 20
    assert e.truncated is True


def test_a_few_sft_steps_lower_the_loss_on_oracle_trajectories(tok, oracle_trajectories) -> None:
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config)
    logged: list[tuple[int, float]] = []
    # Sequences cut at 160 tokens (the prompt and two turns) keep this fast on CPU.
    losses = sft(
        model,
        tok,
        oracle_trajectories,
        steps=8,
        learning_rate=3e-2,
        batch_size=4,
        max_seq_len=160,
        seed=0,
        log=lambda step, loss: logged.append((step, loss)),
    )
    assert len(losses) == 8
    assert logged == list(enumerate(losses))
    assert sum(losses[-3:]) / 3 < losses[0] - 0.5


def test_sft_sharing_prompts_trains_as_without_and_feeds_fewer_tokens(tok, oracle_trajectories) -> None:
    """`reuse_kv_cache = false` reaches the warm start: ``share_prompts=False`` runs every
    row whole, and both give the same losses up to float rounding."""
    trajs = oracle_trajectories[:2] * 4  # every batch of 4 repeats a prompt
    runs = {}
    for share in (True, False):
        with torch.random.fork_rng():
            model = tiny_model(tok)
        fed: list[int] = []
        model.get_input_embeddings().register_forward_hook(lambda _m, args, _o, fed=fed: fed.append(args[0].numel()))
        losses = sft(model, tok, trajs, steps=3, learning_rate=3e-2, batch_size=4, max_seq_len=160, share_prompts=share)
        runs[share] = (losses, sum(fed))
    assert runs[True][0] == pytest.approx(runs[False][0], abs=1e-4)
    assert runs[True][1] < runs[False][1]


def test_sft_without_trajectories_is_refused(tok) -> None:
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    with pytest.raises(ValueError, match="at least one trajectory"):
        sft(Qwen2ForCausalLM(config), tok, [], steps=1)


@pytest.mark.parametrize("step_mode", ["gigpo", "per_turn"])
def test_an_episode_that_failed_before_its_first_step_does_not_break_the_step_term(step_mode) -> None:
    # Its env's reset raised (a service down): no transitions, no generations. It is
    # infra, so it gets no turns and leaves its group's statistics alone.
    win = _traj([_gen([1], [2])], task_reward=1.0, failure=Failure.NONE)
    lose = _traj([_gen([1], [2])], task_reward=0.0)
    never_started = _traj([], task_reward=None, failure=Failure.INFRA)
    per_turn, _ = turn_advantages(
        [win, lose, never_started],
        [0, 0, 0],
        [{}, {}, {}],
        task_mode="std",
        step_mode=step_mode,
        step_weight=1.0,
        gamma=1.0,
    )
    assert per_turn[2] == []
    assert per_turn[0][0] > 0 > per_turn[1][0]


def _closing(traj: Trajectory, closing: dict[str, float]) -> Trajectory:
    last = traj.transitions[-1]
    last.rewards = {k: last.rewards.get(k, 0.0) + v for k, v in {**last.rewards, **closing}.items()}
    last.closing = closing
    return traj


@pytest.mark.parametrize("step_mode", ["gigpo", "per_turn"])
def test_a_take_back_cancels_the_payments_it_undoes_however_late_the_episode_ends(step_mode) -> None:
    """Shaping paid on turn 1 and taken back when the episode ends (closing rewards): a
    policy that stalls to the turn limit before the take-back would, discounted, keep
    the difference; moved to the turn that was paid, it cancels from every turn."""

    def failing(turns: int) -> Trajectory:
        progress = [0.0, 0.5] + [0.0] * (turns - 2)
        return _closing(_traj([None] * turns, progress=progress), {"progress": -0.5})

    short, stalled = failing(3), failing(16)
    other = _traj([None] * 3, steps=[("x", "y")] * 3)  # fails without shaping
    trajs = [short, stalled, other]
    per_turn, _ = turn_advantages(
        trajs, [0, 0, 0], [{}] * 3, task_mode="std", step_mode=step_mode, step_weight=1.0, gamma=0.95
    )
    assert per_turn[0][0] == pytest.approx(per_turn[1][0]) == pytest.approx(per_turn[2][0])
    assert step_rewards(stalled, {}) == pytest.approx([0.0] * 16)
    assert sum(step_rewards(stalled, {})) == pytest.approx(sum(t.rewards["progress"] for t in stalled.transitions))


def test_a_take_back_beyond_what_the_turns_were_paid_goes_on_the_first_and_only_its_own_component_moves() -> None:
    """An episode resumed from a snapshot: what the take-back cancels beyond its own
    turns' payments was paid before its first turn, and stalling must not discount it."""
    traj = _closing(_traj([None] * 3, progress=[0.0, 0.25, 0.0]), {"progress": -0.75})
    traj.transitions[1].rewards["format"] = -0.1
    assert step_rewards(traj, {"format": 2.0}) == pytest.approx([-0.5, -0.2, 0.0])
    stalled = _closing(_traj([None] * 12, progress=[0.0] * 12), {"progress": -0.5})
    assert step_rewards(stalled, {}) == pytest.approx([-0.5] + [0.0] * 11)

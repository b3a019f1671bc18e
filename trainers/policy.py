"""`TransformersPolicy`: a transformers causal LM as an agentenv `Policy`, token in, token out.

`TokenPolicy` holds what any token-in/token-out sampler shares (the per-episode ids,
the context limit, the `Generation`s); `TransformersPolicy` samples with the model
in this process, `agentenv.trainers.vllm_engine.VLLMPolicy` with a vLLM engine.

Each episode keeps the exact ids it has seen and generated. A turn appends only
the new observation's ids (through `ChatDelta`), then all live episodes are
sampled in one batched call. Every `Generation` it returns carries the ids
appended before it (``prompt_ids``), the generated ids and their log-probs, so a
trajectory alone rebuilds the training sequence.

An episode never grows past ``max_context_tokens``: each row samples at most the
room it has left, and an observation is tokenised only as far as that room. One
that leaves no room for a reply fills the episode: that observation's ids are
dropped (no reply follows them to train on) and every later turn is answered with
`Refused` (no `Generation`), which the env counts as a format error whatever its
parser would make of an empty action.

The KV cache of the live episodes is kept between turns (``reuse_cache``), so a turn
feeds the model only the new observation, not the whole conversation: finished
episodes are dropped from it, a new one joins with its whole prompt, and an episode
whose ids no longer extend what the cache holds (restored from a snapshot) is fed
whole again. The cache is dropped by `reset`, when a trainable parameter is written
in place or replaced (an optimiser step, ``load_state_dict``; writes through
``.data`` go unseen: call `reset` after those), and when memory runs short (the
turn is sampled again without it, and caching stays off until `reset`).
Episodes that open with the same prompt (a GRPO group) prefill it once, and the
opening every prompt shares (a system prompt) once for all (``share_prompts``); with
the cache kept, decoding reads a group's prompt once per token for the group in
later turns too, while its episodes go on together.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentenv.core._admit import Refused
from agentenv.core.policy import Conversation, Generation, PolicyOutput
from agentenv.trainers.generation import KVPrefix, Sampled, sample
from agentenv.trainers.next_token import reusable
from agentenv.trainers.static_decode import StaticDecoder, static_decoder
from agentenv.trainers.tokens import ChatDelta

__all__ = ["TokenPolicy", "TransformersPolicy"]


@dataclass
class _Episode:
    ids: list[int] = field(default_factory=list)
    consumed: int = 0  # messages of the conversation covered by ids
    turns: int = 0
    stopped: bool = True
    full: bool = False  # no room left for a reply: takes no more ids, every turn is refused


class TokenPolicy:
    """Token in, token out over a chat template, for any sampler of token ids.

    Keeps each episode's exact ids (its prompt rendered once, then per turn the ids
    generated and the observation's, never a re-tokenised conversation), keeps every
    episode within ``max_context_tokens``, and turns what `_sample` returns into
    `Generation`s. A subclass says how a batch of prompts is sampled."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        end_of_turn: str | None = None,
        max_new_tokens: int = 256,
        max_context_tokens: int = 4096,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        stop: Sequence[str] = (),
    ) -> None:
        self.tokenizer = tokenizer
        self.delta = ChatDelta(tokenizer, end_of_turn or tokenizer.eos_token)
        self.max_new_tokens = max_new_tokens
        self.max_context_tokens = max_context_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.stop = tuple(stop)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.delta.end_of_turn_id
        self.generator: torch.Generator | None = None
        """Seeds the samples, where the sampler can be seeded (the trainer sets it per rollout)."""
        self.exact_logprobs = False
        """Whether the log-probs sampled are the trainer's own arithmetic, up to float
        rounding; where they are not, the trainer corrects for the gap (``sampler_is``)."""
        self._episodes: dict[int, _Episode] = {}
        self._warned_context = False

    def reset(self) -> None:
        """Forget every episode (the rollout engine reuses conversation ids per call)."""
        self._episodes.clear()

    def act(self, conversations: Sequence[Conversation]) -> list[PolicyOutput]:
        appended = [self._append(conv) for conv in conversations]
        episodes = [self._episodes[conv.id] for conv in conversations]
        rows = [i for i, ep in enumerate(episodes) if not ep.full]
        if len(rows) < len(episodes) and not self._warned_context:
            self._warned_context = True
            warnings.warn(
                f"an episode reached max_context_tokens={self.max_context_tokens}; its turns get no "
                "generation and are refused (format errors). Raise max_seq_len or shorten the prompt "
                "(tool_prompt='compact').",
                stacklevel=2,
            )
        # Refused, not an empty action: an env where "" is a valid move (or an answer) would
        # otherwise score a turn the model never took. `admit` makes it a format error.
        why = f"no room left in the context for a reply (max_context_tokens={self.max_context_tokens})"
        no_room = Refused("", why)
        outputs: list[PolicyOutput] = [no_room] * len(episodes)
        if rows:
            result = self._sample(
                [conversations[i].id for i in rows],
                [episodes[i].ids for i in rows],
                [min(self.max_new_tokens, self.max_context_tokens - len(episodes[i].ids)) for i in rows],
            )
            for j, i in enumerate(rows):
                ids, logps, stopped = result.token_ids[j], result.logprobs[j], result.stopped[j]
                ended_turn = stopped and ids[-1] == self.delta.end_of_turn_id  # not by a stop string
                episodes[i].ids += ids
                episodes[i].stopped = ended_turn  # otherwise the next observation closes the turn
                text = self._decode(ids[:-1] if ended_turn else ids)
                outputs[i] = Generation(
                    action=text,
                    prompt_ids=appended[i],
                    token_ids=ids,
                    logprobs=logps,
                    finish_reason="stop" if stopped else "length",
                )
        for ep in episodes:
            ep.turns += 1
        return outputs

    def _sample(self, conv_ids: list[int], prompts: list[list[int]], max_new_tokens: list[int]) -> Sampled:
        """Continue each of ``prompts`` (the ids of episode ``conv_ids[i]``) by 1 to
        ``max_new_tokens[i]`` ids, ending at the end-of-turn id or a ``stop`` string (the
        id that completes it kept whole), with each id's log-prob at ``temperature``
        (over the whole vocabulary, or over what ``top_p``/``top_k`` keep: the sampler's
        docstring says which)."""
        raise NotImplementedError

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _append(self, conv: Conversation) -> list[int]:
        """Bring the episode's ids up to date with ``conv``; returns the ids appended.
        Ids that would leave no room for a reply are not appended: the episode is full."""
        known = self._episodes.get(conv.id)
        if (
            known is not None
            and conv.turn == known.turns
            and len(conv.messages) > known.consumed
            and conv.messages[known.consumed]["role"] == "assistant"
        ):
            ep = known
            room = self.max_context_tokens - len(ep.ids)
            observation = conv.messages[ep.consumed + 1 :]  # skip our own assistant turn
            skip = ep.full or room <= 0
            new = [] if skip else self.delta.observation_ids(observation, stopped=ep.stopped, limit=room)
        else:
            # A new episode (or one restored from a snapshot): render the whole prompt once.
            ep = self._episodes[conv.id] = _Episode(turns=conv.turn)
            room = self.max_context_tokens
            new = self.delta.prompt_ids(conv.messages, limit=room)
        ep.consumed = len(conv.messages)
        if ep.full or len(new) >= room:
            ep.full = True
            return []
        ep.ids += new
        return new


class TransformersPolicy(TokenPolicy):
    """Samples actions from ``model`` for a batch of conversations."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        end_of_turn: str | None = None,
        max_new_tokens: int = 256,
        max_context_tokens: int = 4096,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int | None = None,
        stop: Sequence[str] = (),
        reuse_cache: bool = True,
        share_prompts: bool = True,
        static: bool = True,
        bf16: bool = False,
    ) -> None:
        super().__init__(
            tokenizer,
            end_of_turn=end_of_turn,
            max_new_tokens=max_new_tokens,
            max_context_tokens=max_context_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            stop=stop,
        )
        self.model = model
        if seed is not None:
            self.generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
        self.reuse_cache = reuse_cache and reusable(model)
        """Keep the KV cache between turns (off for models `reusable` refuses)."""
        self.share_prompts = share_prompts
        """Prefill a prompt that several rows of a call open with once (`generation.sample`)."""
        self._kv: KVPrefix | None = None
        self._kv_rows: list[int] = []  # conversation id of each cached row
        self._kv_weights: tuple[tuple[int, int], ...] = ()
        self._kv_off = False  # memory ran short: no caching until reset()
        self.static = static
        """On a GPU, sample with a `static_decode.StaticDecoder` (static cache, CUDA graphs, no
        host sync per token) where the model qualifies, instead of `generation.sample`."""
        self.bf16 = bf16
        """Sample in bf16 (on a GPU, over float32 master weights): autocast, or the static
        decoder's bf16 weight copies."""
        self._static: StaticDecoder | None = None
        self._static_checked = False  # whether the model was looked at for it (at the first call)
        self.exact_logprobs = True
        """Whether the sampled log-probs are the trainer's own arithmetic (up to float
        rounding); False once the GPU's static decoder, with its bf16 weight copies, samples."""

    def settings(self) -> dict[str, Any]:
        """The keyword arguments (besides model and tokenizer) of a policy that samples
        as this one does, without its seed: the asynchronous trainer's generation copy."""
        return dict(
            end_of_turn=self.delta.end_of_turn,
            max_new_tokens=self.max_new_tokens,
            max_context_tokens=self.max_context_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            stop=self.stop,
            reuse_cache=self.reuse_cache,
            share_prompts=self.share_prompts,
            static=self.static,
            bf16=self.bf16,
        )

    def reset(self) -> None:
        """Forget every episode and the kept KV cache."""
        super().reset()
        self._kv, self._kv_rows, self._kv_off = None, [], False

    def _sample(self, conv_ids: list[int], prompts: list[list[int]], max_new_tokens: list[int]) -> Sampled:
        was_training = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device.type
        try:
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=self.bf16):
                return self._sample_in_eval(conv_ids, prompts, max_new_tokens)
        finally:
            self.model.train(was_training)

    def _sample_in_eval(self, conv_ids: list[int], prompts: list[list[int]], max_new_tokens: list[int]) -> Sampled:
        static = self._static_decoder()
        if static is not None:
            return static.sample(
                prompts,
                stop_ids=[self.delta.end_of_turn_id],
                pad_id=self.pad_id,
                max_new_tokens=max_new_tokens,
                temperature=self.temperature,
                top_p=self.top_p,
                top_k=self.top_k,
                generator=self.generator,
                stop_strings=self.stop,
                decode=self._decode,
            )
        keep = self.reuse_cache and not self._kv_off
        with torch.inference_mode():  # the kept cache holds inference tensors (as `sample` makes them)
            prefix = self._prefix(conv_ids, prompts) if keep else None
        self._kv = None  # the cache is now the prefix's (or freed)
        kwargs: dict[str, Any] = dict(
            stop_ids=[self.delta.end_of_turn_id],
            pad_id=self.pad_id,
            max_new_tokens=max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            generator=self.generator,
            stop_strings=self.stop,
            decode=self._decode,
            share_prompts=self.share_prompts,
        )
        try:
            result = sample(self.model, prompts, prefix=prefix, keep_cache=keep, **kwargs)
        except torch.cuda.OutOfMemoryError:
            if not keep:
                raise
            del prefix
            self._kv_off = True
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            warnings.warn("out of memory with the KV cache kept between turns; sampling without it", stacklevel=5)
            return sample(self.model, prompts, **{**kwargs, "share_prompts": False})  # the plainest pass
        if result.prefix is not None:
            self._kv, self._kv_rows, self._kv_weights = result.prefix, conv_ids, self._weights_version()
            result.prefix = None
        return result

    def _static_decoder(self) -> StaticDecoder | None:
        if not self._static_checked:
            self._static_checked = True
            on_gpu = next(self.model.parameters()).device.type == "cuda"
            dtype = torch.bfloat16 if self.bf16 else torch.float32
            self._static = static_decoder(self.model, dtype) if self.static and on_gpu else None
            self.exact_logprobs = self._static is None
        return self._static

    def _prefix(self, conv_ids: list[int], prompts: list[list[int]]) -> KVPrefix | None:
        """The kept cache rearranged for this call's rows, or None when no row can use it."""
        kv = self._kv
        if kv is None or self._kv_weights != self._weights_version():
            return None
        where = {c: r for r, c in enumerate(self._kv_rows)}
        rows: list[int | None] = []
        for conv_id, ids in zip(conv_ids, prompts, strict=True):
            r = where.get(conv_id)
            held = kv.ids[r] if r is not None else None
            rows.append(r if held is not None and len(held) < len(ids) and ids[: len(held)] == held else None)
        if all(r is None for r in rows):
            return None
        return kv.select(rows)

    def _weights_version(self) -> tuple[tuple[int, int], ...]:
        """Changes whenever a parameter is written in place (an optimiser step) or replaced."""
        return tuple((p.data_ptr(), p._version) for p in self.model.parameters() if p.requires_grad)

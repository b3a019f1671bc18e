"""`TransformersWorldModel`: a world model run locally with transformers.

The same prompt as every world model (`agentenv.envs.world.prompt`), rendered with
the tokenizer's chat template (plain "role: content" lines for a tokenizer without
one) and tokenized with special tokens split inside each message's content (the
template's turn markers stay control tokens; an agent's ``[INST]`` is text),
generated with ``model.generate`` (greedy by default; with a temperature, sampled
under a seed drawn from the call's cache key, so a call's answer does not depend on
what ran before it), decoded, and read by the same JSON extraction and validation
as an endpoint's reply. One generation at a time per model (a lock):
a transformers model is not made to be called from several threads at once.

torch and transformers are imported when the model is built, never at import.
Left out: batching concurrent calls, constrained decoding.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from agentenv.envs.world.models import WorldModelError
from agentenv.envs.world.prompt import WorldRequest, messages

__all__ = ["TransformersWorldModel"]


class TransformersWorldModel:
    """Emulates a world's tools with a local causal LM and its tokenizer."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_new_tokens: int = 1024,
        temperature: float = 0.0,
        model_id: str | None = None,
    ) -> None:
        """
        Args:
            model: A transformers causal LM (already on its device).
            tokenizer: Its tokenizer.
            max_new_tokens: Most tokens per reply.
            temperature: 0 (greedy) or a sampling temperature.
            model_id: The cache identity; default: the model's name or path and its config's hash.
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.hf_model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        if model_id is None:
            config = getattr(model, "config", None)
            text = config.to_json_string() if config is not None else type(model).__name__
            name = getattr(model, "name_or_path", "") or type(model).__name__
            model_id = f"transformers:{name}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"
        self.model_id = f"{model_id}:t={temperature}:n={max_new_tokens}"
        self._lock = threading.Lock()

    @classmethod
    def from_pretrained(cls, path: str, **kwargs: Any) -> TransformersWorldModel:
        """Load a local model folder (or hub id, where a hub is reachable) and its tokenizer."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
        model.eval()
        return cls(model, tokenizer, model_id=f"transformers:{path}", **kwargs)

    def prompt_text(self, request: WorldRequest) -> str:
        """The prompt as the model reads it."""
        return self._render(messages(request))

    def prompt_ids(self, request: WorldRequest) -> list[int]:
        """The prompt's token ids: the template's own text with its control tokens, each
        message's content with special tokens split (``split_special_tokens``), so text an
        agent wrote is never a turn marker, however it spells one."""
        chat = messages(request)
        text = self._render(chat)
        pieces: list[tuple[str, bool]] = []
        at = 0
        for message in chat:
            content = message["content"].strip()  # templates may trim a message's content
            start = text.find(content, at)
            if start < 0:
                raise WorldModelError(
                    f"the chat template rewrites a {message['role']} message's content: the prompt cannot be "
                    "tokenized with the agent's text kept apart from the template's control tokens"
                )
            pieces += [(text[at:start], False), (content, True)]
            at = start + len(content)
        pieces.append((text[at:], False))
        # A fast tokenizer keeps split_special_tokens as state between the setting and the
        # encoding: two calls at once could encode an agent's text with special tokens parsed.
        with self._lock:
            return [i for piece, split in pieces if piece for i in self._encode(piece, split=split)]

    def _render(self, chat: list[dict[str, str]]) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return str(self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
        return "".join(f"{m['role']}: {m['content']}\n" for m in chat) + "assistant: "

    def _encode(self, text: str, *, split: bool) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=split)["input_ids"])

    @property
    def reply_tokens(self) -> int:
        """Most tokens per reply (``max_new_tokens``)."""
        return self.max_new_tokens

    def _stop_ids(self) -> set[int]:
        ids: set[int] = set()
        for value in (self.tokenizer.eos_token_id, getattr(self.hf_model.generation_config, "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(v for v in value if isinstance(v, int))
        return ids

    def propose(self, request: WorldRequest) -> str:
        import torch

        ids = torch.tensor([self.prompt_ids(request)], dtype=torch.long)
        room = getattr(self.hf_model.config, "max_position_embeddings", None)
        if isinstance(room, int) and ids.shape[1] + self.max_new_tokens > room:
            raise WorldModelError(
                f"the prompt ({ids.shape[1]} tokens) and max_new_tokens ({self.max_new_tokens}) pass the "
                f"model's {room} positions",
                kind="too_long",
            )
        device = next(self.hf_model.parameters()).device
        pad = self.tokenizer.pad_token_id
        eos = self.tokenizer.eos_token_id
        kwargs: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "do_sample": self.temperature > 0,
            "pad_token_id": pad if pad is not None else eos,
        }
        if self.temperature > 0:
            kwargs["temperature"] = self.temperature
        with self._lock, torch.inference_mode(), torch.random.fork_rng():
            torch.manual_seed(int(request.key[:8] or "0", 16) + request.attempt)
            try:
                out = self.hf_model.generate(ids.to(device), attention_mask=torch.ones_like(ids).to(device), **kwargs)
            except (RuntimeError, ValueError) as e:  # out of memory, a bad config: no reply
                raise WorldModelError(f"generation failed: {type(e).__name__}: {str(e)[:300]}") from None
        reply = out[0, ids.shape[1] :]
        if len(reply) >= self.max_new_tokens and int(reply[-1]) not in self._stop_ids():
            raise WorldModelError(f"the reply was cut at max_new_tokens={self.max_new_tokens}", kind="cut")
        return str(self.tokenizer.decode(reply, skip_special_tokens=True))

"""Token-exact multi-turn sequences, chat templates, and the project's tiny tokenizer.

The sequence a trainer learns from is built append-only: the prompt ids, then for
each turn the ids the model generated followed by the ids of the observation as
the chat template renders it. Nothing is re-rendered from the whole chat, so the
tokens trained on are exactly the tokens sampled. `ChatDelta` renders one
observation's suffix (with the template's bridge after the end-of-turn token);
Message text that spells a special token is defused first (`_defused`): only the
template's own markers are special tokens. `retokenization_mismatch` says whether the incremental ids equal a one-shot
tokenisation of the final conversation (with a model, they can differ: a model
may sample a non-canonical split of its text).

`build_tiny_tokenizer` trains a small byte-level BPE offline (digits split one by
one) for tests and CPU demos; real runs load the model's own tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHATML_TEMPLATE",
    "LLAMA3_TEMPLATE",
    "QWEN_TOOL_TEMPLATE",
    "ChatDelta",
    "build_tiny_tokenizer",
]

# The tiny model's own template: ChatML with the "tool" role as a turn of its own.
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Qwen2.5 style: tool results go inside a user turn, consecutive results share it.
QWEN_TOOL_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "\n<tool_response>\n{{ m['content'] }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>\n{% endif %}"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Llama-3 style headers; tool results use the "ipython" role.
LLAMA3_TEMPLATE = (
    "{{ '<|begin_of_text|>' }}{% for m in messages %}"
    "{% set role = 'ipython' if m['role'] == 'tool' else m['role'] %}"
    "<|start_header_id|>{{ role }}<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
TEMPLATES = {"chatml": CHATML_TEMPLATE, "qwen": QWEN_TOOL_TEMPLATE, "llama3": LLAMA3_TEMPLATE}
END_OF_TURN = {"chatml": "<|im_end|>", "qwen": "<|im_end|>", "llama3": "<|eot_id|>"}
TOOL_CALL_TOKENS = ["<tool_call>", "</tool_call>"]
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]


_FOLLOWER = {"role": "user", "content": "v"}
"""A message rendered after an assistant turn, so that the turn is not the last message."""


def _render(
    tokenizer: Any, messages: Sequence[Mapping[str, Any]], generation_prompt: bool, specials: Sequence[str] = ()
) -> str:
    return tokenizer.apply_chat_template(
        _defused(messages, specials), tokenize=False, add_generation_prompt=generation_prompt
    )


def special_strings(tokenizer: Any) -> list[str]:
    """The text of every special token of ``tokenizer`` (turn markers, end of text),
    longest first."""
    found = {str(t) for t in getattr(tokenizer, "all_special_tokens", None) or ()}
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            found.add(str(getattr(token, "content", token)))
    return sorted((s for s in found if len(s) > 1), key=len, reverse=True)


def _defused(messages: Sequence[Mapping[str, Any]], specials: Sequence[str]) -> list[Mapping[str, Any]]:
    """``messages`` with any special token's text in a message (its content, content
    parts, name, any string but its role) broken by a word joiner (U+2060) after its
    first character: still readable, no longer one token. Without it, a policy that
    makes the env echo ``<|im_end|><|im_start|>`` (an unknown tool's name, a file's
    content) forges turn boundaries in the very sequence it is trained on."""
    if not specials:
        return list(messages)
    return [{k: v if k == "role" else _defused_value(v, specials) for k, v in m.items()} for m in messages]


def _defused_value(value: Any, specials: Sequence[str]) -> Any:
    """``value`` with every string in it defused: the content, content parts (``[{"type":
    "text", "text": ...}]``, which templates print), a tool message's ``name`` (an
    unknown tool's, which the policy wrote) and anything else a template may show."""
    if isinstance(value, str):
        if any(s in value for s in specials):
            for s in specials:
                value = value.replace(s, s[0] + "\u2060" + s[1:])
        return value
    if isinstance(value, Mapping):
        return {k: _defused_value(v, specials) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_defused_value(v, specials) for v in value]
    return value


def _encode(tokenizer: Any, text: str, limit: int | None = None) -> list[int]:
    """The ids of ``text``; with ``limit``, at most its first ``limit`` ids, tokenising
    only a prefix of ``text`` (4 characters a token, doubled until it gives more ids
    than ``limit``): a 5 MB tool result then costs what its first tokens cost, not
    millions of ids and gigabytes in the tokenizer. The last ids of a cut prefix may
    split differently than in the whole text; a caller that cuts keeps none of them
    for a reply (the context is full)."""
    chars = len(text) if limit is None else 4 * limit + 16
    while True:
        ids = list(tokenizer(text[:chars], add_special_tokens=False)["input_ids"])
        if limit is None or len(ids) > limit or chars >= len(text):
            return ids[:limit]
        chars *= 2


@dataclass
class ChatDelta:
    """Renders what the chat template appends after an assistant turn.

    Every rendering is of an assistant turn followed by more messages, as the turns the
    policy builds on are: some templates render the last message differently (Qwen3
    opens a final assistant turn with an empty ``<think>`` block), so rendering the turn
    last would differ from its rendering once an observation follows it, and an
    append-only check on that would refuse every multi-turn episode. A template that
    drops an assistant turn once a message follows it is refused when made; one that
    rewrites earlier text for a given observation, at that observation.

    ``bridge`` is the text the template puts between the end-of-turn token (where
    the model stops) and the next message, e.g. ``"\\n"`` for ChatML.
    """

    tokenizer: Any
    end_of_turn: str

    def __post_init__(self) -> None:
        self.specials = special_strings(self.tokenizer)
        self.end_of_turn_id = self.tokenizer.convert_tokens_to_ids(self.end_of_turn)
        if self.end_of_turn_id is None or self.end_of_turn_id == self.tokenizer.unk_token_id:
            raise ValueError(f"end-of-turn token {self.end_of_turn!r} is not in the tokenizer's vocabulary")
        marker = "\u2063ASSISTANT\u2063"  # an invisible separator: never part of real text
        self._base = [{"role": "user", "content": "u"}, {"role": "assistant", "content": marker}]
        followed = _render(self.tokenizer, [*self._base, _FOLLOWER], False)
        if marker not in followed:
            raise ValueError(
                "the chat template is not append-only: an assistant turn followed by a message is not rendered"
            )
        after = followed.split(marker, 1)[1]
        if not after.startswith(self.end_of_turn):
            raise ValueError(
                f"the chat template does not close an assistant turn with {self.end_of_turn!r}; "
                "pass the template's end-of-turn token"
            )
        self._head = followed[: len(followed) - len(after) + len(self.end_of_turn)]
        """The text up to the assistant turn's end-of-turn token, as rendered with a message after it."""
        self._follower_text = after[len(self.end_of_turn) :]
        """What `_FOLLOWER` adds after that (the bridge included)."""
        last = _render(self.tokenizer, self._base, False).split(marker + self.end_of_turn, 1)
        self.bridge = last[1] if len(last) == 2 else ""

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], *, limit: int | None = None) -> list[int]:
        """The ids of the first observation, ending with the generation prompt (at most
        ``limit`` of them: see `_encode`)."""
        return _encode(self.tokenizer, _render(self.tokenizer, messages, True, self.specials), limit)

    def observation_ids(
        self, observation: Sequence[Mapping[str, Any]], *, stopped: bool, limit: int | None = None
    ) -> list[int]:
        """The ids to append after a generation: the end-of-turn token if the model
        did not produce one (``stopped=False``), the bridge, the observation as the
        template renders it, and the next generation prompt; at most ``limit`` of them
        (only that much of the text is tokenised: see `_encode`)."""
        full = _render(self.tokenizer, [*self._base, *observation], True, self.specials)
        if not full.startswith(self._head):
            raise ValueError("the chat template is not append-only: rendering more messages changed earlier text")
        ids = [] if stopped else [self.end_of_turn_id]
        rest = None if limit is None else max(limit - len(ids), 0)
        return (ids + _encode(self.tokenizer, full[len(self._head) :], rest))[:limit]

    def mismatch(self, messages: Sequence[Mapping[str, Any]], ids: Sequence[int]) -> int:
        """0 when ``ids`` (ending with the last generation) equal the one-shot
        tokenisation of ``messages`` (ending with that assistant turn), else the
        position of the first differing token + 1."""
        # Rendered with a message after the last turn, as the policy's ids are; the model
        # stops at end-of-turn, before the bridge and that message.
        text = _render(self.tokenizer, [*messages, _FOLLOWER], False, self.specials)
        if text.endswith(self._follower_text):
            text = text[: -len(self._follower_text)]
        one_shot = _encode(self.tokenizer, text)
        if list(ids) == one_shot:
            return 0
        pairs = zip(ids, one_shot, strict=False)
        return next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(ids), len(one_shot))) + 1


def build_tiny_tokenizer(corpus: Iterable[str] = (), *, vocab_size: int = 512, template: str = "chatml") -> Any:
    """A byte-level BPE tokenizer trained offline on ``corpus`` (any text is still
    encodable: bytes are the base alphabet). Digits are split one per token; the
    tool-call tags are one token each, as in Qwen's tokenizer, and stay in decoded text."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus) or [""], trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_CALL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=END_OF_TURN[template],
        pad_token="<|endoftext|>",
        bos_token=None,
        chat_template=TEMPLATES[template],
    )

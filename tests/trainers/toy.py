"""A text env whose reward varies even for a random model, and tiny model builders."""

from __future__ import annotations

import torch

from agentenv import Env, InfraError, State, Task, TaskSet, ToolCall, tool
from agentenv.trainers.tokens import build_tiny_tokenizer


class SayParser:
    """Every text is a call of `say`: a random model always produces a valid action."""

    format_hint = "Reply with text."

    def parse(self, action):
        text = action if isinstance(action, str) else str(action.get("content", ""))
        return [ToolCall(name="say", arguments={"text": text})]


class SayState(State):
    said: list[str] = []


class SayEnv(Env[SayState]):
    """Reward: the share of the letter 'a' in what was said. Tasks named 'const-*'
    always score 0.5; tasks named 'crash-*' fail as infrastructure."""

    state_type = SayState
    max_turns = 2
    instructions = "Say something."

    def __init__(self, tasks=None, **kwargs):
        super().__init__(tasks, parser=SayParser(), tool_prompt="none", **kwargs)

    def default_tasks(self) -> TaskSet:
        return TaskSet(
            [Task(id=f"t{i}", prompt=f"Task {i}.") for i in range(12)]
            + [Task(id=f"const-{i}", prompt=f"Task c{i}.") for i in range(4)]
        )

    @tool
    def say(self, text: str) -> str:
        """Say text."""
        if self.task.id.startswith("crash"):
            raise InfraError("the speaker caught fire")
        self.state.said.append(text)
        return "ok"

    def step_rewards(self, outcomes):
        return {"length": -0.001 * sum(len(s) for s in self.state.said[-1:])}

    def verify(self, task: Task) -> float:
        if task.id.startswith("const"):
            return 0.5
        text = "".join(self.state.said)
        return text.count("a") / max(len(text), 1)


def tiny_tokenizer():
    corpus = ["Say something.", "Task 1.", "ok", "aaaa bbbb abc"] * 5
    return build_tiny_tokenizer(corpus, vocab_size=300)


def tiny_model(tokenizer, seed: int = 0, *, hidden: int = 32, layers: int = 1, heads: int = 2, kv_heads: int = 1):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
        )
    )


def same_gradient(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float32 rounding on the gradient's own scale: a pass of another shape
    sums the embedding's many contributions in another order."""
    return torch.allclose(a, b, atol=1e-5 * max(1.0, float(b.abs().max())))

"""Log-probs of policy tokens, computed in chunks.

Only the positions whose next token is a policy token are projected onto the
vocabulary, and at most ``chunk_tokens`` of them at a time, each chunk under
activation checkpointing: the full-vocabulary logits of the whole batch never
exist at once, in the forward or the backward pass.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from agentenv.trainers.batch import TrainBatch
from agentenv.trainers.model import CausalLM

__all__ = ["policy_logprobs"]


def _chunk(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = (hidden @ weight.T).float()
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - lse
    with torch.no_grad():
        entropy = lse - (torch.softmax(logits, -1) * logits).sum(-1)
    return logp, entropy


def policy_logprobs(
    model: torch.nn.Module, batch: TrainBatch, *, temperature: float = 1.0, chunk_tokens: int = 1024
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logp, entropy)``: ``[B, T]`` log-probs of the targets (0 off the mask) and
    the per-token entropies of the masked positions (detached)."""
    if not isinstance(model, CausalLM):
        raise TypeError(
            f"expected a transformers causal LM (get_decoder, get_output_embeddings), got {type(model).__name__}"
        )
    decoder = model.get_decoder()
    hidden = decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    hidden = hidden.last_hidden_state if hasattr(hidden, "last_hidden_state") else hidden[0]
    weight = model.get_output_embeddings().weight
    selected = batch.mask.bool()
    h, targets = hidden[selected], batch.targets[selected]
    logps, entropies = [], []
    for start in range(0, h.shape[0], chunk_tokens):
        sl = slice(start, start + chunk_tokens)
        if torch.is_grad_enabled():
            lp, ent = checkpoint(_chunk, h[sl], weight, targets[sl], temperature, use_reentrant=False)
        else:
            lp, ent = _chunk(h[sl], weight, targets[sl], temperature)
        logps.append(lp)
        entropies.append(ent)
    flat = torch.cat(logps) if logps else h.new_zeros(0, dtype=torch.float32)
    logp = torch.zeros(batch.mask.shape, dtype=torch.float32, device=flat.device).masked_scatter(selected, flat)
    return logp, torch.cat(entropies) if entropies else flat.detach()

"""Log-probs of policy tokens, computed in chunks.

Only the positions whose next token is a policy token are projected onto the
vocabulary, and at most ``chunk_tokens`` of them at a time, each chunk under
activation checkpointing: the full-vocabulary logits of the whole batch never
exist at once, in the forward or the backward pass.

The projection is the model's own: its output head's forward (a bias included),
then what the model's forward does to the logits after it, read from its config:
``logit_scale`` (Cohere) and ``final_logit_softcapping`` (Gemma 2 and 3). So these
log-probs are those of the logits the sampler draws from. A family that changes
its logits some other way is not covered: compare with its forward pass first.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from agentenv.trainers.batch import TrainBatch
from agentenv.trainers.model import CausalLM

__all__ = ["policy_logprobs"]


def _chunk(
    hidden: torch.Tensor,
    head: torch.nn.Module,
    targets: torch.Tensor,
    temperature: float,
    scale: float | None,
    softcap: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float()
    if scale is not None:
        logits = logits * scale
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
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
    head = model.get_output_embeddings()
    config = getattr(model, "config", None)
    scale, softcap = getattr(config, "logit_scale", None), getattr(config, "final_logit_softcapping", None)
    selected = batch.mask.bool()
    h, targets = hidden[selected], batch.targets[selected]
    logps, entropies = [], []
    for start in range(0, h.shape[0], chunk_tokens):
        sl = slice(start, start + chunk_tokens)
        if torch.is_grad_enabled():
            lp, ent = checkpoint(_chunk, h[sl], head, targets[sl], temperature, scale, softcap, use_reentrant=False)
        else:
            lp, ent = _chunk(h[sl], head, targets[sl], temperature, scale, softcap)
        logps.append(lp)
        entropies.append(ent)
    flat = torch.cat(logps) if logps else h.new_zeros(0, dtype=torch.float32)
    logp = torch.zeros(batch.mask.shape, dtype=torch.float32, device=flat.device).masked_scatter(selected, flat)
    return logp, torch.cat(entropies) if entropies else flat.detach()

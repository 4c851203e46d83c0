"""Perplexity of a causal LM on windows of text, with the logits made a block of rows at a time.

    ppl = exp( (1/W) Σ_w −(1/(n−1)) Σ_i log p(x_{i+1} | x_≤i) )     over W windows of n tokens

Never n × V logits at once (Gemma-3's 262,144-word vocabulary: 16K × V floats would be 17 GB).
"""

from __future__ import annotations

import math

import torch

__all__ = ["LOGIT_ROWS", "perplexity", "window_nll"]

LOGIT_ROWS = 1024  # rows of logits held at once


@torch.no_grad()
def window_nll(model, ids) -> float:
    """Mean next-token NLL of one window ``ids`` (1, n), as ``model(ids, labels=ids).loss``."""
    h = model.model(input_ids=ids, use_cache=False).last_hidden_state                  # (1, n, d)
    cap = getattr(model.config, "final_logit_softcapping", None)
    total, count = 0.0, 0
    for a in range(0, ids.shape[1] - 1, LOGIT_ROWS):
        b = min(ids.shape[1] - 1, a + LOGIT_ROWS)
        logits = model.lm_head(h[:, a:b]).float()                                      # (1, b − a, V)
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        total += torch.nn.functional.cross_entropy(logits[0], ids[0, a + 1 : b + 1], reduction="sum").item()
        count += b - a
    return total / count


def perplexity(model, windows) -> float:
    """exp of the mean window NLL over ``windows`` [(1, n)]."""
    nll = [window_nll(model, ids) for ids in windows]
    return math.exp(sum(nll) / len(nll))

"""The per-row top-k oracle: the best any sparse attention with the same budget could keep (a bound, not a method).

Row i of every head keeps the k_i keys of largest score among j ≤ i (and i − j < W in a sliding layer),

    k_i = max(1, ⌈β·(i + 1)⌉),    Σ_i k_i ≈ β · n(n+1)/2   (β of the causal entries, as a plan's budget),

    out_i = Σ_{j ∈ K_i} softmax_{j ∈ K_i}(q_i·k_j · scaling) v_j,   K_i = top-k_i_{j ≤ i}(q_i·k_j).

Choosing K_i needs every score q_i·k_j, so this is O(n²) work: it tells how much of the gap to full
attention any support of β of the entries could close (band + columns, blocks, or anything else),
not how fast.  ``apply_oracle(model, beta)`` registers it as ``attn_implementation="attnlab-oracle"``;
rows go in blocks of ``ROW_BLOCK`` (never n × n at once).
"""

from __future__ import annotations

import math

import torch

from attnlab.masks import hidden

__all__ = ["NAME", "ROW_BLOCK", "topk_attention", "apply_oracle"]

NAME = "attnlab-oracle"
ROW_BLOCK = 256


def row_budget(beta: float, i: torch.Tensor) -> torch.Tensor:
    """k_i = max(1, ⌈β·(i + 1)⌉) for query positions i (long)."""
    return torch.clamp((beta * (i + 1).double()).ceil().long(), min=1)


@torch.no_grad()
def topk_attention(q, k, v, scaling: float, beta: float, window: int | None = None):
    """q: (B, H, n, d), k, v: (B, H, n, d) (GQA expanded) → (B, H, n, d): each row over its top-k_i causal keys."""
    B, H, n, _ = q.shape
    out = torch.empty_like(q[..., : v.shape[-1]])
    j = torch.arange(n, device=q.device)
    for i0 in range(0, n, ROW_BLOCK):
        i1 = min(n, i0 + ROW_BLOCK)
        i = torch.arange(i0, i1, device=q.device)[:, None]
        s = (q[:, :, i0:i1] @ k[:, :, :i1].transpose(-1, -2)) * scaling                  # (B, H, r, i1)
        s = s.masked_fill(hidden(i, j[None, :i1], window), float("-inf"))
        kk = row_budget(beta, i[:, 0])                                                     # (r,)
        top = torch.topk(s, int(kk.max()), dim=-1)                                         # (B, H, r, kmax)
        keep_rank = torch.arange(top.values.shape[-1], device=q.device)[None, :] < kk[:, None]   # (r, kmax)
        vals = top.values.masked_fill(~keep_rank, float("-inf"))
        a = torch.softmax(vals, -1)                                                        # (B, H, r, kmax)
        P = torch.zeros_like(s).scatter_(-1, top.indices, a)                               # (B, H, r, i1) sparse rows
        out[:, :, i0:i1] = P @ v[:, :, :i1]
    return out


def apply_oracle(model, beta: float):
    """Run every attention layer of ``model`` with the per-row top-k oracle at budget β; returns the model."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from attnlab.llm.plans.plan import check_budget

    beta = check_budget(beta)

    def oracle_attention(module, query, key, value, attention_mask=None, dropout: float = 0.0, scaling=None, sliding_window=None, **kwargs):
        # query: (B, H, n, d), key/value: (B, H_kv, m, d) → ((B, n, H, d), None)
        r = query.shape[1] // key.shape[1]
        kv = torch.arange(query.shape[1], device=key.device) // r
        scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
        window = int(sliding_window) if sliding_window else None
        if key.shape[2] != query.shape[2]:  # decoding: the oracle bounds the prefill; a new token reads the whole cache
            return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, sliding_window=sliding_window, **kwargs)
        out = topk_attention(query, key[:, kv], value[:, kv], scaling, beta, window)
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register(NAME, oracle_attention)
    model.set_attn_implementation(NAME)
    return model


def entries_kept(beta: float, n: int, window: int | None = None) -> float:
    """Σ_i min(k_i, reachable keys of row i) / (n(n+1)/2): the oracle's fraction of the causal entries."""
    i = torch.arange(n)
    reach = i + 1 if window is None else torch.clamp(i + 1, max=window)
    return float(torch.minimum(row_budget(beta, i), reach).sum()) / (n * (n + 1) / 2) if n else math.nan

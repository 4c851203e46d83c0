"""The per-row top-k oracle: the best any sparse attention with the same budget could keep (a bound, not a method).

Row i of every head keeps the k_i keys of largest score among j ≤ i (and i − j < W in a sliding layer),

    k_i = max(1, ⌈β·(i + 1)⌉),    Σ_i k_i ≈ β · n(n+1)/2   (β of the causal entries, as a plan's budget),

    out_i = Σ_{j ∈ K_i} softmax_{j ∈ K_i}(q_i·k_j · scaling) v_j,   K_i = top-k_i_{j ≤ i}(q_i·k_j).

|K_i| = k_i exactly (every key when fewer are visible); among keys tied with the k_i-th score, which are
kept is unspecified (any choice is a top-k_i set).  Choosing K_i needs every score q_i·k_j, so this is
O(n²) work: it tells how much of the gap to full attention any support of β of the entries could close
(band + columns, blocks, or anything else), not how fast.  ``apply_oracle(model, beta)`` registers it as
``attn_implementation="attnlab-oracle"``; rows go in blocks of ``ROW_BLOCK`` (never n × n at once), one
selection per block: the rows' budgets k_i are equalised by +∞ placeholders in their future entries.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from attnlab.masks import hidden

__all__ = ["NAME", "ROW_BLOCK", "topk_attention", "apply_oracle"]

NAME = "attnlab-oracle"
ROW_BLOCK = 128


def row_budget(beta: float, i: torch.Tensor) -> torch.Tensor:
    """k_i = max(1, ⌈β·(i + 1)⌉) for query positions i (long)."""
    return torch.clamp((beta * (i + 1).double()).ceil().long(), min=1)


def block_support(i0: int, i1: int, beta: float, window: int | None, device=None):
    """Rows i0 ≤ i < i1: (hid, pad, far, kmax); hid, pad (r, r) over keys i0 ≤ j < i1, far (r, i0) over j < i0.

    hid: what the model's mask hides on the diagonal square (j > i, or i − j ≥ W); far: the same left of it
    (None without a window: every earlier key is visible).  pad: the first p_i = kmax − k_i future entries of
    row i (j − i ≤ p_i), kmax = k_{i1−1}; filled with +∞ they make every row's kmax-th largest entry its
    k_i-th largest visible score, so one top-kmax selection serves the block.  Row i has i1 − 1 − i future
    entries and p_i ≤ ⌈β(i1 − 1 − i)⌉ ≤ i1 − 1 − i (β ≤ 1), so they always suffice.
    """
    i = torch.arange(i0, i1, device=device)[:, None]                                     # (r, 1)
    j = torch.arange(i0, i1, device=device)[None, :]                                     # (1, r)
    kk = row_budget(beta, i[:, 0])                                                       # (r,)
    kmax = int(kk.max())
    spare = (kmax - kk)[:, None]                                                         # (r, 1) placeholders p_i
    if bool((spare > i1 - 1 - i).any()):
        raise ValueError(f"oracle: budget β={beta} leaves rows {i0}..{i1 - 1} too few future entries to pad")
    far = None if window is None else hidden(i, torch.arange(i0, device=device)[None, :], window)
    return hidden(i, j, window), (j > i) & (j - i <= spare), far, kmax


def top_columns(s: torch.Tensor, kmax: int) -> torch.Tensor:
    """s: (..., m) → (..., kmax) long: the columns of each row's kmax largest entries, in no order.

    On the CPU NumPy's argpartition (a vectorised introselect, several times torch.topk's speed there) picks
    them; elsewhere torch.topk.  Among entries tied with the kmax-th, which are picked is unspecified.
    """
    m = s.shape[-1]
    if s.device.type == "cpu" and s.dtype in (torch.float32, torch.float64):
        cols = np.argpartition(s.numpy(), m - kmax, axis=-1)[..., m - kmax:]                  # (..., kmax)
        return torch.from_numpy(np.ascontiguousarray(cols))
    return torch.topk(s, kmax, dim=-1, sorted=False).indices


@torch.no_grad()
def topk_attention(q, k, v, scaling: float, beta: float, window: int | None = None):
    """q: (B, H, n, d), k, v: (B, H_kv, n, d), H = g·H_kv (head h reads kv head h // g) → (B, H, n, d_v).

    Per block of ``ROW_BLOCK`` query rows (the g heads of one kv head stacked as the rows of one product):

        S = q kᵀ · scaling,  hidden entries → −∞,  the placeholders ``pad`` → +∞   (B, H_kv, g·r, i1)
        K_i ∪ pad_i = the kmax largest entries of row i of S,   out_i = Σ_{j ∈ K_i} softmax_{K_i}(S_ij) v_j,

    the last sum a weighted bag of k_i rows of v per query (``embedding_bag``), never an n-wide row of weights.
    """
    B, H, n, d = q.shape
    Hkv, dv = k.shape[1], v.shape[-1]
    g = H // Hkv
    if g * Hkv != H:
        raise ValueError(f"oracle: {H} query heads do not group over {Hkv} key/value heads")
    qg = q.view(B, Hkv, g, n, d)                                                         # (B, H_kv, g, n, d)
    v_rows = v.reshape(B * Hkv * n, dv)                                                  # row (b·H_kv + h)·n + j
    first_row = (torch.arange(B * Hkv, device=q.device) * n).view(B, Hkv, 1, 1)           # (B, H_kv, 1, 1)
    out = q.new_empty(B, Hkv, g, n, dv)
    inf = float("inf")
    for i0 in range(0, n, ROW_BLOCK):
        i1 = min(n, i0 + ROW_BLOCK)
        r = i1 - i0
        hid, pad, far, kmax = block_support(i0, i1, beta, window, q.device)             # (r, r), (r, r), (r, i0)
        s = qg[:, :, :, i0:i1].reshape(B, Hkv, g * r, d) @ k[:, :, :i1].transpose(-1, -2)   # (B, H_kv, g·r, i1)
        s.mul_(scaling)
        s5 = s.view(B, Hkv, g, r, i1)
        s5[..., i0:].masked_fill_(hid, -inf).masked_fill_(pad, inf)
        if far is not None:
            s5[..., :i0].masked_fill_(far, -inf)
        cols = top_columns(s, kmax)                                                      # (B, H_kv, g·r, kmax)
        top = s.gather(-1, cols)
        a = torch.softmax(top.masked_fill_(top == inf, -inf), dim=-1)                   # placeholders: weight 0
        o = F.embedding_bag((cols + first_row).view(-1, kmax), v_rows, per_sample_weights=a.view(-1, kmax), mode="sum")
        out[:, :, :, i0:i1] = o.view(B, Hkv, g, r, dv)
    return out.view(B, H, n, dv)


def apply_oracle(model, beta: float):
    """Run every attention layer of ``model`` with the per-row top-k oracle at budget β; returns the model."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from attnlab.llm.plans.plan import check_budget

    beta = check_budget(beta)

    def oracle_attention(module, query, key, value, attention_mask=None, dropout: float = 0.0, scaling=None,
                         sliding_window=None, **kwargs):
        # query: (B, H, n, d), key/value: (B, H_kv, m, d) → ((B, n, H, d), None)
        scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
        window = int(sliding_window) if sliding_window else None
        if key.shape[2] != query.shape[2]:  # decoding: the oracle bounds the prefill; a new token reads the whole cache
            return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                          sliding_window=sliding_window, **kwargs)
        out = topk_attention(query, key, value, scaling, beta, window)                # GQA grouped inside
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register(NAME, oracle_attention)
    model.set_attn_implementation(NAME)
    return model


def entries_kept(beta: float, n: int, window: int | None = None) -> float:
    """Σ_i min(k_i, reachable keys of row i) / (n(n+1)/2): the oracle's fraction of the causal entries."""
    i = torch.arange(n)
    reach = i + 1 if window is None else torch.clamp(i + 1, max=window)
    return float(torch.minimum(row_budget(beta, i), reach).sum()) / (n * (n + 1) / 2) if n else math.nan

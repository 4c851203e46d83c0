"""Key blocks chosen per query block: the per-query part of a retrieval head's support (MInference's block-sparse
estimate, at blocks of b = ``BLOCK`` tokens).

A head with ``HeadPlan.blocks`` = K reads, beside its band and columns, for each block I_t of b queries the K
blocks J of b keys of largest pooled score:

    q̄_t = mean_{i ∈ I_t} q_i,   k̄_J = mean_{j ∈ J} k_j,   ŝ_tJ = q̄_t · k̄_J          (O((n/b)²·d) per head)
    B_t(x) = the K blocks J < t of largest ŝ_tJ that the band does not hold for every row of I_t
    S_h(i) = B_w(i) ∪ T_h ∪ ⋃_{J ∈ B_t(x)} J     for i ∈ I_t

Why: a static support keeps a head's band and a few columns on every row, and the rows that need far keys
change with the input.  Multi-key needles showed it (``.notes``, README *multi-key*): the rows of a later
distractor needle must see the earlier needles (the template repeats), in the heads that retrieve, or the
model copies a distractor's value.  Full rows there (every key) fix it, so does each row's own top-128; a
whole row of 64 queries pooled does not (the needle's 20 rows drown in it); blocks of 16 do.

``block_extras`` turns the choice into the chunked kernel's per-chunk extra keys (chunks of b queries), the
head's columns first; the kernel drops keys its band holds and reads a key a column already holds once.
"""

from __future__ import annotations

import torch

from attnlab.llm.plans.limits import BLOCK, BLOCKS_MAX  # b: tokens per block; K: key blocks per query block, at most

__all__ = ["BLOCK", "BLOCKS_MAX", "block_extras", "block_keys", "block_means", "top_blocks", "top_pooled_blocks"]


def top_blocks(q, k, w, K: int, b: int = BLOCK):
    """B_t(x): ``(B, H, T, K)`` key-block indices (−1: empty), T = ⌈n / b⌉ query blocks.

    q: (B, H, n, d_k) the heads' queries, k: (B, H, n, d_k) their keys (one KV head per query head, GQA
    resolved by the caller); w (H,) the heads' band half-widths.  A key block J is a candidate for query
    block t when it lies before the block (J < t) and some row of I_t does not reach all of J through its
    band: J·b < t·b + b − 1 − w (row t·b + b − 1 is the last of the block; its band starts at i − w).
    """
    return top_pooled_blocks(block_means(q, b), block_means(k, b), w, K, b)


def block_means(x, b: int = BLOCK):
    """x̄_t = mean_{i ∈ I_t} x_i: (B, H, n, d) at any strides → (B, H, ⌈n/b⌉, d) (the last block may be short).

    Reduced in the order x lies in memory: transformers' queries are (B, n, H, d) seen as (B, H, n, d), and averaging
    them head by head read them at a stride (SmolLM2's queries at 8K, one thread: 5.6 ms a layer;
    token by token 2.5 ms)."""
    B, H, n, d = x.shape
    T = -(-n // b)
    full = n // b
    tokens_outer = x.stride(2) > x.stride(1)                                              # (B, n, H, d) in memory
    y = x.transpose(1, 2) if tokens_outer else x                                          # the token axis: 1 or 2
    ax = 1 if tokens_outer else 2
    out = x.new_empty(B, T, H, d).transpose(1, 2) if tokens_outer else x.new_empty(B, H, T, d)
    o = out.transpose(1, 2) if tokens_outer else out
    if full:
        torch.mean(y.narrow(ax, 0, full * b).unflatten(ax, (full, b)), ax + 1, out=o.narrow(ax, 0, full))
    if T > full:
        o.select(ax, full).copy_(y.narrow(ax, full * b, n - full * b).mean(ax))
    return out


def top_pooled_blocks(q_bar, k_bar, w, K: int, b: int = BLOCK, choose=None):
    """``top_blocks`` from the block means: q_bar (B, H, T, d) of the heads' queries, k_bar (B, H, T, d) of their keys.

    choose: None (a top-k over each masked row), or a function (ŝ, w, K, b) → (B, H, T, K) making the same choice from
    the scores ŝ (B, H, T, T) — the native ``block_topk``, which scans each row's prefix of candidates only.
    """
    B, H, T, d = q_bar.shape
    s = q_bar @ k_bar.transpose(-1, -2)                                                  # (B, H, T, T): ŝ_tJ
    K = min(int(K), T)
    if K == 0:
        return torch.zeros(B, H, T, 0, dtype=torch.long, device=q_bar.device)
    if choose is not None:
        return choose(s, w, K, b)
    t = torch.arange(T, device=q_bar.device)
    w_ = torch.as_tensor(w, device=q_bar.device).view(1, H, 1, 1)
    ok = (t[None, :] < t[:, None]).view(1, 1, T, T) & (t.view(1, 1, 1, T) * b < t.view(1, 1, T, 1) * b + b - 1 - w_)
    s.masked_fill_(~ok, float("-inf"))                                                    # s is ours: in place
    top = torch.topk(s, K, dim=-1)
    return torch.where(torch.isfinite(top.values), top.indices, -1)


def block_keys(blocks, n: int, b: int = BLOCK):
    """The key positions of chosen blocks: blocks (..., K) (−1: empty) → (..., K·b), −1 where empty or beyond n."""
    keys = blocks[..., None] * b + torch.arange(b, device=blocks.device)                           # (..., K, b)
    return keys.masked_fill_((blocks < 0)[..., None] | (keys >= n), -1).flatten(-2)


def block_extras(blocks, cols, n: int, b: int = BLOCK):
    """The kernel's extras for chunks of b queries: columns T_h then the K·b keys of the chosen blocks.

    blocks (B, H, T, K) from ``top_blocks`` (−1: empty), cols (B, H, g) the heads' columns (−1: empty).
    Returns extra_idx (B, H, T, g + K·b) key positions and extra_own (B, H, T, 1, g + K·b) bool (an empty slot
    or a key beyond n is owned by no query).
    """
    B, H, T, K = blocks.shape
    g = cols.shape[-1]
    keys = block_keys(blocks, n, b)                                                      # (B, H, T, K·b), −1: none
    idx = torch.cat([cols.clamp_min(0)[:, :, None, :].expand(B, H, T, g), keys.clamp_min(0)], -1)
    own = torch.cat([(cols >= 0)[:, :, None, :].expand(B, H, T, g), keys >= 0], -1)
    return idx, own[:, :, :, None, :]

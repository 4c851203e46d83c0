"""The prefill's per-input selection of a layer as a few batched operations over every head at once (no loop over
heads, columns or blocks): the fast path's selection, whose results go to the kernel as index lists.

    â_h = softmax_{j ≤ p_r}(q_{h,p_r}·k_{g(h),j} · scaling)   the last nq = min(LAST_Q, n) queries of every head,
                                                               one product per KV head's r query heads stacked
    σ_h(j) = Σ_r â_h[r, j]                                     columns' mass (MInference's vertical estimate)
    T_h = T_fixed ∪ top_{D_h}{σ_h(j) : j < m − w_h − 1, j ∉ T_fixed}      (B, H, F + D), −1: empty
    ŝ_h(t, u) = q̄_{h,t}·k̄_{g(h),u}  (block means of b rows)
    U_h(t) = top_{K_h}{ŝ_h(t, u) : u < t, u·b < t·b + b − 1 − w_h}         (B, H, T, K), −1: empty
    B_h = the keys of U_h(T − 1) (block keys, read at decoding)            (B, H, K·b), −1: empty

The plan's side (w_h, D_h, fixed columns, K_h, and every mask that depends on n alone) is a ``HeadTable`` of tensors
built once per (layer, device, n); a head that reads no dynamic column or no block takes part in the same
operations and is masked out of their result.  Same choice as ``LayerPlan.choose_columns`` / ``choose_blocks`` up
to ties and rounding (they loop over KV heads and use the CPU's native kernels; ``tests/test_op_count.py`` holds the
two to the same sets).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from attnlab.llm.plans.plan import FULL

__all__ = ["HeadTable", "choose_blocks", "choose_columns", "head_table", "last_block_keys"]


class HeadTable(NamedTuple):
    """A layer's plan at one length n as tensors on one device, built once per (layer, device, n) (``head_table``):
    every constant of the selection, so that a prefill only computes what depends on its input."""

    fixed: torch.Tensor      # (H, F) long: each head's fixed columns < n, −1: pad
    col_off: torch.Tensor    # (H, n + 1) bool: the keys no dynamic column takes (the last rows' band, the fixed ones)
    dyn_slot: torch.Tensor   # (H, D) bool: slot x < D_h
    future: torch.Tensor     # (nq, nq) bool: key after query among the last nq
    count: torch.Tensor      # (T, 1) float: the rows of each block of b (the last may be short)
    before: torch.Tensor     # (T, T) bool: key block u < query block t
    first: torch.Tensor      # (T,) long: u·b, a key block's first key
    band_end: torch.Tensor   # (H, T, 1) long: t·b + b − 1 − w_h (a key block below it is not all in the band)
    blk_slot: torch.Tensor   # (H, 1, K) bool: slot x < K_h for a head reading key blocks at length n
    D: int
    K: int
    nq: int


def head_table(plan, device, n: int, last_q: int, b: int) -> HeadTable:
    """The ``HeadTable`` of a ``layer_plan.LayerPlan`` at length n on ``device`` (module docstring's constants)."""
    H, dev = plan.H, torch.device(device)
    F_ = max((len(f) for f in plan.fixed), default=0)
    fixed = torch.full((H, F_), -1, dtype=torch.long)
    for h, f in enumerate(plan.fixed):
        fixed[h, : len(f)] = torch.as_tensor([t if t < n else -1 for t in f], dtype=torch.long)
    j = torch.arange(n + 1)
    col_off = j >= (n - plan.w - 1).clamp_min(0)[:, None]                                   # the last rows' band
    col_off.scatter_(-1, torch.where(fixed >= 0, fixed, n), True)                          # the fixed columns; [n]: pad
    D = min(max(plan.dynamic, default=0), n)
    dyn_slot = torch.arange(D) < torch.tensor(plan.dynamic)[:, None]
    nq = min(last_q, n)
    T = -(-n // b)
    t = torch.arange(T)
    w_run = torch.tensor([plan.effective_w(h, n) for h in range(H)])
    full = (w_run == FULL) | (w_run >= n - 1)
    K = min(max(plan.blocks, default=0), T)
    reads = torch.where(full, 0, torch.tensor(plan.blocks))                                 # K_h; a full head: none
    band_end = t * b + b - 1 - torch.where(full, n, w_run)[:, None]                        # (H, T)
    future = torch.ones(nq, nq, dtype=torch.bool).triu(1)
    return HeadTable(fixed.to(dev), col_off.to(dev), dyn_slot.to(dev), future.to(dev),
                     (n - t * b).clamp_max(b)[:, None].float().to(dev), (t < t[:, None]).to(dev), (t * b).to(dev),
                     band_end[..., None].to(dev), (torch.arange(K) < reads[:, None])[:, None, :].to(dev), D, K, nq)


def choose_columns(q, k, scaling: float, table: HeadTable):
    """T_h of every head (module docstring): q (B, H, n, d_k), k (B, H_kv, n, d_k) → (B, H, F + D) long, −1: empty."""
    B, H, n, d = q.shape
    H_kv = k.shape[1]
    fixed = table.fixed.expand(B, -1, -1)                                                  # (B, H, F)
    if table.D == 0:
        return fixed
    nq = table.nq
    s = torch.matmul(q[:, :, n - nq :].reshape(B, H_kv, -1, d), k.mT).view(B, H, nq, n).float().mul_(scaling)
    s[..., n - nq :].masked_fill_(table.future, float("-inf"))
    mass = torch.softmax(s, -1).sum(-2)                                                    # (B, H, n) σ_h(j)
    score = F.pad(mass, (0, 1)).masked_fill_(table.col_off, -1.0)[..., :n]                 # band, fixed columns: −1
    top = torch.topk(score, table.D, -1)                                                   # (B, H, D), best first
    return torch.cat([fixed, torch.where((top.values >= 0) & table.dyn_slot, top.indices, -1)], -1)


def choose_blocks(q, k, table: HeadTable, n: int, b: int):
    """U_h(t) of every head with key blocks that is not full at length n (module docstring): q (B, H, n, d_k),
    k (B, H_kv, n, d_k) → (B, H, T, K) long, −1: empty (a head with K_h < K reads its first K_h)."""
    B, H, _, d = q.shape
    H_kv = k.shape[1]
    T = -(-n // b)
    if table.K == 0:
        return torch.full((B, H, T, 0), -1, dtype=torch.long, device=q.device)
    q_bar = F.pad(q, (0, 0, 0, T * b - n)).unflatten(2, (T, b)).sum(3) / table.count       # (B, H, T, d) q̄_t
    k_bar = F.pad(k, (0, 0, 0, T * b - n)).unflatten(2, (T, b)).sum(3) / table.count       # (B, H_kv, T, d) k̄_u
    s = torch.matmul(q_bar.reshape(B, H_kv, -1, d), k_bar.mT).view(B, H, T, T)             # ŝ_h(t, u)
    ok = table.before & (table.first < table.band_end)                                     # (H, T, T)
    top = torch.topk(s.masked_fill_(~ok, float("-inf")), table.K, -1)                      # (B, H, T, K)
    return torch.where(torch.isfinite(top.values) & table.blk_slot, top.indices, -1)

def last_block_keys(blocks, n: int, b: int):
    """B_h: the keys of the blocks each head's last query block chose, read at decoding: blocks (B, H, T, K) →
    (B, H, K·b) key positions, −1: empty or beyond n."""
    last = blocks[:, :, -1]                                                                # (B, H, K)
    keys = last[..., None] * b + torch.arange(b, device=blocks.device)                     # (B, H, K, b)
    return keys.masked_fill_((last < 0)[..., None] | (keys >= n), -1).flatten(-2)

"""Decoding by index: the cached slots each query reads, as a table of slot indices, and the softmax read through it.

For query i of head h (KV head g = h // r) the step reads S_h(i), a set of slots of g's cache (band, columns, pages
read back, chosen above the seam: ``decode_step``).  The seam receives it as indices, as paged attention does:

    slots[β, g, ρ, i, :] = (j₁, j₂, …, j_S)   the slots of S_h(i) in ascending order, −1 past the last, S = max |S_h(i)|

    out_i = Σ_{x : j_x ≥ 0} α_ix v_{j_x},   α_ix = softmax_x(q_i·k_{j_x} · scaling)   (∪ the keys of read-back pages)

Only the S slots are read: O(S·d) a query instead of O(L·d) over every cached slot.  The dense mask over the L slots
(``allowed_of``) is the reference the tests hold it to, and what a backend may read instead where S is close to L.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from attnlab.nn.softmax import masked_softmax

__all__ = ["PageTable", "allowed_of", "read_by_index", "table_of"]


class PageTable(NamedTuple):
    """slots (B, H_s, r, t, S) long: the cache slots each query of each query head reads, −1: none (module docstring)"""

    slots: torch.Tensor


def table_of(allowed, S: int | None = None) -> PageTable:
    """The page table of a mask over cached slots: allowed (B, H_s, r, t, L) bool → slots (B, H_s, r, t, S) (each
    row's slots in ascending order, −1 after them).  One scatter, no sort.  S: a bound on every row's count known on
    the host (the decoding step's: band + columns + pages read back), so that no value is read back from the device;
    None: the largest count, read back."""
    L = allowed.shape[-1]
    if S is None:
        S = int(allowed.sum(-1).max()) if allowed.numel() else 0
    S = min(S, L)
    rank = allowed.long().cumsum(-1) - 1                                                     # x of slot j in its row
    slots = torch.full((*allowed.shape[:-1], S + 1), -1, dtype=torch.long, device=allowed.device)
    j = torch.arange(L, device=allowed.device).expand(allowed.shape)
    return PageTable(slots.scatter_(-1, torch.where(allowed, rank.clamp_max(S), S), j)[..., :S])


def allowed_of(table: PageTable, L: int):
    """The dense mask a page table stands for: (B, H_s, r, t, L) bool (the reference; 1[j ∈ slots])."""
    slots = table.slots
    hit = torch.zeros(*slots.shape[:-1], L + 1, dtype=torch.bool, device=slots.device)
    return hit.scatter_(-1, torch.where(slots >= 0, slots, L), True)[..., :L]


def read_by_index(q, k, v, scaling: float, table: PageTable, pages=None):
    """out = softmax over the table's slots (∪ ``pages``, a ``backend.PageKeys``) · v, each slot gathered by index.

    q (B, H_s·r, t, d_k); k, v (B, H_s, L, ·) in any dtype (products and softmax in fp32); table.slots
    (B, H_s, r, t, S); pages (t = 1): keys (B, H_s·r, X, d_k), values, ok (B, H_s·r, X) → out (B, H_s·r, t, d_v).
    """
    B, H, t, d = q.shape
    H_s = k.shape[1]
    r = H // H_s
    slots = table.slots                                                                      # (B, H_s, r, t, S)
    S = slots.shape[-1]
    flat = slots.clamp_min(0).reshape(B, H_s, r * t * S, 1)
    k_s = k.gather(2, flat.expand(-1, -1, -1, d)).view(B, H_s, r, t, S, d)                   # the slots' keys
    v_s = v.gather(2, flat.expand(-1, -1, -1, v.shape[-1])).view(B, H_s, r, t, S, -1)
    s = (k_s.float() @ q.float().view(B, H_s, r, t, d, 1)).squeeze(-1) * scaling           # (B, H_s, r, t, S)
    ok = slots >= 0
    if pages is not None:                                                                  # the read-back's keys, t = 1
        s_p = (pages.keys.float() @ q.float().view(B, H, d, 1)).view(B, H_s, r, 1, -1) * scaling
        s = torch.cat([s, s_p], -1)
        ok = torch.cat([ok, pages.ok.view(B, H_s, r, 1, -1)], -1)
        v_s = torch.cat([v_s, pages.values.view(B, H_s, r, 1, -1, v.shape[-1])], -2)
    a = masked_softmax(s, ok)                                                                # a row with no slot: 0
    return (a[..., None, :] @ v_s.float()).squeeze(-2).view(B, H, t, -1).to(q.dtype)

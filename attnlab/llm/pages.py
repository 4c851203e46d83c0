"""Pages of keys summarised by their element-wise min and max (Quest), and a planned head's read-back of them.

Quest (Tang et al. 2024) cuts the keys into pages of ``page`` consecutive positions, each summarised by

    m_P = min_{j ∈ P} k_j,   M_P = max_{j ∈ P} k_j                     (element-wise, d_k values each)
    U_P(q) = Σ_d max(q_d · m_{P,d}, q_d · M_{P,d})  ≥  q·k_j  for every j ∈ P

(q_d·k_d ≤ max(q_d·m_d, q_d·M_d) for m_d ≤ k_d ≤ M_d), and a query reads the pages of largest U_P(q)
(``page_upper_bound``, ``quest_pages``; ``attnlab.llm.methods.quest`` runs Quest itself with them).

Read-back (``read_back``): a planned head h with ``pages`` = K > 0 (``Plan.pages``) reads, at a decoding
query q_i, its band and columns and the K pages of largest bound among the pages that hold a key it does
not read otherwise:

    O_h(i) = {j ≤ i} ∖ (B_{w_h}(i) ∪ T_h)                                 (the keys h reads otherwise not)
    C_h(i) = {P : P ∩ O_h(i) ≠ ∅}                                          (candidate pages)
    S_h(i) = B_{w_h}(i) ∪ T_h ∪ ⋃ {P ∩ O_h(i) : P ∈ top_K U_{h,P}(q_i) over C_h(i)}

with U_{h,P} Quest's bound over the keys of P ∩ O_h(i) alone (a sink column or the band does not inflate
the bound of the page around it).

The keys the plan's cache evicts are kept in a store (``kv_cache.PlanLayer``: off-device, as Quest and
InfiniGen keep them in host memory) and a step fetches only the chosen pages' keys; the page summaries
(2·d_k values per page and KV head) are what stays on the device with the resident cache.  Here the
summaries are recomputed at every step from the resident ∪ stored keys of O_h(i) (as ``methods.quest``
recomputes its own): the accuracy is the method's, the speed is not.  GQA: each query head picks its own pages from its KV
head's keys (as Quest does); a KV head fetches the union of its query heads' pages.
"""

from __future__ import annotations

import torch

__all__ = ["PAGE", "page_upper_bound", "quest_pages", "read_back"]

PAGE = 16  # tokens per page (Quest's default)


def page_upper_bound(q, k, k_pos, page: int):
    """U_P(q) for every page P of positions ``[P·page, (P+1)·page)``: q (B, H, n, d), k (B, H_kv, L, d), k_pos (B, H_kv, L) → (B, H, n, P).

    Empty slots (k_pos = −1) belong to no page; a page without a key has U = −inf.
    """
    B, H, n, d = q.shape
    H_kv = k.shape[1]
    P = int(k_pos.max()) // page + 1
    pid = torch.where(k_pos >= 0, k_pos // page, torch.full_like(k_pos, P))              # (B, H_kv, L), P: no page
    idx = pid[..., None].expand(*pid.shape, d)
    m = torch.full((B, H_kv, P + 1, d), float("inf"), dtype=k.dtype, device=k.device).scatter_reduce(2, idx, k, "amin")
    M = torch.full((B, H_kv, P + 1, d), float("-inf"), dtype=k.dtype, device=k.device).scatter_reduce(2, idx, k, "amax")
    m, M = m[:, :, :P], M[:, :, :P]                                                        # (B, H_kv, P, d)
    empty = torch.isinf(m).all(-1)                                                          # (B, H_kv, P)
    m, M = m.masked_fill(empty[..., None], 0), M.masked_fill(empty[..., None], 0)
    r = H // H_kv
    qg = q.view(B, H_kv, r, n, 1, d)
    U = torch.maximum(qg * m[:, :, None, None], qg * M[:, :, None, None]).sum(-1)           # (B, H_kv, r, n, P)
    U = U.masked_fill(empty[:, :, None, None, :], float("-inf"))
    return U.view(B, H, n, P)


def quest_pages(U, q_pos, page: int, pages: int, candidates=None):
    """Which pages each query reads: U (B, H, n, P), q_pos (n,) → (B, H, n, P) bool.

    Quest (``candidates`` None): the ``pages`` of largest U among the pages up to the query's, the current
    page always.  Read-back (``candidates`` (B, H, n, P) bool): the ``pages`` of largest U among the
    candidates alone (fewer if fewer are candidates), no page forced.
    """
    P = U.shape[-1]
    current = (q_pos // page).view(1, 1, -1, 1)                                            # (1, 1, n, 1)
    p = torch.arange(P, device=U.device).view(1, 1, 1, P)
    U = U.masked_fill(p > current, float("-inf"))                                           # no future page
    if candidates is None:
        U = U.masked_fill(p == current, float("inf"))                                       # the current one first
    else:
        U = U.masked_fill(~candidates, float("-inf"))
    top = torch.topk(U, min(pages, P), dim=-1).indices
    chosen = torch.zeros(U.shape, dtype=torch.bool, device=U.device).scatter_(-1, top, True)
    chosen &= p <= current
    return chosen if candidates is None else chosen & candidates


def read_back(q, k, k_pos, q_pos, allowed, reads, page: int, pages: int):
    """S_h(i) with read-back: ``allowed`` ∪ the ``pages`` best candidate pages of each reading head.

    Head h's summary of page P is over the keys of P it reads otherwise not, O_h(i) = {j ≤ i} ∖ (B_{w_h}(i) ∪ T_h)
    (a sink column or the band does not inflate the bound of the page around it), and reading P reads P ∩ O_h(i):

        U_{h,P}(q) = Σ_d max(q_d m_d, q_d M_d),  m, M = min, max of k_j over j ∈ P ∩ O_h(i)   (``page_upper_bound``)

    q (B, H, n, d) at q_pos (n,); k (B, H_kv, L, d) at k_pos (B, H_kv, L) (resident ∪ stored, −1: empty);
    allowed (B, H_kv, r, n, L): band ∪ columns (``LayerRunner.allowed``); reads (H,) bool: the heads that
    read back.  Returns (allowed' (B, H_kv, r, n, L), fetched (B, H_kv, L): the slots some query head reads
    only through its pages).  Memory: the keys once per query head and query row (decoding: n = 1).
    """
    B, H, n, d = q.shape
    H_kv, L = k.shape[1], k.shape[2]
    r = H // H_kv
    j = k_pos[:, :, None, None, :]                                                          # (B, H_kv, 1, 1, L)
    outside = (j >= 0) & (j <= q_pos.view(1, 1, 1, -1, 1)) & ~allowed                      # (B, H_kv, r, n, L): O_h(i)
    outside &= reads.to(k.device).view(1, H_kv, r, 1, 1)
    if not bool(outside.any()):
        return allowed, torch.zeros(B, H_kv, L, dtype=torch.bool, device=k.device)
    # one "KV head" per (query head, query row): its keys with the slots outside O_h(i) emptied (−1)
    own_pos = torch.where(outside, j, torch.full_like(j, -1)).reshape(B, H * n, L)         # (B, H·n, L)
    own_k = k[:, :, None, None].expand(B, H_kv, r, n, L, d).reshape(B, H * n, L, d)         # (B, H·n, L, d)
    U = page_upper_bound(q.reshape(B, H * n, 1, d), own_k, own_pos, page).view(B, H, n, -1)  # (B, H, n, P)
    P = U.shape[-1]
    chosen = quest_pages(U, q_pos, page, pages, U > float("-inf")).view(B, H_kv, r, n, P)  # candidates: a key in O_h(i)
    chosen = torch.cat([chosen, chosen.new_zeros(B, H_kv, r, n, 1)], -1)                   # slot P: no page
    pid = (k_pos // page).clamp(0, P)[:, :, None, None, :].expand(B, H_kv, r, n, L)        # (B, H_kv, r, n, L)
    read = torch.gather(chosen, -1, pid) & outside
    return allowed | read, read.any(3).any(2)

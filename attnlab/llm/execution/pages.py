"""Pages of keys summarised by their element-wise min and max (Quest), and a planned head's read-back of them.

Quest (Tang et al. 2024) cuts the keys into pages of ``page`` consecutive positions, each summarised by

    m_P = min_{j ∈ P} k_j,   M_P = max_{j ∈ P} k_j                     (element-wise, d_k values each)
    U_P(q) = Σ_d max(q_d · m_{P,d}, q_d · M_{P,d})  ≥  q·k_j  for every j ∈ P

(q_d·k_d ≤ max(q_d·m_d, q_d·M_d) for m_d ≤ k_d ≤ M_d), and a query reads the pages of largest U_P(q)
(``page_upper_bound``, ``quest_pages``; ``attnlab.llm.methods.quest`` runs Quest itself with them).

Read-back (``read_back``): a planned head h with ``pages`` = K > 0 (``Plan.pages``) reads, at a decoding
query q_i, its band and columns and the K pages of largest bound among the pages that hold a key it does
not read otherwise:

    O_h(i) = {j ≤ i} ∖ (B_{w_h}(i) ∪ C_h)                                 (the keys h reads otherwise not)
    R_h(i) = {P : P ∩ O_h(i) ≠ ∅}                                          (candidate pages)
    S_h(i) = B_{w_h}(i) ∪ C_h ∪ ⋃ {P ∩ O_h(i) : P ∈ top_K U_{h,P}(q_i) over R_h(i)}

with U_{h,P} Quest's bound over the keys of P that are not columns of h (C_h: a sink column does not make the page
around it every query's best; its own column is read anyway).

A split choice (``mean_pages`` = k ≤ K, ``Plan.mean_pages``): K − k pages by the bound, then the k best of the other
candidates by the mean key's score

    μ_{h,P}(q) = q·k̄_P,   k̄_P = (1/|P'|) Σ_{j ∈ P'} k_j                 (P' the keys of P that are not columns of h)

The bound ranks a page by its most extreme coordinates, the mean by its typical key: with wide heads (Gemma-3, d = 256)
the bound is loose and a page whose every key answers q (a stated value) ranks first by μ yet tens of pages down by U
(``benchmarks/page_ranking.py`` measures both on dev text).  The summaries keep Σ_{j ∈ P} k_j and |P| beside m, M.

The keys the plan's cache evicts are kept in a store (``kv_cache.PlanLayer``, on the cache's device: Quest keeps every
key on the GPU too; InfiniGen's move to host memory is not built) and a step fetches only the chosen pages' keys; the
page summaries (m, M and the key sum per page and KV head, 3·d values for 16 keys and values, and per query head those
of the few pages its columns touch: ``page_summaries``, made once after the prefill and folded as keys arrive,
``fold_keys``) stay on the device with the resident cache, so a step's choice costs O(P·d) per head, not a pass over
every key.  GQA: each query head picks its own pages from its KV head's keys (as Quest does); a KV head fetches the
union of its query heads' pages.  Without summaries (``read_back``'s ``summaries`` None: a decoding without a
``PlanCache``) they are made from the step's resident ∪ stored keys, the same values.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from attnlab.support import column_mask

__all__ = ["PAGE", "PageSummaries", "bound", "choose_pages", "fold_keys", "mean_score", "page_summaries",
           "page_upper_bound", "quest_pages", "read_back", "summary_bound", "summary_mean"]

PAGE = 16  # tokens per page (Quest's default)


class PageSummaries(NamedTuple):
    """A layer's page summaries (``page_summaries``): each KV head's, and per query head those of the pages its columns
    touch, without its columns.

    m, M:          (B, V, P, d) element-wise min / max of the keys of each page, for the V KV heads with a reading
                   query head (±inf: a page without a key)
    column_pages:  (B, H, C) the pages holding a column of a reading head h (−1: none)
    column_min, column_max: (B, H, C, d) their min / max without h's columns (±inf: no key left)
    row:           (H_kv,) each KV head's row in m, M (−1: none)
    s:             (B, V, P, d) Σ_{j ∈ P} k_j, the key sum of each page (the mean key's numerator)
    count:         (P,) float, |P|: the keys each page holds (every KV head holds every position)
    column_sum, column_count: (B, H, C, d), (B, H, C) the sum and number of the keys of h's column pages
                   without its columns
                   (s, count, column_sum, column_count None: a plan that chooses by the bound alone keeps no sums)
    """

    m: torch.Tensor
    M: torch.Tensor
    column_pages: torch.Tensor
    column_min: torch.Tensor
    column_max: torch.Tensor
    row: torch.Tensor
    s: torch.Tensor
    count: torch.Tensor
    column_sum: torch.Tensor
    column_count: torch.Tensor

    def of_heads(self, kv, hq) -> "PageSummaries":
        """The summaries of the KV heads ``kv`` (H_s,) and their query heads ``hq`` (H_s·r,): m, M one row per KV head
        of kv (a KV head without a reader: row 0's, never read), the column pages of hq."""
        rows = self.row[kv]
        at = rows.clamp_min(0)
        sums = ((None,) * 4 if self.s is None
                else (self.s[:, at], self.count, self.column_sum[:, hq], self.column_count[:, hq]))
        return PageSummaries(self.m[:, at], self.M[:, at], self.column_pages[:, hq], self.column_min[:, hq],
                             self.column_max[:, hq], rows, *sums)


def page_upper_bound(q, k, k_pos, page: int):
    """U_P(q) for every page P of positions ``[P·page, (P+1)·page)``: q (B, H, n, d), k (B, H_kv, L, d),
    k_pos (B, H_kv, L) → (B, H, n, P).

    Empty slots (k_pos = −1) belong to no page; a page without a key has U = −inf.
    """
    return bound(q, *_minmax(k, k_pos, page))


def _page_ids(k_pos, page: int, P: int):
    """Each key's page, k_pos (B, X, L) (−1: none) → (B, X, L); P (one past the last page) for an empty slot."""
    return torch.where(k_pos >= 0, k_pos // page, torch.full_like(k_pos, P))


def _minmax(k, k_pos, page: int, P: int | None = None):
    """m_P, M_P of the keys k (B, X, L, d) at k_pos (B, X, L) (−1: none) → (B, X, P, d) each; ±inf: a page without a
    key."""
    B, X, L, d = k.shape
    P = int(k_pos.max()) // page + 1 if P is None else P
    pid = _page_ids(k_pos, page, P)                                                         # (B, X, L), P: no page
    idx = pid[..., None].expand(*pid.shape, d)
    m = torch.full((B, X, P + 1, d), float("inf"), dtype=k.dtype, device=k.device).scatter_reduce(2, idx, k, "amin")
    M = torch.full((B, X, P + 1, d), float("-inf"), dtype=k.dtype, device=k.device).scatter_reduce(2, idx, k, "amax")
    return m[:, :, :P], M[:, :, :P]


def _page_stats(k, page: int, sums: bool = True):
    """m_P, M_P and Σ_{j∈P} k_j (None: not ``sums``) of keys k (B, X, n, d) at positions 0 … n − 1
    → (B, X, ⌈n/page⌉, d) each: ``_minmax`` with k_pos = arange(n), the pages being consecutive runs of keys — a
    reduction over a view (n/page, page) instead of a scatter per key."""
    B, X, n, d = k.shape
    full = n // page
    m = k.new_empty(B, X, -(-n // page), d)
    M, s = torch.empty_like(m), (torch.empty_like(m) if sums else None)
    if full:
        pages = k[:, :, : full * page].unflatten(2, (full, page))                        # (B, X, full, page, d): a view
        torch.amin(pages, 3, out=m[:, :, :full])
        torch.amax(pages, 3, out=M[:, :, :full])
        if sums:
            torch.sum(pages, 3, out=s[:, :, :full])
    if n > full * page:                                                                  # the last page, short
        m[:, :, full] = k[:, :, full * page :].amin(2)
        M[:, :, full] = k[:, :, full * page :].amax(2)
        if sums:
            s[:, :, full] = k[:, :, full * page :].sum(2)
    return m, M, s


def _sums(k, k_pos, page: int, P: int):
    """Σ_{j∈P} k_j and |P| of the keys k (B, X, L, d) at k_pos (B, X, L) (−1: none) → (B, X, P, d), (B, X, P)."""
    B, X, L, d = k.shape
    pid = _page_ids(k_pos, page, P)                                                         # (B, X, L), P: no page
    s = k.new_zeros(B, X, P + 1, d).scatter_add_(2, pid[..., None].expand(*pid.shape, d), k)
    c = k.new_zeros(B, X, P + 1).scatter_add_(2, pid, torch.ones_like(k[..., 0]))
    return s[:, :, :P], c[:, :, :P]


def mean_score(q, s, count):
    """μ_P(q) = q·s_P / |P|, the score of a page's mean key: q (B, H, n, d), s (B, H_kv, P, d) the key sums of each KV
    head's pages (GQA as in ``bound``), count (P,) or (B, H_kv, P) their keys → (B, H, n, P); −inf for a page without
    a key."""
    B, H, n, d = q.shape
    H_kv, P = s.shape[1], s.shape[2]
    count = count.expand(B, H_kv, P) if count.dim() == 1 else count
    mu = (q.reshape(B, H_kv, (H // H_kv) * n, d) @ s.transpose(-1, -2)) / count.clamp_min(1)[:, :, None, :]
    return mu.masked_fill((count == 0)[:, :, None, :], float("-inf")).view(B, H, n, P)


def bound(q, m, M):
    """U_P(q) = Σ_d max(q_d m_d, q_d M_d) = q⁺·M + q⁻·m (m ≤ M): q (B, H, n, d), m, M (B, H_kv, P, d) the pages of
    each KV head (GQA: query head h reads KV head h // (H / H_kv)) → (B, H, n, P); −inf for a page without a key."""
    B, H, n, d = q.shape
    H_kv, P = m.shape[1], m.shape[2]
    empty = torch.isinf(m).all(-1)                                                          # (B, H_kv, P)
    m, M = m.masked_fill(empty[..., None], 0), M.masked_fill(empty[..., None], 0)
    qg = q.reshape(B, H_kv, (H // H_kv) * n, d)                                             # a KV head's query rows
    U = qg.clamp_min(0) @ M.transpose(-1, -2) + qg.clamp_max(0) @ m.transpose(-1, -2)      # (B, H_kv, r·n, P)
    return U.masked_fill(empty[:, :, None, :], float("-inf")).view(B, H, n, P)


def page_summaries(k, columns, kv_of, page: int, reads=None, sums: bool = True):
    """The page summaries after a prefill, each query head's over its KV head's keys without its own columns C_h (a
    sink does not make its page every query's best; a head reads its columns anyway), stored sparsely: the KV head's
    summaries over every key, and for each query head only the pages its columns touch.

    k (B, H_kv, n, d) at positions 0 … n − 1, columns (B, H, g) (−1: empty), kv_of (H,), reads (H,) bool the heads that
    read back (None: all) → ``PageSummaries``: m, M (B, V, ⌈n / page⌉, d) for the V KV heads with a reading query
    head, row (H_kv,) each KV head's row there (−1: none); column_pages (B, H, C) the pages holding a column of a
    reading head h (−1: none), column_min, column_max (B, H, C, d) their min / max without h's columns (±inf: no key
    left); s (B, V, P, d), count (P,) each page's key sum and size, column_sum, column_count those of h's column pages
    without its columns (the mean key, ``summary_mean``; None without ``sums``: a plan choosing by the bound alone).
    3·d values a page and KV head (2·d without the sums: 1/16 of its keys and values) and as many per page a head's
    columns touch (``summary_bound`` reads them as one summary per query head)."""
    B, H_kv, n, d = k.shape
    H = kv_of.shape[0]
    P = -(-n // page)
    reads = torch.ones(H, dtype=torch.bool) if reads is None else reads.cpu()
    read = torch.zeros(H_kv, dtype=torch.bool).index_fill_(0, kv_of.cpu()[reads], True)    # KV heads with a reader
    row = torch.cumsum(read.long(), 0) - 1
    row = torch.where(read, row, -1).to(k.device)
    sub = torch.nonzero(read).view(-1).to(k.device)
    m, M, s = _page_stats(k[:, sub], page, sums)                                            # (B, V, P, d) each
    count = (torch.bincount(torch.arange(n, device=k.device) // page, minlength=P).to(k.dtype)   # (P,) |P|
             if sums else None)
    cols = (columns if columns is not None else torch.zeros(1, H, 0, dtype=torch.long)).to(k.device).expand(B, H, -1)
    cols = torch.where(reads.to(k.device).view(1, H, 1) & (cols < n), cols, -1)             # a reading head's, < n
    is_col = column_mask(cols, n)                                                           # (B, H, n)
    touched = column_mask(torch.where(cols >= 0, cols // page, -1), P)                      # (B, H, P) its column pages
    C = int(touched.sum(-1).max()) if touched.numel() else 0
    # (B, H, C) touched pages first
    order = torch.sort((~touched).to(torch.int8), dim=-1, stable=True).indices[..., :C]
    pc = torch.where(torch.gather(touched, -1, order), order, -1)
    j = pc.clamp_min(0)[..., None] * page + torch.arange(page, device=k.device)             # (B, H, C, page) positions
    keep = (pc >= 0)[..., None] & (j < n)
    keep &= ~torch.gather(is_col, -1, j.clamp_max(n - 1).flatten(2)).view_as(j)
    kj = k[torch.arange(B, device=k.device).view(B, 1, 1), kv_of.to(k.device).view(1, H, 1),
           j.clamp_max(n - 1).flatten(2)]
    kj = kj.view(B, H, C, page, d)                                                          # their keys
    mc = kj.masked_fill(~keep[..., None], float("inf")).amin(3)
    Mc = kj.masked_fill(~keep[..., None], float("-inf")).amax(3)
    if not sums:
        return PageSummaries(m, M, pc, mc, Mc, row, None, None, None, None)
    sc = kj.masked_fill(~keep[..., None], 0.0).sum(3)                                       # (B, H, C, d)
    return PageSummaries(m, M, pc, mc, Mc, row, s, count, sc, keep.sum(3).to(k.dtype))


def _own_column_pages(x, q, pc, P: int, score, *own):
    """x (B, H, n, P), a page score of each KV head's summaries, with the pages head h's columns touch (pc (B, H, C),
    −1: none) scored instead on h's own summaries ``own`` (B, H, C, ·) by ``score`` (``bound`` or ``mean_score``): each
    query head its own "KV head" over its column pages (−inf where every key of the page is a column)."""
    if not pc.shape[-1]:
        return x
    B, H, n, d = q.shape
    C = pc.shape[-1]
    xc = score(q.reshape(B * H, 1, n, d), *(y.reshape(B * H, 1, *y.shape[2:]) for y in own)).view(B, H, n, C)
    at = torch.where((pc >= 0) & (pc < P), pc, P)[:, :, None, :].expand(B, H, n, -1)
    return torch.cat([x, x.new_empty(B, H, n, 1)], -1).scatter_(-1, at, xc)[..., :P]


def summary_bound(q, summaries, P: int):
    """U_{h,P}(q) from ``page_summaries``' parts (of these query heads and their KV heads: m, M one row per KV head):
    q (B, H, n, d) → (B, H, n, P) for the pages 0 … P − 1 — the KV head's bound, replaced on the pages head h's columns
    touch by the bound without them."""
    U = bound(q, summaries.m[:, :, :P], summaries.M[:, :, :P])                              # (B, H, n, P)
    return _own_column_pages(U, q, summaries.column_pages, P, bound, summaries.column_min, summaries.column_max)


def summary_mean(q, summaries, P: int):
    """μ_{h,P}(q) from ``page_summaries``' parts, as ``summary_bound`` reads U: q (B, H, n, d) → (B, H, n, P), the KV
    head's mean key replaced on the pages head h's columns touch by the mean without them."""
    mu = mean_score(q, summaries.s[:, :, :P], summaries.count[:P])                           # (B, H, n, P)
    return _own_column_pages(mu, q, summaries.column_pages, P, mean_score, summaries.column_sum, summaries.column_count)


def fold_keys(summaries, k_new, start: int, page: int):
    """``page_summaries``' parts with keys k_new (B, H_kv, t, d) at positions start … start + t − 1 folded in (pages
    appended; a new key is no column: it joins a head's column pages too).  The pages' m, M, sums and counts are folded
    in place (a decoding step touches one page of each: no copy of the others); what ``summaries`` held is changed."""
    m, M, pc, mc, Mc, row, s, count, sc, cc = summaries
    k_all, k_new = k_new, k_new[:, row >= 0]                                               # the KV heads with summaries
    B, H_kv, P, d = m.shape
    H, t = pc.shape[1], k_new.shape[2]
    P2 = -(-(start + t) // page)
    if P2 > P:
        m = torch.cat([m, m.new_full((B, H_kv, P2 - P, d), float("inf"))], 2)
        M = torch.cat([M, M.new_full((B, H_kv, P2 - P, d), float("-inf"))], 2)
        if s is not None:
            s = torch.cat([s, s.new_zeros(B, H_kv, P2 - P, d)], 2)
            count = torch.cat([count, count.new_zeros(P2 - P)])
    pages = torch.arange(start, start + t, device=k_new.device) // page                    # (t,)
    idx = pages.view(1, 1, t, 1).expand(B, H_kv, t, d)
    m.scatter_reduce_(2, idx, k_new, "amin")
    M.scatter_reduce_(2, idx, k_new, "amax")
    if s is not None:
        s.scatter_add_(2, idx, k_new)
        count.index_add_(0, pages, torch.ones(t, dtype=count.dtype, device=count.device))
    # a column page still filling (the prefill's last, partial)
    if pc.shape[-1] and bool((pc[..., None] == pages).any()):
        kq = k_all.repeat_interleave(H // k_all.shape[1], 1)                               # (B, H, t, d)
        hit = (pc[..., None] == pages).to(k_new.dtype)                                     # (B, H, C, t)
        inf = torch.tensor(float("inf"), dtype=k_new.dtype, device=k_new.device)
        lo = torch.where(hit[..., None] > 0, kq[:, :, None], inf).amin(3)                  # (B, H, C, d)
        hi = torch.where(hit[..., None] > 0, kq[:, :, None], -inf).amax(3)
        mc, Mc = torch.minimum(mc, lo), torch.maximum(Mc, hi)
        if sc is not None:
            sc, cc = sc + hit @ kq, cc + hit.sum(-1)                                       # (B, H, C, d), (B, H, C)
    return PageSummaries(m, M, pc, mc, Mc, row, s, count, sc, cc)


def quest_pages(U, q_pos, page: int, pages: int, candidates=None, mu=None, mean_pages: int = 0):
    """Which pages each query reads: U (B, H, n, P), q_pos (n,) → (B, H, n, P) bool.

    Quest (``candidates`` None): the ``pages`` of largest U among the pages up to the query's, the current
    page always.  Read-back (``candidates`` (B, H, n, P) bool): the ``pages`` best candidates alone (fewer if fewer
    are candidates), no page forced — by U, or with ``mean_pages`` = k > 0 and ``mu`` the mean-key scores (B, H, n, P)
    K − k by U and k by μ (``choose_pages``).
    """
    P = U.shape[-1]
    current = (q_pos // page).view(1, 1, -1, 1)                                            # (1, 1, n, 1)
    p = torch.arange(P, device=U.device).view(1, 1, 1, P)
    if candidates is not None:
        return choose_pages(U, mu, candidates & (p <= current), pages, mean_pages)
    U = U.masked_fill(p > current, float("-inf"))                                           # no future page
    U = U.masked_fill(p == current, float("inf"))                                           # the current one first
    top = torch.topk(U, min(pages, P), dim=-1).indices
    chosen = torch.zeros(U.shape, dtype=torch.bool, device=U.device).scatter_(-1, top, True)
    return chosen & (p <= current)


def choose_pages(U, mu, candidates, pages: int, mean_pages: int = 0):
    """The read-back's choice among ``candidates`` (…, P) bool: the K − k of largest bound U, then the k of largest
    mean-key score μ among the candidates left (K = ``pages``, k = ``mean_pages``; μ unused for k = 0) → (…, P) bool.
    A page without a key (U or μ = −inf) is never chosen."""
    P = U.shape[-1]

    def top(score, ok, count):
        if count <= 0:
            return torch.zeros_like(ok)
        t = torch.topk(score.masked_fill(~ok, float("-inf")), min(count, P), dim=-1)
        return torch.zeros_like(ok).scatter_(-1, t.indices, torch.isfinite(t.values)) & ok

    chosen = top(U, candidates, pages - mean_pages)
    if mean_pages:
        chosen |= top(mu, candidates & ~chosen, mean_pages)
    return chosen


def read_back(q, k, k_pos, q_pos, allowed, reads, page: int, pages: int, columns, summaries=None, mean_pages: int = 0):
    """S_h(i) with read-back: ``allowed`` ∪ the ``pages`` best candidate pages of each reading head (``mean_pages`` of
    them by the mean key's score, ``choose_pages``).

    Head h's candidates are the pages holding a key it reads otherwise not, O_h(i) = {j ≤ i} ∖ (B_{w_h}(i) ∪ C_h),
    ranked by U_{h,P}(q) over the page's keys that are not columns of h; reading P reads P ∩ O_h(i).

    q (B, H, n, d) at q_pos (n,); k (B, H_kv, L, d) at k_pos (B, H_kv, L) (resident ∪ stored, −1: empty);
    allowed (B, H_kv, r, n, L): band ∪ columns (``LayerRunner.allowed``); reads (H,) bool: the heads that
    read back; columns (B, H_kv, r, L) bool: the slots that are columns of each query head (``column_flags``);
    summaries: ``page_summaries``' parts of these query heads and KV heads (P' ≥ the pages of k_pos), or None: made here
    from the step's keys, each head's columns left out (the same values: every key is resident or stored).
    Returns (allowed' (B, H_kv, r, n, L), page slots (B, H_kv, L): the slots some query head reads only through its
    pages).
    """
    B, H, n, d = q.shape
    H_kv, L = k.shape[1], k.shape[2]
    r = H // H_kv
    j = k_pos[:, :, None, None, :]                                                          # (B, H_kv, 1, 1, L)
    outside = (j >= 0) & (j <= q_pos.view(1, 1, 1, -1, 1)) & ~allowed                      # (B, H_kv, r, n, L): O_h(i)
    outside &= reads.to(k.device).view(1, H_kv, r, 1, 1)
    if not bool(outside.any()):
        return allowed, torch.zeros(B, H_kv, L, dtype=torch.bool, device=k.device)
    P = int(k_pos.max()) // page + 1
    mu = None
    if summaries is None:   # from the step's keys: each query head's pages without the slots its columns hold
        own = torch.where(columns, -1, k_pos[:, :, None, :]).reshape(B, H, L)               # (B, H, L)
        k_h = k[:, :, None].expand(B, H_kv, r, L, d).reshape(B, H, L, d)
        U = bound(q.reshape(B * H, 1, n, d),
                  *(x.reshape(B * H, 1, P, d) for x in _minmax(k_h, own, page, P))).view(B, H, n, P)
        if mean_pages:
            s, c = _sums(k_h, own, page, P)                                                 # (B, H, P, d), (B, H, P)
            mu = mean_score(q.reshape(B * H, 1, n, d), s.reshape(B * H, 1, P, d),
                            c.reshape(B * H, 1, P)).view(B, H, n, P)
    else:
        U = summary_bound(q, summaries, P)                                                  # (B, H, n, P)
        mu = summary_mean(q, summaries, P) if mean_pages else None
    pid = (k_pos // page).clamp(0, P)[:, :, None, None, :].expand(B, H_kv, r, n, L)        # (B, H_kv, r, n, L), P: none
    cand = (torch.zeros(B, H_kv, r, n, P + 1, dtype=torch.bool, device=k.device)
            .scatter_(-1, torch.where(outside, pid, P), True))
    chosen = (quest_pages(U, q_pos, page, pages, cand[..., :P].reshape(B, H, n, P), mu, mean_pages)
              .view(B, H_kv, r, n, P))
    chosen = torch.cat([chosen, chosen.new_zeros(B, H_kv, r, n, 1)], -1)                   # slot P: no page
    read = torch.gather(chosen, -1, pid) & outside
    return allowed | read, read.any(3).any(2)

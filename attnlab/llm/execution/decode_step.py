"""A layer's decoding step under its plan, top to bottom (``decode_step``): one input's state, the cache's parts, the
keys each query head reads there, the backend's softmax, the parts merged, the cache compacted.

A step's query i of head h (KV head g = h // r) reads

    S_h(i) = B_{w_h}(i) ∪ C_h ∪ ⋃ {P ∩ O_h(i) : P ∈ top_K U_{h,P}(q_i)}      (the last term with read-back only:
                                                                   O_h(i) = {j ≤ i} ∖ (B_{w_h}(i) ∪ C_h), ``pages``)

    1. state      the input's ``InputState``, owned by its cache layer (``PlanLayer.state``): C_h = T_h ∪ B_h ∪ V_h,
                  the decoding columns its own prefill chose (``prefill``), as flags on the cache's slots
                  (``column_flags``, once per prefill)
    2. parts      the cache's KV heads, as many parts as lengths (``kv_cache.Part``: a split layer's slabs; read-back:
                  the resident slots with the store beside them)
    3. scores     per part and query head: the band B_{w_h}(i) = {j : i − w_h ≤ j ≤ i} (w_h = FULL for a full head or
                  a retrieval tail without a vote: every key) ∪ C_h, softmax over the chosen slots, handed to the seam
                  as a page table of slot indices (``page_table``): ``AttentionBackend.decode``; a backend with a fused
                  step (the CPU's native C step) runs 3–4 in one call instead (``AttentionBackend.decode_fused``)
    4. pages      read-back (``Plan.pages`` = K): the K pages of largest Quest bound U_{h,P}(q_i) among those holding a
                  key h reads otherwise not (``pages``; ``Plan.mean_pages`` = k of them by the mean key's score
                  μ_{h,P}(q_i) instead), gathered from the store by position (``decode_read_back``)
    5. merge      each part's query heads' rows into one output (B, H, n, d_v) (``decode_parts``)
    6. keep       every ``EVICT_EVERY`` tokens (and right after the prefill) the cache keeps the slots some later query
                  still reads (``keep``, the eviction decision) and drops or stores the rest (``compact``)

Method runners change a step by overriding ``decode`` (3), ``decode_parts`` (3–5) or ``keep`` (6).
"""

from __future__ import annotations

import torch

from attnlab.llm.execution.backend import PageKeys
from attnlab.llm.execution.layer_plan import LayerPlan
from attnlab.llm.execution.page_table import table_of
from attnlab.llm.execution.pages import choose_pages, read_back, summary_bound, summary_mean
from attnlab.llm.plans.plan import FULL
from attnlab.masks import near, visible
from attnlab.support import column_mask

__all__ = ["RAGGED", "DecodeStep", "compact", "decode_step"]

RAGGED = 1.0625    # a layer's cache splits by KV head when padding them to one length would hold > 1/16 more slots


def decode_step(runner, layer, q, scaling):
    """One decoding step of a layer over its ``kv_cache.PlanLayer`` ``layer`` (the keys of q already appended):
    q (B, H, n, d_k) at the positions seen − n … seen − 1 → (B, H, n, d_v) (module docstring, steps 1–6)."""
    if layer.state is None:   # keys put in without a prefill of this runner (a reused full-attention prefix): none
        layer.state = runner.new_state()
    state = layer.state                                                          # 1. the input's own state
    n = q.shape[2]
    q_pos = torch.arange(layer.seen - n, layer.seen, device=q.device)
    parts = layer.parts(resident=bool(runner.pages) and n == 1)                  # 2. the cache's parts
    out, fetched = runner.decode_parts(q, parts, scaling, q_pos, state, layer.summaries)   # 3–5. scores, pages, merge
    if runner.pages:
        layer.count_read(fetched)
    if layer.due():
        compact(runner, layer, state)                                            # 6. keep
    return out


def compact(runner, layer, state) -> None:
    """Step 6: the cache ``layer`` keeps the slots ``runner.keep`` says some later query of the input (``state``) still
    reads; read-back stores the others.  At the first compaction a layer whose KV heads keep numbers of slots more than
    ``RAGGED`` apart splits by KV head first (``PlanLayer.split``: no padding to the longest)."""
    store = bool(runner.pages)
    if layer.evicted_at is None and len(layer.slabs) == 1:
        keep = runner.keep(layer.positions, layer.seen, state, layer.flags)   # (B, H_kv, L), once: it may consume state
        resident = keep.sum(-1).amax(0)                                       # (H_kv,) slots each KV head keeps
        if int(resident.max()) * len(resident) > RAGGED * int(resident.sum()):
            layer.split(runner.whole_kv())
            layer.compact(lambda slab: keep[:, slab.kv.to(keep.device)], store)
        else:
            layer.evict(keep, store)
    else:
        layer.compact(lambda slab: runner.keep(slab.positions, layer.seen, state, slab.flags,
                                               slab.kv if len(layer.slabs) > 1 else None),
                      store)


class DecodeStep(LayerPlan):
    """The decoding step's parts of one layer's runner (``LayerRunner`` = ``prefill.PrefillStep`` + ``DecodeStep``);
    ``decode_step`` runs them in order."""

    def column_flags(self, k_pos, state, kv=None):
        """Which cached slots are decoding columns C_h of each query head (``state``: the input's ``InputState``):
        k_pos (B, H_s, L) → (B, H_s, r, L) bool, r = H / H_kv.

        ``kv`` (H_s,): the KV heads of k_pos (None: all, in order).  Computed once per prefill (``PlanLayer.flags``
        then carries them through decoding and eviction).
        """
        B, H_s, L = k_pos.shape
        r = self.H // self.H_kv
        flags = torch.zeros(B, H_s * r, L, dtype=torch.bool, device=k_pos.device)
        columns = state.decode_columns
        if self.sliding is None and columns is not None and columns.shape[-1]:
            hq = self.query_heads(kv).to(columns.device)
            cols = columns[:, hq].to(k_pos.device).expand(B, -1, -1)                       # (B, H_s·r, g), −1: empty
            pos = k_pos.repeat_interleave(r, dim=1)                                        # (B, H_s·r, L)
            size = int(pos.max()) + 1 if pos.numel() else 1                                # positions 0 … size − 1
            table = column_mask(cols, size)                                                # 1[j ∈ C_h] by position
            flags = table.gather(-1, pos.clamp_min(0)) & (pos >= 0)                        # O(L + g) a head, not O(L·g)
        return flags.view(B, H_s, r, L)

    def allowed(self, q_pos, k_pos, flags, kv=None):
        """S_h(i) over cached keys: q_pos (n,), k_pos (B, H_s, L) (−1: empty slot) → (B, H_s, r, n, L) bool.

        ``flags`` (B, H_s, r, L): the decoding-column slots of each query head (``column_flags``);
        ``kv`` (H_s,): the KV heads of k_pos (None: all).
        """
        B, H_s, L = k_pos.shape
        r = self.H // self.H_kv
        i = q_pos.view(1, 1, 1, -1, 1)
        j = k_pos[:, :, None, None, :]                                                     # (B, H_s, 1, 1, L)
        w = self.per_kv(self.w_read, kv).to(k_pos.device).view(1, H_s, r, 1, 1)
        return (j >= 0) & visible(i, j, self.sliding) & ((w == FULL) | near(i, j, w) | flags[:, :, :, None, :])

    def decode(self, q, k, v, scaling, q_pos, k_pos, state, flags=None, kv=None, summaries=None):
        """q: (B, H_s·r, n, d_k) at positions q_pos (n,); k, v: (B, H_s, L, ·) at k_pos (B, H_s, L), of the input whose
        ``InputState`` is ``state`` → (B, H_s·r, n, d_v); with read-back, the slots read through pages go to
        ``state.page_slots``.

        ``flags``: the decoding-column slots (``column_flags``; made from ``state`` if None); ``kv`` (H_s,): which KV
        heads k, v are, q holding their query heads (None: all of them); ``summaries``: the read-back's page summaries
        of these heads (``pages.page_summaries``; None: made from k).
        """
        flags = self.column_flags(k_pos, state, kv) if flags is None else flags           # (B, H_s, r, L)
        backend = self.backend_of(q)
        if not self.pages and q.shape[2] == 1:   # band ∪ columns: the backend's fused step where it has one
            w = self.per_kv(self.w_read, kv)                                              # (H_s, r)
            fused = backend.decode_fused(q, k, v, k_pos, flags, w, torch.zeros(w.shape, dtype=torch.bool), None, None,
                                         int(q_pos[-1]), sliding=self.sliding, page=self.page, pages=0, scale=scaling)
            if fused is not None:
                return fused[0]
        allowed = self.allowed(q_pos, k_pos, flags, kv)                                    # (B, H_s, r, n, L)
        if self.pages:
            reads = self.reads if kv is None else self.per_kv(self.reads, kv).reshape(-1)
            allowed, state.page_slots = read_back(q, k, k_pos, q_pos, allowed, reads, self.page, self.pages, flags,
                                               summaries, self.mean_pages)
        table = table_of(allowed, self.reads_at_most(kv, k.shape[2], state, device=q.device))   # the page table
        return backend.decode(q, k, v, scaling, table)

    def reads_at_most(self, kv, L: int, state, pages: bool = True, device=None) -> int | None:
        """How many cached slots one decoding query of the KV heads ``kv`` (None: all) reads at most, known on the host:
        its band's w + 1, every decoding column of the input (``state``; a column's position is one slot of a KV head's
        cache),
        the pages it reads back (``pages``) — L where a head reads them all.  None on the CPU: the exact count costs no
        wait for a device there (``page_table.table_of``)."""
        if device is not None and torch.device(device).type == "cpu":
            return None
        w = self.per_kv(self.w_read, kv)
        if bool((w == FULL).any()):
            return L
        columns = state.decode_columns
        g = columns.shape[-1] if columns is not None and self.sliding is None else 0
        return min(L, int(w.max()) + 1 + g + (self.pages * self.page if pages else 0))

    def decode_parts(self, q, parts, scaling, q_pos, state, summaries=None):
        """Steps 3–5 of ``decode_step``: q (B, H, n, d_k) of the input whose ``InputState`` is ``state`` over a cache's
        ``parts`` (``kv_cache.Part``: KV heads with their keys), part by part, each part's query heads' rows merged
        into one output → (out (B, H, n, d_v), how many stored slots the step read through pages, summed over
        (batch row, KV head); None: no store).
        ``summaries``: the layer's page summaries (``pages.page_summaries``; read-back; None: made from the step's
        keys)."""
        fetched = None
        B, H, n, _ = q.shape
        out = q.new_empty(B, H, n, parts[0].values.shape[-1])
        for p in parts:
            one = len(parts) == 1 and p.kv.tolist() == list(range(self.H_kv))          # every head, in order
            hq = torch.arange(H, device=q.device) if one else self.query_heads(p.kv).to(q.device)
            q_p = q if one else q[:, hq]
            if p.whole and n == 1 and bool((self.per_kv(self.w_read, p.kv) == FULL).all()):
                # 3. scores: every key, all before the query
                o = self.backend_of(q).decode(q_p, p.keys, p.values, scaling)
                if one:
                    return o, fetched
                out[:, hq] = o
                continue
            if p.store is not None and self.pages and n == 1 and summaries is not None:
                # 3–4. scores and pages read back, the store not joined
                o, read = self.decode_read_back(q_p, p, scaling, q_pos, summaries, state,
                                                heads=(p.kv.to(q.device), hq))
                fetched = (fetched or 0.0) + read
            else:   # 3–4. scores (and pages, the store joined): its KV heads' rows of m, M and its query heads' pages
                mine = None if summaries is None else summaries.of_heads(p.kv.to(q.device), hq)
                o = self.decode(q_p, p.keys, p.values, scaling, q_pos, p.positions, state, p.flags,
                                kv=None if one else p.kv, summaries=mine)
                if p.stored is not None and self.pages:
                    fetched = (fetched or 0.0) + float((state.page_slots & p.stored).sum())
            if one:
                return o, fetched
            out[:, hq] = o                                                              # 5. merge
        return out, fetched

    def decode_read_back(self, q, p, scaling, q_pos, summaries, state, heads=None):
        """One decoding query over a part's resident slots and the pages it reads back from the part's store, the store
        not joined: the same S_h(i) as ``decode`` with ``read_back`` (``pages``), each chosen page gathered by position.

            candidates R_h(i) = {P : |P ∩ [0, i]| > |P ∩ (B_{w_h}(i) ∪ C_h)|}    (a key of P that h reads otherwise not)
            S_h(i) = B_{w_h}(i) ∪ C_h ∪ ⋃ {P ∩ O_h(i) : P ∈ top_K U_{h,P}(q) over R_h(i)}

        (with ``mean_pages`` = k: top_{K−k} by U, then top_k by μ_{h,P}(q) over the candidates left,
        ``pages.choose_pages``)
        q (B, H_s·r, 1, d_k) at q_pos (1,); p a ``Part`` (resident keys, values, positions, flags) with its ``store``;
        summaries: ``pages.page_summaries``' parts of its KV heads and query heads, or the layer's with ``heads`` = (the
        part's KV heads, their query heads) (``PageSummaries.of_heads`` made only where needed).  Returns
        (out (B, H_s·r, 1, d_v), stored slots read, summed over (batch row, KV head)).  On the CPU in float32 the
        backend's fused C step (``CpuBackend.decode_fused``) computes the same; the tensor code below is its reference
        and the fallback (``ATTNLAB_NATIVE_DECODE=0``, no compiler).
        """
        B, Hq, _, d = q.shape
        k_r, v_r, pos_r = p.keys, p.values, p.positions                               # (B, H_s, L, ·), (B, H_s, L)
        H_s, L = k_r.shape[1], k_r.shape[2]
        r = Hq // H_s
        i, page, dev = int(q_pos[-1]), self.page, q.device
        flags = self.column_flags(pos_r, state, p.kv) if p.flags is None else p.flags  # (B, H_s, r, L)
        store = (p.store.store_keys, p.store.store_values, p.store.store_slots())     # (B, H_s, S, ·), (B, H_s, J)
        rows = None if heads is None else (summaries.row[heads[0]].clamp_min(0), heads[1])  # the layer's summaries
        fused = self.backend_of(q).decode_fused(q, k_r, v_r, pos_r, flags, self.per_kv(self.w_read, p.kv),
                                                self.per_kv(self.reads, p.kv), summaries, store, i,
                                                sliding=self.sliding, page=page, pages=self.pages, scale=scaling,
                                                rows=rows, mean_pages=self.mean_pages)
        if fused is not None:   # the backend's fused step (the CPU's native C step), one call
            o, read = fused
            return o, float(read.sum())
        summaries = summaries if heads is None else summaries.of_heads(*heads)
        allowed = self.allowed(q_pos, pos_r, flags, p.kv)[:, :, :, 0]                 # (B, H_s, r, L): band ∪ columns
        w = self.per_kv(self.w_read, p.kv).to(dev)                                  # (H_s, r)
        reads = self.per_kv(self.reads, p.kv).to(dev)                                 # (H_s, r)
        # candidates: a page holds a position ≤ i that is neither in h's band nor one of its columns
        P = i // page + 1
        start = torch.arange(P, device=dev) * page                                    # (P,)
        total = (start + page).clamp_max(i + 1) - start                               # |P ∩ [0, i]|
        lo = (i - w).clamp_min(0)[..., None]                                          # (H_s, r, 1): the band's first
        in_band = ((start + page).clamp_max(i + 1) - torch.maximum(start, lo)).clamp_min(0)  # (H_s, r, P)
        col = (flags & ~near(i, pos_r[:, :, None], w.view(1, H_s, r, 1))              # (B, H_s, r, L): off the band
               & (pos_r >= 0)[:, :, None])
        pid = torch.where(col, pos_r[:, :, None] // page, P)
        n_col = torch.zeros(B, H_s, r, P + 1, dtype=torch.long, device=dev).scatter_add_(-1, pid, col.long())[..., :P]
        cand = (in_band + n_col < total) & reads[..., None]                           # (B, H_s, r, P)
        U = summary_bound(q, summaries, P)[:, :, 0]                                   # (B, Hq, P)
        mu = summary_mean(q, summaries, P)[:, :, 0] if self.mean_pages else None      # (B, Hq, P)
        chosen = choose_pages(U, mu, cand.view(B, Hq, P), self.pages, self.mean_pages)  # (B, Hq, P)
        top = torch.topk(chosen.to(torch.int8), min(self.pages, P), -1)               # the chosen pages (value 1) first
        j = (top.indices[..., None] * page + torch.arange(page, device=dev)).flatten(-2)  # (B, Hq, K·page) positions
        ok = (top.values > 0).repeat_interleave(page, -1) & (j <= i) & (j < lo.view(1, Hq, 1))  # off the band
        # each position's resident slot or store slot (its KV head's); a resident column of h is read already
        kv_local = torch.arange(H_s, device=dev).repeat_interleave(r)                 # (Hq,) within the part
        # a KV head's resident positions ascend along its slots but for the padding (−1) between the compacted slots and
        # the tokens appended since: their running maximum is sorted, a position's first slot there is its own
        b = torch.arange(B, device=dev).view(B, 1, 1)
        jc = torch.where(ok, j, i + 1)
        sorted_r = torch.cummax(pos_r, -1).values[:, kv_local]                        # (B, Hq, L)
        at = torch.searchsorted(sorted_r, jc).clamp_max(L - 1)                        # (B, Hq, K·page)
        slot_r = torch.where(torch.gather(sorted_r, -1, at) == jc, at, -1)            # −1: not resident
        is_col = torch.gather(flags.reshape(B, Hq, L), -1, slot_r.clamp_min(0)) & (slot_r >= 0)
        table = p.store.store_slots()                                                 # (B, H_s, J)
        J = table.shape[-1]
        slot_s = torch.where(jc < J,
                             table.reshape(B, H_s * J)[b, kv_local.view(1, Hq, 1) * J + jc.clamp_max(J - 1)], -1)
        ok &= ~is_col & ((slot_r >= 0) | (slot_s >= 0))
        from_store = ok & (slot_r < 0)
        S = p.store.store_keys.shape[2]
        row_r = kv_local.view(1, Hq, 1) * L + slot_r.clamp_min(0)                     # rows of (B, H_s·L, ·)
        row_s = kv_local.view(1, Hq, 1) * S + slot_s.clamp_min(0)
        k_p = torch.where(from_store[..., None], p.store.store_keys.reshape(B, H_s * S, d)[b, row_s],
                          k_r.reshape(B, H_s * L, d)[b, row_r])                       # (B, Hq, K·page, d)
        v_p = torch.where(from_store[..., None], p.store.store_values.reshape(B, H_s * S, -1)[b, row_s],
                          v_r.reshape(B, H_s * L, -1)[b, row_r])
        bound = self.reads_at_most(p.kv, L, state, pages=False, device=dev)           # band ∪ columns
        table = table_of(allowed[:, :, :, None], bound)
        o = self.backend_of(q).decode(q, k_r, v_r, scaling, table, PageKeys(k_p, v_p, ok))
        read = torch.zeros(B, H_s, S + 1, dtype=torch.bool, device=dev)               # [S]: none
        read.view(B, H_s * (S + 1)).scatter_(
            -1, torch.where(from_store, kv_local.view(1, Hq, 1) * (S + 1) + slot_s, S).flatten(1), True)
        read[..., S] = False
        return o, float(read.sum())

    # ---- what the cache must keep ---------------------------------------------------------------
    def keep(self, k_pos, seen: int, state, flags=None, kv=None):
        """The decoding cache's eviction decision: which cached keys (B, H_s, L) of the KV heads ``kv`` (None: all) some
        query at position ≥ ``seen`` of this layer can still read, for the input whose ``InputState`` is ``state``.

            keep(j) = ∃ h of the KV head: w_h = FULL ∨ j ≥ seen − w_h ∨ j ∈ C_h     (w_h capped by a sliding window and
                                                                                 by ``decode_band``: ``w_read_at``)
        """
        B, H_s, L = k_pos.shape
        r = self.H // self.H_kv
        w = torch.tensor([FULL if self.whole[h] else self.w_read_at(h, seen) for h in range(self.H)])
        w = self.per_kv(w, kv).to(k_pos.device).view(1, H_s, r, 1)
        flags = self.column_flags(k_pos, state, kv) if flags is None else flags           # (B, H_s, r, L)
        mine = (w == FULL) | near(seen, k_pos[:, :, None, :], w) | flags
        return mine.any(2) & (k_pos >= 0)

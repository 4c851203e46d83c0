"""A layer's plan in executable form: its static part (per query head: band w_h, fixed columns, how many dynamic
columns, slashes, key blocks, tail rows, the vote, the read-back) and how an input's choice of what each head reads is
made (the choice itself is the input's ``input_state.InputState``, never this object's).

    T_h = T_fixed ∪ top_{D_h}(Σ_{r ∈ last queries} â_rj)                   columns (MInference's vertical estimate)
    Δ_h = top_{s_h}(σ_h(δ)) over δ < −w_h,  σ_h(δ) = Σ_r â_{r, p_r + δ}·1[p_r + δ ∉ T_h]      slashes
    U_h(t) = top_{K_h}(q̄_t·k̄_u) over the key blocks u left of the band      key blocks (``plans.key_blocks``)

â: the softmax rows of the last ``LAST_Q`` queries (``plans.slash_lines``), computed once per layer for every head
that needs them.  ``LayerPlan.parts`` gathers the choice as the seam's ``PrefillParts`` (``backend``); the prefill
(``prefill.PrefillStep``) and the decoding step (``decode_step.DecodeStep``) read this class's fields, which no input
changes.
"""

from __future__ import annotations

import torch

from attnlab.llm.execution.backend import AttentionBackend, PrefillParts, backend_for
from attnlab.llm.execution.indexed_selection import head_table
from attnlab.llm.plans.key_blocks import BLOCK, block_means, top_pooled_blocks
from attnlab.llm.plans.plan import FULL, LAST_Q
from attnlab.llm.plans.slash_lines import last_query_mass, last_query_rows, slash_mass, top_slashes
from attnlab.nn.mechanisms import native
from attnlab.support import NO_DIAGONAL, column_mask

__all__ = ["LayerPlan", "estimate_columns"]


def estimate_columns(q, k, scaling: float, last_q: int = LAST_Q):
    """Column scores Σ_{i among the last ``last_q`` queries} a_it (causal): ``(B, H, m)`` (``last_query_mass``)."""
    return last_query_mass(q, k, scaling, last_q)


class LayerPlan:
    """The plan of one layer: per query head what it reads, and how an input's columns, slashes, blocks are chosen."""

    def __init__(self, heads, layer_idx: int, num_kv_heads: int, sliding_window: int | None = None, pages: int = 0,
                 page: int = 16, backend: AttentionBackend | None = None, mean_pages: int = 0, decode_band: int = 0,
                 group_vote: int = 0):
        self.heads = heads
        self.layer_idx = layer_idx
        self.H, self.H_kv = len(heads), num_kv_heads
        self.kv_of = torch.arange(self.H) // (self.H // self.H_kv)                    # (H,) KV head of each query head
        self.w = torch.tensor([h.w for h in heads], dtype=torch.long)                 # (H,) FULL = −1
        self.w_list = [int(h.w) for h in heads]                                       # the same, read without a tensor
        self.fixed = [h.columns for h in heads]
        self.dynamic = [0 if h.is_full else h.dynamic for h in heads]
        self.tail = [0 if h.is_full or sliding_window is not None else getattr(h, "tail", 0) for h in heads]
        self.slashes = [0 if h.is_full or sliding_window is not None else getattr(h, "slashes", 0) for h in heads]
        self.blocks = [0 if h.is_full or sliding_window is not None else getattr(h, "blocks", 0) for h in heads]
        # P_h, the tail rows' vote: a head with a tail reads at decoding the ⌈P_h/b⌉ blocks its tail rows attended most
        # (the voted keys; ``HeadPlan.kept``, the option ``tail_keep``); 0: its whole cache
        self.vote_size = [getattr(h, "kept", 0) if t else 0 for h, t in zip(heads, self.tail)]
        # s: blocks before, in a vote
        self.vote_next = [getattr(h, "vote_next", 0) if p else 0 for h, p in zip(heads, self.vote_size)]
        self.group_vote = bool(group_vote)   # the voting heads of a KV group cast one vote (``PrefillStep.vote``)
        # (H,) reads its whole cache at decoding: a head with a tail (a retrieval head) without a vote; key blocks
        # alone are a prefill choice
        self.whole = torch.tensor([t > 0 and not p for t, p in zip(self.tail, self.vote_size)], dtype=torch.bool)
        self.sliding = sliding_window
        # c > 0: at decoding a planned head's band reads at most c keys, min(w_h, c) (``w_read_at``);
        # the prefill keeps w_h
        self.decode_band = int(decode_band)
        # w_read (H,): the half-width a decoding step of each head reads (``w_read_at`` at length n) — a tail: every
        # cached key; without a cap the planned w (a sliding layer's FULL: the mask's window)
        read = torch.tensor([self.w_read_at(h, 0) for h in range(self.H)]) if self.decode_band else self.w
        self.w_read = torch.where(self.whole, FULL, read)
        # read-back: the planned heads (no FULL decoding, no sliding layer) read ``pages`` pages of ``page`` keys
        self.reads = (self.w_read != FULL) & (pages > 0 and sliding_window is None)   # (H,) bool
        self.pages, self.page = (int(pages), int(page)) if bool(self.reads.any()) else (0, int(page))
        self.mean_pages = min(int(mean_pages), self.pages)   # of them chosen by the mean key's score
                                                             # (``pages.choose_pages``)
        self.backend = backend     # the seam's backend (None: the one of the inputs' device, ``backend_for``)

    # ---- which keys a head reads ------------------------------------------------------------
    def choose_columns(self, q, k, scaling):
        """(T_h, Δ_h) per batch row: T_h ``(B, H, g)`` the fixed columns, then the ``dynamic`` best by the last-query
        estimate; Δ_h ``(B, H, s)`` each head's ``slashes`` lines (``choose_slashes``), from the same rows.

        q: (B, H, n, d_k), k: (B, H_kv, m, d_k) (query head h reads KV head ``kv_of[h]``).
        """
        B, H, n, _ = q.shape
        m = k.shape[2]
        g = max((len(f) + d for f, d in zip(self.fixed, self.dynamic)), default=0)
        cols = torch.full((B, H, g), -1, dtype=torch.long, device=q.device)
        need = [h for h in range(H) if self.dynamic[h] > 0 or self.slashes[h] > 0]
        rows = mass = None
        if need:   # the last queries' softmax, once per layer, for the columns and the slashes alike
            q_last = q[:, :, max(0, n - LAST_Q) :]                                          # (B, H, nq, d_k): no copy
            kv = None if len(need) == H else self.kv_of[need]                               # ascending, as h
            q_last = q_last if kv is None else q_last[:, need]                              # (B, |need|, nq, d_k)
            if any(self.slashes[h] for h in need):
                # the rows themselves (slash mass), each KV head's keys where they lie
                rows = last_query_rows(q_last, k, scaling, kv=kv)                           # (B, |need|, nq, m)
                mass = rows.sum(-2)
            else:   # the columns' estimate only: Σ over the rows without holding them
                mass = last_query_mass(q_last, k, scaling, kv=kv)                           # (B, |need|, m)
        fixed = [[t for t in self.fixed[h] if t < m] for h in range(H)]                     # T_fixed of each head
        for h in range(H if g else 0):
            if fixed[h]:
                cols[:, h, : len(fixed[h])] = torch.tensor(fixed[h], device=q.device)
        dyn = [(x, h) for x, h in enumerate(need) if self.dynamic[h] > 0] if g else []
        if dyn:   # the dynamic columns of every head at once: one top-k over (B, heads, m)
            xs = torch.tensor([x for x, _ in dyn], device=q.device)
            sc = mass[:, xs]                                                                # (B, |dyn|, m)
            w = torch.tensor([int(self.w[h]) for _, h in dyn], device=q.device)
            # the last rows' band holds these
            sc.masked_fill_(torch.arange(m, device=q.device) >= (m - w - 1).clamp_min(0)[:, None], -1.0)
            for y, (_, h) in enumerate(dyn):
                if fixed[h]:
                    sc[:, y, fixed[h]] = -1.0
            top = torch.topk(sc, min(max(self.dynamic[h] for _, h in dyn), m), dim=-1)      # (B, |dyn|, D), best first
            pick = torch.where(top.values >= 0, top.indices, torch.full_like(top.indices, -1))
            for y, (_, h) in enumerate(dyn):
                f, d = len(fixed[h]), min(self.dynamic[h], m)
                cols[:, h, f : f + d] = pick[:, y, :d]
        return cols, self.choose_slashes(rows, need, cols)

    def choose_slashes(self, rows, need: list[int], cols):
        """Δ_h per batch row: the ``slashes`` offsets δ < −w_h of largest last-query mass off the head's columns,
        ``(B, H, s)`` (NO_DIAGONAL: empty):

            σ_h(d) = Σ_r â_{r, p_r − d} · 1[p_r − d ∉ T_h]      (``slash_lines.slash_mass`` of the rows without T_h)

        The keys T_h holds are left out: the head reads them already, and a sink's mass (large on every last query,
        at a different distance from each) would otherwise pick lines through the sink that only the last rows reach.
        rows: (B, |need|, nq, m) the last queries' attention of the heads ``need``; cols: (B, H, g) T_h (−1: empty).
        One batched estimate for all heads of the layer.
        """
        B, device, s = cols.shape[0], cols.device, max(self.slashes, default=0)
        diags = torch.full((B, self.H, s), NO_DIAGONAL, dtype=torch.long, device=device)
        if s == 0:
            return diags
        hs = torch.tensor(need, device=device)
        w = self.w.to(device)[hs]                                                             # (|need|,)
        want = torch.tensor([self.slashes[h] for h in need], device=device)                   # (|need|,)
        in_columns = column_mask(cols[:, hs], rows.shape[-1])                                 # (B, |need|, m)
        picked = top_slashes(
            slash_mass(rows.float().masked_fill(in_columns[:, :, None, :], 0.0)), w, want)    # (B, |need|, ≤ s)
        diags[:, hs, : picked.shape[-1]] = picked
        return diags

    def effective_w(self, h: int, n: int) -> int:
        """Half-width actually run: the plan's w, capped by the model's sliding window (FULL → window − 1)."""
        w = self.w_list[h]
        if self.sliding is not None:
            return self.sliding - 1 if w == FULL else min(w, self.sliding - 1)
        return w

    def w_read_at(self, h: int, n: int) -> int:
        """Half-width a decoding query of head h reads at length n (``w_read`` is it planned, before any length):
        ``effective_w`` capped at ``decode_band`` c > 0, min(w, c) — a planned FULL head of a full layer stays FULL
        (the plan chose it whole), a sliding layer's head min(W − 1, c)."""
        w = self.effective_w(h, n)
        return w if w == FULL or not self.decode_band else min(w, self.decode_band)

    def is_full(self, h: int, n: int) -> bool:
        """Head h reads every causal key at length n (its band covers the row, or it is planned full)."""
        w = self.effective_w(h, n)
        return w == FULL or w >= n - 1


    def query_heads(self, kv=None):
        """The query heads of the KV heads ``kv`` (H_s,) in order: g·r + ρ (None: all H)."""
        if kv is None:
            return torch.arange(self.H)
        r = self.H // self.H_kv
        return (kv.cpu()[:, None] * r + torch.arange(r)[None, :]).reshape(-1)

    def per_kv(self, x, kv=None):
        """A per-query-head tensor (H,) as (H_s, r), the rows of the KV heads ``kv`` (None: all)."""
        x = x.view(self.H_kv, self.H // self.H_kv)
        return x if kv is None else x[kv.cpu()]

    def whole_kv(self):
        """(H_kv,) bool: the KV heads some query head of which reads every key at decoding (full, a retrieval tail)."""
        return (self.per_kv(self.w_read) == FULL).any(1) & (self.sliding is None)


    # ---- the seam's parts ------------------------------------------------------------------------
    def backend_of(self, x) -> AttentionBackend:
        """The backend that runs this layer on x's device (``backend.backend_for``) unless one was given."""
        return self.backend if self.backend is not None else backend_for(x.device)

    def choose_blocks(self, q, k, n: int):
        """U_h(t) of every head with key blocks, for each query block t: ``(B, H, T, K_max)`` (−1: none; a head with
        K_h < K_max reads the first K_h, ``topk``'s order: the largest first; a head without blocks: all −1)."""
        B, H = q.shape[0], self.H
        kv_of = self.kv_of.to(k.device)
        blocked = [h for h in range(H) if self.blocks[h] and not self.is_full(h, n)]
        if not blocked:
            return torch.full((B, H, -(-n // BLOCK), 0), -1, dtype=torch.long, device=q.device)
        bi = torch.tensor(blocked, device=q.device)
        native_choice = (native.block_topk if q.device.type == "cpu" and q.dtype == torch.float32 and native.available()
                         else None)
        best = top_pooled_blocks(block_means(q)[:, bi], block_means(k)[:, kv_of[bi]],
                                 [self.effective_w(h, n) for h in blocked], max(self.blocks[h] for h in blocked),
                                 choose=native_choice)   # (B, |blocked|, T, min(K_max, T))
        out = torch.full((B, H, *best.shape[2:]), -1, dtype=torch.long, device=q.device)
        out[:, bi] = best
        return out

    def head_table(self, device, n: int):
        """This layer's plan at length n as tensors on ``device`` (``indexed_selection.HeadTable``), built once."""
        key = (str(device), n)
        if getattr(self, "_tables", None) is None or len(self._tables) > 8:
            self._tables = {}
        if key not in self._tables:
            self._tables[key] = head_table(self, device, n, LAST_Q, BLOCK)
        return self._tables[key]

    def parts(self, columns, diagonals, blocks, n: int) -> PrefillParts:
        """The seam's ``PrefillParts`` of this layer at length n: columns T_h (B, H, g), diagonals Δ_h (B, H, s),
        blocks U_h(t) (B, H, T, K)."""
        # the plan's own columns only
        static = not any(self.dynamic) and not any(self.slashes) and not blocks.shape[-1]
        fixed = (tuple(tuple(int(t) for t in self.fixed[h] if t < n) for h in range(self.H))
                 if static and columns.shape[-1] else None)
        return PrefillParts(w=tuple(self.effective_w(h, n) for h in range(self.H)), columns=columns,
                            diagonals=diagonals, blocks=blocks, block_counts=tuple(self.blocks),
                            tails=tuple(self.tail), kv_of=self.kv_of, block=BLOCK, fixed=fixed)

"""attnlab's attention inside Hugging Face models: each head runs its plan (``transformers.AttentionInterface``).

    out_i = Σ_{j ∈ S_h(i)} α_ij v_j,   α_ij = softmax_{j ∈ S_h(i)}(q_i·k_j · scaling),
    S_h(i) = {j ≤ i : i − j ≤ w_h} ∪ {j ≤ i : j ∈ T_h} ∪ {j ≤ i : j − i ∈ Δ_h}   (planned head; full head: {j ≤ i})

``apply_plan(model, plan)`` registers the function ``attnlab_attention`` under the name
``"attnlab"`` and switches the model to it (``model.set_attn_implementation("attnlab")``), so
``model(...)`` and ``model.generate(...)`` run every head with its plan:

* prefill (no past keys): planned heads go through the chunked band + columns kernel
  (``sliding_window_attention``, O(n·(2w+1+g)) per head, heads grouped by w; with the native kernel a
  group runs in place, ``band_heads_attention``), full heads through
  ``torch.nn.functional.scaled_dot_product_attention``;
* T_h = the plan's fixed columns ∪ the ``dynamic`` keys of largest attention mass from the last
  ``LAST_Q`` queries of the input (``estimate_columns``, MInference's vertical estimate), chosen
  once per prefill and kept for the decoding that follows;
* Δ_h (``HeadPlan.slashes`` = s > 0): the s diagonals δ < −w_h of largest mass from the same last
  queries, off the keys T_h holds (MInference's slash estimate, ``attnlab.llm.plans.slash_lines``; ``choose_slashes``),
  read by the prefill only: the kernel
  takes them as per-chunk extra keys (chunks of ``SLASH_CHUNK`` queries); decoding does not read them;
* key blocks (``HeadPlan.blocks`` = K > 0): each block of ``BLOCK`` queries also reads the K blocks of ``BLOCK``
  keys of largest pooled score q̄·k̄ (``attnlab.llm.plans.key_blocks``, chosen per input); the kernel reads them per chunk
  where k, v lie (``band_heads_attention(blocks=)``); at decoding such a head reads the keys its last query block
  chose (held as more columns), and its whole cache only with a tail;
* tails (``HeadPlan.tail`` = T > 0): the last T rows read every causal key (one masked softmax for the layer's tail
  heads); at decoding the head reads its whole cache, or with ``HeadPlan.kept`` = P its band, columns and the ⌈P/16⌉
  key blocks its tail rows attended most (the vote, held as more columns);
* decoding (queries after cached keys): a masked softmax over the cached keys; with
  ``attnlab.llm.execution.kv_cache.PlanCache`` the cache holds, per KV head, only what its query heads can
  still read (window ∪ columns), so one step costs O(w + g) per planned head;
* read-back (``Plan.pages`` = K > 0): a planned head's decoding query also reads the K pages of largest
  Quest bound among those holding keys its band and columns miss (``attnlab.llm.execution.pages``); the keys the
  cache evicts are kept in its store, the page summaries beside the cache, and a step gathers the chosen
  pages' keys from the store by position (``LayerRunner.decode_read_back``).

GQA: query head h reads KV head h // (H / H_kv).  The model's own causal and sliding-window
masks are applied here (transformers builds no mask for an unknown implementation); padded
batches are not supported (batch rows must be full-length).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from attnlab.llm.plans.key_blocks import BLOCK, block_extras, block_keys, block_means, top_pooled_blocks
from attnlab.llm.plans.plan import FULL, LAST_Q, Plan
from attnlab.llm.execution.pages import page_summaries, read_back, summary_bound
from attnlab.llm.plans.slash_lines import SLASH_CHUNK, kernel_extras, last_query_mass, last_query_rows, slash_mass, top_slashes
from attnlab.masks import hidden, near, visible
from attnlab.nn.mechanisms.sliding_window import band_heads_attention, native_heads_ready, sliding_window_attention

try:  # the kernel's own chunk of queries (extra keys are given per chunk)
    from attnlab.nn.mechanisms.sliding_window import kernel_chunk as chunk_size
except ImportError:  # pragma: no cover - the kernel before its rewrite
    from attnlab.nn.mechanisms.sliding_window import chunk_size
from attnlab.nn.softmax import masked_softmax
from attnlab.support import NO_DIAGONAL, Support, column_mask

__all__ = ["NAME", "LayerRunner", "apply_plan", "attnlab_attention", "attention_modules", "estimate_columns", "last_query_rows",
           "plan_reference", "register", "remove_plan"]

NAME = "attnlab"
RAGGED = 1.0625    # a layer's cache splits by KV head when padding them to one length would hold > 1/16 more slots


def estimate_columns(q, k, scaling: float, last_q: int = LAST_Q):
    """Column scores Σ_{i among the last ``last_q`` queries} a_it (causal): ``(B, H, m)`` (``last_query_mass``)."""
    return last_query_mass(q, k, scaling, last_q)


class LayerRunner:
    """The plan of one layer in executable form, attached to its attention module as ``attnlab_layer``."""

    def __init__(self, heads, layer_idx: int, num_kv_heads: int, sliding_window: int | None = None, pages: int = 0, page: int = 16):
        self.heads = heads
        self.layer_idx = layer_idx
        self.H, self.H_kv = len(heads), num_kv_heads
        self.kv_of = torch.arange(self.H) // (self.H // self.H_kv)                    # (H,) KV head of each query head
        self.w = torch.tensor([h.w for h in heads], dtype=torch.long)                 # (H,) FULL = −1
        self.fixed = [h.columns for h in heads]
        self.dynamic = [0 if h.is_full else h.dynamic for h in heads]
        self.tail = [0 if h.is_full or sliding_window is not None else getattr(h, "tail", 0) for h in heads]
        self.slashes = [0 if h.is_full or sliding_window is not None else getattr(h, "slashes", 0) for h in heads]
        self.blocks = [0 if h.is_full or sliding_window is not None else getattr(h, "blocks", 0) for h in heads]
        # tail rows' vote: a head with a tail and ``kept`` = P keeps at decoding the P keys its tail rows attended most
        self.kept = [getattr(h, "kept", 0) if t else 0 for h, t in zip(heads, self.tail)]
        # (H,) reads its whole cache at decoding: a head with a tail (a retrieval head) that keeps no vote; key blocks
        # alone are a prefill choice
        self.whole = torch.tensor([t > 0 and not p for t, p in zip(self.tail, self.kept)], dtype=torch.bool)
        self.w_decode = torch.where(self.whole, FULL, self.w)                            # (H,) a tail: every cached key
        self.sliding = sliding_window
        # read-back: the planned heads (no FULL decoding, no sliding layer) read ``pages`` pages of ``page`` keys
        self.reads = (self.w_decode != FULL) & (pages > 0 and sliding_window is None)   # (H,) bool
        self.pages, self.page = (int(pages), int(page)) if bool(self.reads.any()) else (0, int(page))
        self.fetched = None        # (B, H_kv, L) bool: the slots the last decoding step read through its pages
        self.columns = None        # (B, H, g) the columns of the last prefill (−1: empty), kept for decoding
        self.diagonals = None      # (B, H, s) the slash offsets δ of the last prefill (NO_DIAGONAL: empty), prefill only
        self.cache = None          # weakref to the PlanCache using this layer
        self.recorder = None       # a calibration.Calibration while calibrating

    # ---- which keys a head reads ------------------------------------------------------------
    def choose_columns(self, q, k, scaling):
        """T_h per batch row: fixed columns, then the ``dynamic`` best by the last-query estimate; ``(B, H, g)``.

        q: (B, H, n, d_k), k: (B, H_kv, m, d_k) (query head h reads KV head ``kv_of[h]``).  Also sets
        ``self.diagonals`` (B, H, s): each head's ``slashes`` lines (``choose_slashes``), from the same rows.
        """
        B, H, n, _ = q.shape
        m = k.shape[2]
        g = max((len(f) + d for f, d in zip(self.fixed, self.dynamic)), default=0)
        cols = torch.full((B, H, g), -1, dtype=torch.long, device=q.device)
        need = [h for h in range(H) if self.dynamic[h] > 0 or self.slashes[h] > 0]
        rows = mass = None
        if need:   # the last queries' softmax, once per layer, for the columns and the slashes alike
            q_last = q[:, :, max(0, n - LAST_Q) :]                                              # (B, H, nq, d_k): no copy
            kv = None if len(need) == H else self.kv_of[need]                                  # ascending, as h
            q_last = q_last if kv is None else q_last[:, need]                                   # (B, |need|, nq, d_k)
            if any(self.slashes[h] for h in need):   # the rows themselves (slash mass), each KV head's keys where they lie
                rows = last_query_rows(q_last, k, scaling, kv=kv)                                # (B, |need|, nq, m)
                mass = rows.sum(-2)
            else:   # the columns' estimate only: Σ over the rows without holding them
                mass = last_query_mass(q_last, k, scaling, kv=kv)                               # (B, |need|, m)
        fixed = [[t for t in self.fixed[h] if t < m] for h in range(H)]                         # T_fixed of each head
        for h in range(H if g else 0):
            if fixed[h]:
                cols[:, h, : len(fixed[h])] = torch.tensor(fixed[h], device=q.device)
        dyn = [(x, h) for x, h in enumerate(need) if self.dynamic[h] > 0] if g else []
        if dyn:   # the dynamic columns of every head at once: one top-k over (B, heads, m)
            xs = torch.tensor([x for x, _ in dyn], device=q.device)
            sc = mass[:, xs]                                                                    # (B, |dyn|, m)
            w = torch.tensor([int(self.w[h]) for _, h in dyn], device=q.device)
            sc.masked_fill_(torch.arange(m, device=q.device) >= (m - w - 1).clamp_min(0)[:, None], -1.0)  # the last rows' band holds these
            for y, (_, h) in enumerate(dyn):
                if fixed[h]:
                    sc[:, y, fixed[h]] = -1.0
            top = torch.topk(sc, min(max(self.dynamic[h] for _, h in dyn), m), dim=-1)        # (B, |dyn|, D), best first
            pick = torch.where(top.values >= 0, top.indices, torch.full_like(top.indices, -1))
            for y, (_, h) in enumerate(dyn):
                f, d = len(fixed[h]), min(self.dynamic[h], m)
                cols[:, h, f : f + d] = pick[:, y, :d]
        self.diagonals = self.choose_slashes(rows, need, cols)
        return cols

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
        held = column_mask(cols[:, hs], rows.shape[-1])                                       # (B, |need|, m)
        picked = top_slashes(slash_mass(rows.float().masked_fill(held[:, :, None, :], 0.0)), w, want)  # (B, |need|, ≤ s)
        diags[:, hs, : picked.shape[-1]] = picked
        return diags

    def effective_w(self, h: int, n: int) -> int:
        """Half-width actually run: the plan's w, capped by the model's sliding window (FULL → window − 1)."""
        w = int(self.w[h])
        if self.sliding is not None:
            return self.sliding - 1 if w == FULL else min(w, self.sliding - 1)
        return w

    def is_full(self, h: int, n: int) -> bool:
        """Head h reads every causal key at length n (its band covers the row, or it is planned full)."""
        w = self.effective_w(h, n)
        return w == FULL or w >= n - 1

    # ---- prefill: chunked kernel --------------------------------------------------------------
    def prefill(self, q, k, v, scaling):
        """q: (B, H, n, d_k), k, v: (B, H_kv, n, ·) → (B, H, n, d_v), each head with its support."""
        B, H, n, d = q.shape
        kv_of = self.kv_of.to(k.device)
        self.columns = self.choose_columns(q, k, scaling)
        if self.sliding is not None:  # a sliding layer's columns would be masked by the model: band only
            self.columns = self.columns[..., :0]
        out = q.new_empty(B, n, H, v.shape[-1]).transpose(1, 2)   # transformers' layout: its transpose back is free
        groups: dict[tuple[int, int], list[int]] = {}
        for h in range(H):
            groups.setdefault((self.effective_w(h, n), self.blocks[h]), []).append(h)
        in_place = native_heads_ready(q, k, v)   # the native kernel reads and writes each group's heads where they lie
        # a head with key blocks keeps reading, at decoding, the keys of the blocks its last query block chose (the rows
        # that ask read them in the prefill; the answer's tokens go on from there): held as more columns
        held = torch.full((B, H, max(self.blocks, default=0) * BLOCK), -1, dtype=torch.long, device=q.device)
        # key blocks chosen per block of BLOCK queries (key_blocks) for every such head of the layer at once: the K_max best
        # of each, a head with K < K_max takes its first K (topk's order: the largest first)
        blocked = [h for h in range(H) if self.blocks[h] and not self.is_full(h, n)]
        if blocked:
            at = {h: i for i, h in enumerate(blocked)}
            bi = torch.tensor(blocked, device=q.device)
            best = top_pooled_blocks(block_means(q)[:, bi], block_means(k)[:, kv_of[bi]], [self.effective_w(h, n) for h in blocked],
                                     max(self.blocks[h] for h in blocked))                      # (B, |blocked|, T, K_max)
        for (w, K), hs in groups.items():
            idx = torch.tensor(hs, device=q.device)
            full = self.is_full(hs[0], n)   # (w, K) is the group's key: one answer for its heads
            cols = self.columns[:, idx]
            cols = cols[..., : int((cols >= 0).sum(-1).max()) if cols.numel() else 0]  # drop all-empty slots
            diags = self.diagonals[:, idx]
            diags = diags[..., : int((diags != NO_DIAGONAL).sum(-1).max()) if diags.numel() else 0]
            if in_place and not full and not K and not diags.shape[-1]:   # band + columns: no copies of q, k, v
                band_heads_attention(q, k, v, w, idx, kv_of[idx], out, columns=cols, scale=scaling)
                continue
            chosen = None
            if K and not full:
                chosen = best[:, [at[h] for h in hs], :, :K]                                    # (B, |hs|, T, K)
                held[:, idx, : K * BLOCK] = block_keys(chosen[:, :, -1], n)                 # the last query block's keys
            if in_place and chosen is not None and not diags.shape[-1]:   # the kernel reads each chunk's keys in place
                # the columns (read once a head), and each chunk's block keys that are not columns (distinct from them)
                keys = block_keys(chosen, n)                                                     # (B, |hs|, T, K·b), −1: none
                is_col = column_mask(cols, n).gather(-1, keys.clamp_min(0).flatten(2)).view_as(keys)
                keys = keys.masked_fill(is_col, -1)                                                # (an empty slot stays −1)
                band_heads_attention(q, k, v, w, idx, kv_of[idx], out, columns=cols, blocks=keys, chunk=BLOCK, scale=scaling)
                continue
            k_g, v_g = k[:, kv_of[idx]], v[:, kv_of[idx]]                                   # (B, |hs|, n, ·): GQA, read once
            if full:
                # q's heads contiguous, as before the in-place kernel: a full plan stays bit-equal to transformers' SDPA
                out[:, idx] = F.scaled_dot_product_attention(q[:, idx].contiguous(), k_g, v_g, is_causal=True, scale=scaling)
                continue
            if chosen is not None:   # without the kernel: the chosen blocks as per-chunk extras, the columns beside them
                e_idx, e_own = block_extras(chosen, cols, n)
                out[:, idx] = sliding_window_attention(q[:, idx], k_g, v_g, w, causal=True, extra_idx=e_idx, extra_own=e_own,
                                                       chunk=BLOCK, scale=scaling)
                continue
            if diags.shape[-1]:   # slash lines: columns + diagonals as per-chunk extras (a key a column holds read once)
                e_idx, e_own, e_logit = kernel_extras(Support(w=w, columns=cols, diagonals=diags), n, SLASH_CHUNK)
                out[:, idx] = sliding_window_attention(q[:, idx], k_g, v_g, w, causal=True, extra_idx=e_idx, extra_own=e_own,
                                                       extra_logit=e_logit.to(q.dtype), unique=True, chunk=SLASH_CHUNK, scale=scaling)
                continue
            extra_idx = extra_own = None
            if cols.shape[-1]:
                c = chunk_size(w)
                T = -(-n // c)
                extra_idx = cols.clamp_min(0)[:, :, None, :].expand(B, len(hs), T, cols.shape[-1])
                extra_own = (cols >= 0)[:, :, None, None, :]                               # empty slots (−1) read nothing
            # a head's columns are distinct (choose_columns) and empty slots are not owned: no de-duplication
            out[:, idx] = sliding_window_attention(q[:, idx], k_g, v_g, w, causal=True, extra_idx=extra_idx, extra_own=extra_own,
                                                   unique=True, chunk=chunk_size(w), scale=scaling)
        voted = torch.full((B, H, -(-max(self.kept, default=0) // BLOCK) * BLOCK), -1, dtype=torch.long, device=q.device)
        # the last T rows of a head with a tail read every causal key (exact: a = softmax(q_i·k_j τ) over j ≤ i on those
        # rows, the heads of one T together; a head run full already reads every key)
        tails: dict[int, list[int]] = {}
        for h in range(H):
            if self.tail[h] and not self.is_full(h, n):
                tails.setdefault(min(self.tail[h], n), []).append(h)
        for T, hs in tails.items():
            idx = torch.tensor(hs, device=q.device)
            s = (q[:, idx, n - T :] @ k[:, kv_of[idx]].transpose(-1, -2)) * scaling          # (B, |hs|, T, n)
            s[..., n - T :].masked_fill_(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))   # j > i
            a = torch.softmax(s, -1)
            out[:, idx, n - T :] = a @ v[:, kv_of[idx]]                                         # (B, |hs|, T, d_v)
            for x, h in enumerate(hs):
                if not self.kept[h]:
                    continue
                # the tail's vote: m_j = Σ_i a_ij over the keys the last row's band, the columns and the held blocks miss;
                # kept for decoding: the ⌈P / b⌉ blocks of b keys of largest Σ_{j∈J} m_j (a needle's value lies beside the
                # key the question finds: whole blocks keep both), held as more columns
                taken = column_mask(torch.cat([self.columns[:, h], held[:, h]], -1), n)              # (B, n): columns, held
                taken[:, max(0, n - 1 - self.effective_w(h, n)) :] = True                           # the band holds these
                mass = a[:, x].sum(-2).masked_fill(taken, 0.0)                                       # (B, n)
                per_block = F.pad(mass, (0, -n % BLOCK)).unflatten(-1, (-1, BLOCK)).sum(-1)          # (B, ⌈n/b⌉)
                top = torch.topk(per_block, min(-(-self.kept[h] // BLOCK), per_block.shape[-1]), -1)
                keys = block_keys(torch.where(top.values > 0, top.indices, -1), n)                  # (B, P'), −1: none
                keys = keys.masked_fill(taken.gather(-1, keys.clamp_min(0)), -1)                     # distinct from the rest
                voted[:, h, : keys.shape[-1]] = keys
        if held.shape[-1] or voted.shape[-1]:
            self.columns = torch.cat([self.columns, held, voted], -1)                          # (B, H, g + K·b + P), −1: empty
        return out

    # ---- decoding: masked softmax over the cached keys -----------------------------------------
    def column_flags(self, k_pos, kv=None):
        """Which cached slots are columns of each query head: k_pos (B, H_s, L) → (B, H_s, r, L) bool, r = H / H_kv.

        ``kv`` (H_s,): the KV heads of k_pos (None: all, in order).  Computed once per prefill (``PlanLayer.flags``
        then carries them through decoding and eviction).
        """
        B, H_s, L = k_pos.shape
        r = self.H // self.H_kv
        flags = torch.zeros(B, H_s * r, L, dtype=torch.bool, device=k_pos.device)
        if self.sliding is None and self.columns is not None and self.columns.shape[-1]:
            hq = self.query_heads(kv).to(self.columns.device)
            cols = self.columns[:, hq].to(k_pos.device).expand(B, -1, -1)                  # (B, H_s·r, g), −1: empty
            pos = k_pos.repeat_interleave(r, dim=1)                                         # (B, H_s·r, L)
            size = int(pos.max()) + 1 if pos.numel() else 1                                 # positions 0 … size − 1
            table = column_mask(cols, size)                                                 # 1[j ∈ T_h] by position
            flags = table.gather(-1, pos.clamp_min(0)) & (pos >= 0)                         # O(L + g) a head, not O(L·g)
        return flags.view(B, H_s, r, L)

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
        return (self.per_kv(self.w_decode) == FULL).any(1) & (self.sliding is None)

    def allowed(self, q_pos, k_pos, flags=None, kv=None):
        """S_h(i) over cached keys: q_pos (n,), k_pos (B, H_s, L) (−1: empty slot) → (B, H_s, r, n, L) bool.

        ``flags`` (B, H_s, r, L): the column slots of each query head (``column_flags``; computed if None);
        ``kv`` (H_s,): the KV heads of k_pos (None: all).
        """
        B, H_s, L = k_pos.shape
        r = self.H // self.H_kv
        flags = self.column_flags(k_pos, kv) if flags is None else flags
        i = q_pos.view(1, 1, 1, -1, 1)
        j = k_pos[:, :, None, None, :]                                                     # (B, H_s, 1, 1, L)
        w = self.per_kv(self.w_decode, kv).to(k_pos.device).view(1, H_s, r, 1, 1)
        return (j >= 0) & visible(i, j, self.sliding) & ((w == FULL) | near(i, j, w) | flags[:, :, :, None, :])

    @staticmethod
    def attend(q, k, v, scaling, allowed):
        """softmax over the ``allowed`` keys: q (B, H_s·r, n, d_k), k, v (B, H_s, L, ·), allowed (B, H_s, r, n, L) (None: all).

        GQA without copies: the r query heads of a KV head are the r·n rows of one product with its keys (a
        broadcast ``(B, H_s, r, n, d) @ (B, H_s, 1, d, L)`` would copy every key r times a step).
        """
        B, H, n, d = q.shape
        H_s, L = k.shape[1], k.shape[2]
        r = H // H_s
        s = ((q.reshape(B, H_s, r * n, d) @ k.transpose(-1, -2)) * scaling).view(B, H_s, r, n, L)   # (B, H_s, r, n, L)
        a = masked_softmax(s, allowed)
        return (a.view(B, H_s, r * n, L) @ v).view(B, H, n, v.shape[-1])

    def decode(self, q, k, v, scaling, q_pos, k_pos, flags=None, kv=None, summaries=None):
        """q: (B, H_s·r, n, d_k) at positions q_pos (n,); k, v: (B, H_s, L, ·) at k_pos (B, H_s, L) → (B, H_s·r, n, d_v).

        ``kv`` (H_s,): which KV heads k, v are, q holding their query heads (None: all of them); ``summaries``: the
        read-back's page summaries of these heads (``pages.page_summaries``; None: made from k).
        """
        flags = self.column_flags(k_pos, kv) if flags is None else flags                  # (B, H_s, r, L)
        allowed = self.allowed(q_pos, k_pos, flags, kv)                                    # (B, H_s, r, n, L)
        if self.pages:
            reads = self.reads if kv is None else self.per_kv(self.reads, kv).reshape(-1)
            allowed, self.fetched = read_back(q, k, k_pos, q_pos, allowed, reads, self.page, self.pages, flags, summaries)
        return self.attend(q, k, v, scaling, allowed)

    def decode_parts(self, q, parts, scaling, q_pos, summaries=None):
        """q: (B, H, n, d_k) over a cache's ``parts`` (``kv_cache.Part``: KV heads with their keys) → (out (B, H, n, d_v),
        how many stored slots the step read through pages, summed over (batch row, KV head); None: no store).
        ``summaries``: the layer's page summaries (``pages.page_summaries``; read-back; None: made from the step's keys)."""
        fetched = None
        B, H, n, _ = q.shape
        out = q.new_empty(B, H, n, parts[0].values.shape[-1])
        for p in parts:
            hq = self.query_heads(p.kv).to(q.device)
            one = len(parts) == 1 and len(hq) == H and bool((p.kv.cpu() == torch.arange(len(p.kv))).all())   # every head, in order
            q_p = q if one else q[:, hq]
            if p.whole and n == 1 and bool((self.per_kv(self.w_decode, p.kv) == FULL).all()):
                out[:, hq] = self.attend(q_p, p.keys, p.values, scaling, None)          # every key, all before the query
                continue
            mine = None
            if summaries is not None:   # its KV heads' rows of m, M and its query heads' column pages
                rows = summaries[5][p.kv.to(q.device)]
                mine = (*(x[:, rows.clamp_min(0)] for x in summaries[:2]), *(x[:, hq] for x in summaries[2:5]), rows)
            if p.store is not None and self.pages and n == 1 and mine is not None:     # read-back without joining the store
                o, read = self.decode_read_back(q_p, p, scaling, q_pos, mine)
                fetched = (fetched or 0.0) + read
            else:
                o = self.decode(q_p, p.keys, p.values, scaling, q_pos, p.positions, p.flags, kv=None if one else p.kv, summaries=mine)
                if p.stored is not None and self.pages:
                    fetched = (fetched or 0.0) + float((self.fetched & p.stored).sum())
            if one:
                return o, fetched
            out[:, hq] = o
        return out, fetched

    def decode_read_back(self, q, p, scaling, q_pos, summaries):
        """One decoding query over a part's resident slots and the pages it reads back from the part's store, the store
        not joined: the same S_h(i) as ``decode`` with ``read_back`` (``pages``), each chosen page gathered by position.

            candidates C_h(i) = {P : |P ∩ [0, i]| > |P ∩ (B_{w_h}(i) ∪ T_h)|}      (a key of P that h reads otherwise not)
            S_h(i) = B_{w_h}(i) ∪ T_h ∪ ⋃ {P ∩ O_h(i) : P ∈ top_K U_{h,P}(q) over C_h(i)}

        q (B, H_s·r, 1, d_k) at q_pos (1,); p a ``Part`` (resident keys, values, positions, flags) with its ``store``;
        summaries: ``pages.page_summaries``' parts of its KV heads and query heads.  Returns (out (B, H_s·r, 1, d_v), stored slots read,
        summed over (batch row, KV head)).
        """
        B, Hq, _, d = q.shape
        k_r, v_r, pos_r = p.keys, p.values, p.positions                                     # (B, H_s, L, ·), (B, H_s, L)
        H_s, L = k_r.shape[1], k_r.shape[2]
        r = Hq // H_s
        i, page, dev = int(q_pos[-1]), self.page, q.device
        flags = self.column_flags(pos_r, p.kv) if p.flags is None else p.flags              # (B, H_s, r, L)
        allowed = self.allowed(q_pos, pos_r, flags, p.kv)[:, :, :, 0]                       # (B, H_s, r, L): band ∪ columns
        w = self.per_kv(self.w_decode, p.kv).to(dev)                                        # (H_s, r)
        reads = self.per_kv(self.reads, p.kv).to(dev)                                       # (H_s, r)
        # candidates: a page holds a position ≤ i that is neither in h's band nor one of its columns
        P = i // page + 1
        start = torch.arange(P, device=dev) * page                                          # (P,)
        total = (start + page).clamp_max(i + 1) - start                                     # |P ∩ [0, i]|
        lo = (i - w).clamp_min(0)[..., None]                                                # (H_s, r, 1): the band's first
        in_band = ((start + page).clamp_max(i + 1) - torch.maximum(start, lo)).clamp_min(0)   # (H_s, r, P)
        col = flags & ~near(i, pos_r, w.view(1, H_s, r, 1)) & (pos_r >= 0)[:, :, None]     # (B, H_s, r, L): off the band
        pid = torch.where(col, pos_r[:, :, None] // page, P)
        n_col = torch.zeros(B, H_s, r, P + 1, dtype=torch.long, device=dev).scatter_add_(-1, pid, col.long())[..., :P]
        cand = (in_band + n_col < total) & reads[..., None]                                 # (B, H_s, r, P)
        U = summary_bound(q, summaries, P)[:, :, 0]                                          # (B, Hq, P)
        top = torch.topk(U.masked_fill(~cand.view(B, Hq, P), float("-inf")), min(self.pages, P), -1)
        j = (top.indices[..., None] * page + torch.arange(page, device=dev)).flatten(-2)   # (B, Hq, K·page) positions
        ok = torch.isfinite(top.values).repeat_interleave(page, -1) & (j <= i) & (j < lo.view(1, Hq, 1))   # off the band
        # each position's resident slot or store slot (its KV head's); a resident column of h is read already
        kv_local = torch.arange(H_s, device=dev).repeat_interleave(r)                        # (Hq,) within the part
        # a KV head's resident positions ascend along its slots but for the padding (−1) between the compacted slots and
        # the tokens appended since: their running maximum is sorted, a position's first slot there is its own
        b = torch.arange(B, device=dev).view(B, 1, 1)
        jc = torch.where(ok, j, i + 1)
        sorted_r = torch.cummax(pos_r, -1).values[:, kv_local]                              # (B, Hq, L)
        at = torch.searchsorted(sorted_r, jc).clamp_max(L - 1)                              # (B, Hq, K·page)
        slot_r = torch.where(torch.gather(sorted_r, -1, at) == jc, at, -1)                  # −1: not resident
        is_col = torch.gather(flags.reshape(B, Hq, L), -1, slot_r.clamp_min(0)) & (slot_r >= 0)
        table = p.store.store_slots()                                                       # (B, H_s, J)
        J = table.shape[-1]
        slot_s = torch.where(jc < J, table.reshape(B, H_s * J)[b, kv_local.view(1, Hq, 1) * J + jc.clamp_max(J - 1)], -1)
        ok &= ~is_col & ((slot_r >= 0) | (slot_s >= 0))
        from_store = ok & (slot_r < 0)
        S = p.store.store_keys.shape[2]
        row_r = kv_local.view(1, Hq, 1) * L + slot_r.clamp_min(0)                            # rows of (B, H_s·L, ·)
        row_s = kv_local.view(1, Hq, 1) * S + slot_s.clamp_min(0)
        k_p = torch.where(from_store[..., None], p.store.store_keys.reshape(B, H_s * S, d)[b, row_s],
                          k_r.reshape(B, H_s * L, d)[b, row_r])                              # (B, Hq, K·page, d)
        v_p = torch.where(from_store[..., None], p.store.store_values.reshape(B, H_s * S, -1)[b, row_s],
                          v_r.reshape(B, H_s * L, -1)[b, row_r])
        s_r = ((q.reshape(B, H_s, r, d) @ k_r.transpose(-1, -2)) * scaling).view(B, Hq, L)   # (B, Hq, L)
        s_p = (k_p @ q.view(B, Hq, d, 1)).squeeze(-1) * scaling                             # (B, Hq, K·page)
        a = masked_softmax(torch.cat([s_r, s_p], -1), torch.cat([allowed.reshape(B, Hq, L), ok], -1))
        o = (a[..., :L].view(B, H_s, r, L) @ v_r).view(B, Hq, -1) + (a[..., L:, None] * v_p).sum(-2)
        read = torch.zeros(B, H_s, S + 1, dtype=torch.bool, device=dev)                     # [S]: none
        read.view(B, H_s * (S + 1)).scatter_(-1, torch.where(from_store, kv_local.view(1, Hq, 1) * (S + 1) + slot_s, S).flatten(1), True)
        read[..., S] = False
        return o[:, :, None], float(read.sum())

    # ---- what the cache must keep ---------------------------------------------------------------
    def keep(self, k_pos, seen: int, flags=None, kv=None):
        """Which cached keys (B, H_s, L) of the KV heads ``kv`` (None: all) some query at position ≥ ``seen`` of this
        layer can still read.

            keep(j) = ∃ h of the KV head: w_h = FULL ∨ j ≥ seen − w_h ∨ j ∈ T_h     (w_h capped by a sliding window)
        """
        B, H_s, L = k_pos.shape
        r = self.H // self.H_kv
        w = torch.tensor([FULL if self.whole[h] else self.effective_w(h, seen) for h in range(self.H)])
        w = self.per_kv(w, kv).to(k_pos.device).view(1, H_s, r, 1)
        flags = self.column_flags(k_pos, kv) if flags is None else flags                  # (B, H_s, r, L)
        mine = (w == FULL) | near(seen, k_pos[:, :, None, :], w) | flags
        return mine.any(2) & (k_pos >= 0)


def attnlab_attention(module, query, key, value, attention_mask=None, dropout: float = 0.0, scaling=None, sliding_window=None, **kwargs):
    """transformers' attention-function signature: (B, H, n, d) q, (B, H_kv, m, d) k, v → ((B, n, H, d), None)."""
    # query: (B, H, n, d_k), key/value: (B, H_kv, m, ·)
    scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
    runner: LayerRunner | None = getattr(module, "attnlab_layer", None)
    if runner is None:
        raise RuntimeError(f"attnlab attention: layer {getattr(module, 'layer_idx', '?')} has no plan; use attnlab.llm.apply_plan(model, plan)")
    n, m = query.shape[2], key.shape[2]
    cache = runner.cache() if runner.cache is not None else None
    layer = None
    if cache is not None and runner.layer_idx < len(cache.layers) and cache.layers[runner.layer_idx].keys is key:
        layer = cache.layers[runner.layer_idx]
    if runner.recorder is not None:
        if m != n:
            raise RuntimeError("calibration runs one prefill per window (no cache)")
        kv = runner.kv_of.to(key.device)
        out = runner.recorder.observe(runner.layer_idx, query, key[:, kv], value[:, kv], scaling, runner.sliding)
    elif layer is None and m == n:
        out = runner.prefill(query, key, value, scaling)
    else:
        seen = layer.seen if layer is not None else m
        q_pos = torch.arange(seen - n, seen, device=query.device)
        if layer is not None and m == n == seen:   # first prefill into a PlanCache: the kernel, then compress
            out = runner.prefill(query, key, value, scaling)
            layer.flags = runner.column_flags(layer.positions)                            # the columns' slots, once
            layer.page = runner.page if runner.pages else None                             # read-back: a store, page summaries
            if runner.pages:   # each query head's, its own columns left out (stored sparsely); folded as keys arrive
                layer.summaries = page_summaries(key, runner.columns, runner.kv_of, runner.page, runner.reads)
        elif layer is not None:   # each part of the cache with its query heads (the store's slots joined last)
            out, fetched = runner.decode_parts(query, layer.parts(resident=bool(runner.pages) and n == 1), scaling, q_pos,
                                               layer.summaries)
            if runner.pages:
                layer.count_read(fetched)
        else:   # queries after keys from elsewhere (no PlanCache): every key at its position
            k_pos = torch.arange(m, device=key.device).expand(key.shape[0], key.shape[1], m)
            out = runner.decode(query, key, value, scaling, q_pos, k_pos)
    if layer is not None and layer.due():
        store = bool(runner.pages)
        if layer.evicted_at is None and len(layer.slabs) == 1:   # the first compaction: ragged by KV head, if heads differ
            keep = runner.keep(layer.positions, layer.seen, layer.flags)                  # (B, H_kv, L), once: keep may consume state
            kept = keep.sum(-1).amax(0)                                                   # (H_kv,) slots each KV head keeps
            if int(kept.max()) * len(kept) > RAGGED * int(kept.sum()):
                layer.split(runner.whole_kv())
                layer.compact(lambda slab: keep[:, slab.kv.to(keep.device)], store)
            else:
                layer.evict(keep, store)
        else:
            layer.compact(lambda slab: runner.keep(slab.positions, layer.seen, slab.flags, slab.kv if len(layer.slabs) > 1 else None),
                          store)
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Register ``attnlab_attention`` with transformers as ``attn_implementation="attnlab"``."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, attnlab_attention)


def attention_modules(model):
    """The attention modules of a transformers causal LM, by layer index."""
    mods = {}
    for mod in model.modules():
        if hasattr(mod, "layer_idx") and hasattr(mod, "q_proj") and hasattr(mod, "o_proj"):
            mods[int(mod.layer_idx)] = mod
    return [mods[i] for i in sorted(mods)]


def apply_plan(model, plan: Plan):
    """Run ``model`` with ``plan``: every attention head with its support; returns the model.

    Raises ``UserError`` if the plan was made for another model (layer / head counts).
    """
    plan.check(model)
    register()
    mods = attention_modules(model)
    for mod in mods:
        l = int(mod.layer_idx)
        sw = getattr(mod, "sliding_window", None)
        mod.attnlab_layer = LayerRunner(plan.heads[l], l, plan.num_kv_heads, int(sw) if sw else None,
                                        getattr(plan, "pages", 0), getattr(plan, "page", 16))
    model.set_attn_implementation(NAME)
    model.attnlab_plan = plan
    return model


def remove_plan(model) -> None:
    """Undo ``apply_plan``'s attributes: each layer's runner and the model's plan (the caller sets the implementation back)."""
    for mod in attention_modules(model):
        if hasattr(mod, "attnlab_layer"):
            del mod.attnlab_layer
    if hasattr(model, "attnlab_plan"):
        del model.attnlab_plan


def attach_cache(model, cache) -> None:
    """Let each layer's runner find ``cache`` (a PlanCache) to read its positions and compress it."""
    for mod in attention_modules(model):
        mod.attnlab_layer.cache = weakref.ref(cache)


def plan_reference(runner: LayerRunner, q, k, v, scaling):
    """Dense masked reference of a layer under its plan (tests): (B, H, n, n) mask, masked softmax."""
    # q: (B, H, n, d_k), k, v: (B, H_kv, n, ·) → (B, H, n, d_v)
    B, H, n, _ = q.shape
    pos = torch.arange(n, device=q.device)
    return runner.decode(q, k, v, scaling, pos, pos.expand(B, runner.H_kv, n))

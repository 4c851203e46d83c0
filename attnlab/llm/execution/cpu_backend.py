"""The CPU backend of the execution seam (``backend``): the native C kernel where it runs, PyTorch's paths elsewhere.

Prefill: the heads of a layer grouped by (w_h, K_h), each group in one call:

* a full group (w_h = FULL or ≥ n − 1): ``torch.nn.functional.scaled_dot_product_attention`` (causal);
* band + columns: the native kernel in place (``band_heads_attention``: q, k, v and out read and written where they
  lie), else the chunked band kernel (``sliding_window_attention``) with the columns as extra keys of every chunk;
* key blocks: chunks of b queries, each with its chosen blocks' keys (not columns) as extra keys;
* diagonals: band + columns by the native kernel in place, with its log-sum-exp, the diagonals' keys joined to it
  in spans of rows (``join_diagonals``); without the kernel, columns + diagonals as per-chunk extra keys of chunks of
  ``SLASH_CHUNK`` rows (``kernel_extras``: a diagonal slot owned by one query row, a key a column holds read once);

then the tail rows of each head with R_h > 0 read every causal key: one masked softmax for the heads of one R.
Decoding: the page table read as a mask over the cached slots, one masked softmax (GQA without copies), the
read-back pages' keys in the same softmax; the fused native step (``decode_fused``: band ∪ columns and the
read-back's pages chosen and read in one C call) where the inputs are CPU float32.  Every path runs on any device
(the native kernel only takes CPU float32 tensors).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.llm.execution.backend import AttentionBackend, PageKeys, PrefillParts, register_backend, tail_scores
from attnlab.llm.execution.diagonal_keys import join_diagonals
from attnlab.llm.execution.page_table import allowed_of
from attnlab.llm.plans.key_blocks import block_extras, block_keys
from attnlab.llm.plans.plan import FULL
from attnlab.llm.plans.slash_lines import SLASH_CHUNK, kernel_extras
from attnlab.nn.mechanisms import native
from attnlab.nn.mechanisms.sliding_window import band_heads_attention, native_heads_ready, sliding_window_attention
from attnlab.nn.softmax import masked_softmax
from attnlab.support import NO_DIAGONAL, Support

try:  # the kernel's own chunk of queries (extra keys are given per chunk)
    from attnlab.nn.mechanisms.sliding_window import kernel_chunk as chunk_size
except ImportError:  # pragma: no cover - the kernel before its rewrite
    from attnlab.nn.mechanisms.sliding_window import chunk_size

__all__ = ["CpuBackend", "attend"]


def attend(q, k, v, scaling, allowed):
    """softmax over the ``allowed`` keys: q (B, H_s·r, n, d_k), k, v (B, H_s, L, ·), allowed (B, H_s, r, n, L)
    (None: all).

    GQA without copies: the r query heads of a KV head are the r·n rows of one product with its keys (a
    broadcast ``(B, H_s, r, n, d) @ (B, H_s, 1, d, L)`` would copy every key r times a step).
    """
    B, H, n, d = q.shape
    H_s, L = k.shape[1], k.shape[2]
    r = H // H_s
    s = ((q.reshape(B, H_s, r * n, d) @ k.transpose(-1, -2)) * scaling).view(B, H_s, r, n, L)   # (B, H_s, r, n, L)
    a = masked_softmax(s, allowed)
    return (a.view(B, H_s, r * n, L) @ v).view(B, H, n, v.shape[-1])


def _trim(x, empty):
    """x (B, G, e) without the trailing slots that are empty in every row."""
    return x[..., : int((x != empty).sum(-1).max()) if x.numel() else 0]


class CpuBackend(AttentionBackend):
    name = "cpu"

    def prefill(self, parts: PrefillParts, q, k, v, scaling):
        # q: (B, H, n, d_k), k, v: (B, H_kv, n, ·) → (B, H, n, d_v)
        B, H, n, _ = q.shape
        kv_of = parts.kv_of.to(k.device)
        out = q.new_empty(B, n, H, v.shape[-1]).transpose(1, 2)   # transformers' layout: its transpose back is free
        groups: dict[tuple[int, int], list[int]] = {}
        for h in range(H):
            groups.setdefault((parts.w[h], parts.block_counts[h]), []).append(h)
        in_place = native_heads_ready(q, k, v)   # the native kernel reads and writes each group's heads where they lie
        b = parts.block
        for (w, K), hs in groups.items():
            idx = torch.tensor(hs, device=q.device)
            full = w == FULL or w >= n - 1
            cols = _trim(parts.columns[:, idx], -1)
            diags = _trim(parts.diagonals[:, idx], NO_DIAGONAL)
            if in_place and not full and not K:   # band + columns: no copies of q, k, v; slash lines joined after it by
                # log-sum-exp in row spans (diagonal_keys: memory O(span), not the chunked extras' O(n·s·c))
                L = q.new_empty(B, H, n) if diags.shape[-1] else None
                band_heads_attention(q, k, v, w, idx, kv_of[idx], out, columns=cols, scale=scaling, lse=L)
                if L is not None:
                    join_diagonals(q, k, v, idx, kv_of[idx], out, L, diags, cols, w, scaling)
                continue
            chosen = parts.blocks[:, idx, :, :K] if K and not full else None           # (B, |hs|, T, K)
            if in_place and chosen is not None and not diags.shape[-1]:   # the kernel reads each chunk's keys in place
                # the columns (read once a head), and each chunk's block keys
                # (a key that is a column: read as the column)
                keys = block_keys(chosen, n, b)                                        # (B, |hs|, T, K·b), −1: none
                band_heads_attention(q, k, v, w, idx, kv_of[idx], out, columns=cols, blocks=keys, chunk=b,
                                     scale=scaling)
                continue
            k_g, v_g = k[:, kv_of[idx]], v[:, kv_of[idx]]                              # (B, |hs|, n, ·): GQA, read once
            if full:
                # q's heads contiguous, as before the in-place kernel: a full plan stays bit-equal to transformers' SDPA
                out[:, idx] = F.scaled_dot_product_attention(q[:, idx].contiguous(), k_g, v_g, is_causal=True,
                                                             scale=scaling)
                continue
            if chosen is not None:   # without the kernel (or with diagonals, which a head with blocks does not
                # read): the chosen blocks as per-chunk extras, the columns beside them
                e_idx, e_own = block_extras(chosen, cols, n, b)
                out[:, idx] = sliding_window_attention(q[:, idx], k_g, v_g, w, causal=True, extra_idx=e_idx,
                                                       extra_own=e_own, chunk=b, scale=scaling)
                continue
            # without the kernel: columns + diagonals as per-chunk extras (a column's key read once)
            if diags.shape[-1]:
                e_idx, e_own, e_logit = kernel_extras(Support(w=w, columns=cols, diagonals=diags), n, SLASH_CHUNK)
                out[:, idx] = sliding_window_attention(q[:, idx], k_g, v_g, w, causal=True, extra_idx=e_idx,
                                                       extra_own=e_own, extra_logit=e_logit.to(q.dtype), unique=True,
                                                       chunk=SLASH_CHUNK, scale=scaling)
                continue
            extra_idx = extra_own = None
            if cols.shape[-1]:
                c = chunk_size(w)
                T = -(-n // c)
                extra_idx = cols.clamp_min(0)[:, :, None, :].expand(B, len(hs), T, cols.shape[-1])
                extra_own = (cols >= 0)[:, :, None, None, :]                           # empty slots (−1) read nothing
            # a head's columns are distinct (choose_columns) and empty slots are not owned: no de-duplication
            out[:, idx] = sliding_window_attention(q[:, idx], k_g, v_g, w, causal=True, extra_idx=extra_idx,
                                                   extra_own=extra_own, unique=True, chunk=chunk_size(w), scale=scaling)
        # the last R rows of a head with a tail read every causal key (exact: a = softmax(q_i·k_j τ) over j ≤ i on those
        # rows, the heads of one R together; a head run full already reads every key)
        tails: dict[int, list[int]] = {}
        for h in range(H):
            if parts.tails[h] and not (parts.w[h] == FULL or parts.w[h] >= n - 1):
                tails.setdefault(min(parts.tails[h], n), []).append(h)
        for R, hs in tails.items():
            idx = torch.tensor(hs, device=q.device)
            out[:, idx, n - R :] = torch.softmax(tail_scores(q, k, kv_of, idx, R, scaling), -1) @ v[:, kv_of[idx]]
        return out

    def decode_fused(self, q, k, v, positions, flags, w, reads, summaries, store, i, *, sliding, page, pages, scale,
                     rows=None, mean_pages=0):
        # the native C step (CPU float32, built): band ∪ columns ∪ the read-back's pages, chosen and read in one call
        if not native.decode_ready(q, k, v, positions, *(store or ())):
            return None
        if pages and summaries.m.shape[2] < i // page + 1:   # summaries short of the query's page: the tensor step
            return None
        return native.decode_read_back(q, k, v, positions, flags, w, reads, summaries, store, i, sliding=sliding,
                                       page=page, pages=pages, scale=scale, rows=rows, mean_pages=mean_pages)

    def decode(self, q, k, v, scaling, table=None, pages: PageKeys | None = None):
        # q: (B, H_s·r, t, d_k), k, v: (B, H_s, L, ·), table.slots: (B, H_s, r, t, S) → (B, H_s·r, t, d_v)
        # the CPU reads the table as its mask over the L slots (one masked product: bit-equal to the dense step)
        allowed = None if table is None else allowed_of(table, k.shape[2])                  # (B, H_s, r, t, L)
        if pages is None:
            return attend(q, k, v, scaling, allowed)
        B, Hq, _, d = q.shape
        H_s, L = k.shape[1], k.shape[2]
        r = Hq // H_s
        s_r = ((q.reshape(B, H_s, r, d) @ k.transpose(-1, -2)) * scaling).view(B, Hq, L)      # (B, Hq, L)
        s_p = (pages.keys @ q.view(B, Hq, d, 1)).squeeze(-1) * scaling                       # (B, Hq, X)
        ok_r = torch.ones(B, Hq, L, dtype=torch.bool, device=q.device) if allowed is None else allowed.reshape(B, Hq, L)
        a = masked_softmax(torch.cat([s_r, s_p], -1), torch.cat([ok_r, pages.ok], -1))
        o = (a[..., :L].view(B, H_s, r, L) @ v).view(B, Hq, -1) + (a[..., L:, None] * pages.values).sum(-2)
        return o[:, :, None]


register_backend("cpu", CpuBackend)

"""Diagonal keys joined to a band's softmax by log-sum-exp: the CPU backend's slash lines, row span by row span.

A head of band half-width w, key columns C and diagonals Δ (MInference's slash lines, offsets δ < 0) reads at row i

    N(i) = B(i) ∪ C ∪ D(i),   D(i) = {i + δ : δ ∈ Δ, 0 ≤ i + δ < i − w, i + δ ∉ C}

(a key on the band or in a column is read once, there).  The native kernel gives the band ∪ columns part as its
output o_b and log-sum-exp L_b; the diagonals' scores s_iδ = τ q_i·k_{i+δ} join them exactly:

    L_i = log(e^{L_b,i} + Σ_δ e^{s_iδ}),   o_i = e^{L_b,i − L_i} o_b,i + Σ_δ e^{s_iδ − L_i} v_{i+δ}

The rows go in spans of r: a span gathers its r·s diagonal keys and values (G·r·s·d floats, ≤ ``SPAN_FLOATS``),
where the chunked kernel's extras held every chunk's c·s slots at once, each scored by all c queries of the chunk
(O(n·s·c·d) for a layer: 8.9 GB for Gemma-3's 4 global heads at 8K, more than this machine at 16K).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.support import NO_DIAGONAL, column_mask

__all__ = ["SPAN_FLOATS", "join_diagonals"]

SPAN_FLOATS = 1 << 24   # the diagonal keys and values of one span: G·r·s·d floats each (64 MB float32)


def join_diagonals(q: Tensor, k: Tensor, v: Tensor, heads: Tensor, kv_heads: Tensor, out: Tensor, lse: Tensor,
                   diagonals: Tensor, columns: Tensor, w: int, scale: float) -> None:
    """Join the diagonals' keys to out[:, heads] (the band ∪ columns rows, normalised) in place (module docstring).

    q, out: (B, H, n, d); k, v: (B, H_kv, n, ·); heads, kv_heads: (G,) the query heads and the KV head each reads;
    lse: (B, H, n) L_b of those rows; diagonals: (B, G, s) offsets δ (``NO_DIAGONAL``: empty); columns: (B, G, g)
    (−1: empty).  Rows with no diagonal key keep o_b.
    """
    B, _, n, d = q.shape
    G, s = len(heads), diagonals.shape[-1]
    if not s:
        return
    dev = q.device
    heads, kv_heads = heads.to(dev), kv_heads.to(dev)
    delta = diagonals.to(dev)                                                         # (B, G, s)
    delta = torch.where(delta == NO_DIAGONAL, -(n + 1), delta)[:, :, None, :]       # (B, G, 1, s): empty → before key 0
    in_columns = column_mask(columns.to(dev), n)                                      # (B, G, n): 1[j ∈ C]
    b_ix = torch.arange(B, device=dev)[:, None, None, None]                           # (B, 1, 1, 1)
    h_kv = kv_heads[None, :, None, None]                                              # (1, G, 1, 1)
    r = max(1, SPAN_FLOATS // max(1, G * s * d))
    for r0 in range(0, n, r):
        r1 = min(n, r0 + r)
        i = torch.arange(r0, r1, device=dev)[:, None]                                 # (r, 1)
        j = i + delta                                                                 # (B, G, r, s): key i + δ
        ok = (j >= 0) & (j < i - w)                                                   # off the band, causal
        jc = j.clamp(0, n - 1)
        ok &= ~torch.gather(in_columns, -1, jc.flatten(-2)).view(jc.shape)                  # a column's key: read there
        k_d, v_d = k[b_ix, h_kv, jc], v[b_ix, h_kv, jc]                               # (B, G, r, s, d)
        s_d = torch.einsum("bgrd,bgrsd->bgrs", q[:, heads, r0:r1], k_d) * scale       # (B, G, r, s): τ q_i·k_{i+δ}
        s_d = s_d.masked_fill(~ok, float("-inf"))
        L_b = lse[:, heads, r0:r1]                                                    # (B, G, r)
        L = torch.logaddexp(L_b, torch.logsumexp(s_d, -1))                            # (B, G, r)
        p_d = torch.exp(s_d - L[..., None])                                           # (B, G, r, s); 0 where masked
        o = torch.exp(L_b - L)[..., None] * out[:, heads, r0:r1] + torch.einsum("bgrs,bgrsd->bgrd", p_d, v_d)
        out[:, heads, r0:r1] = o.to(out.dtype)

"""Band + global tokens (Longformer / BigBird's ITC).

    A = softmax(QKᵀ/√d_k + M),  M_ij = 0 if |i − j| ≤ w  or  j < g  or  i < g,  else −∞

The first g tokens are global: every query attends to their keys (g key
columns) and, as in BigBird and Longformer, their own queries attend to every
key (g full rows; ``global_rows=False`` keeps only the columns, the structured
formulation's view).  Cost O(n·(2w+1+g) + g·m): the band and the g columns in
one pass of the chunked kernel (the columns are e = g extra keys shared by every
chunk), the g rows as one small dense attention.

A sequence shorter than g simply has all its tokens global (full attention):
with padded batches and step-by-step decoding, short sequences are normal.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.mask_mods import MaskMod, global_rows
from attnlab.nn.mechanisms.sliding_window import kernel_chunk, sliding_window_attention
from attnlab.nn.mechanisms.sparse import SparsePattern, scaled_scores
from attnlab.nn.softmax import masked_softmax
from attnlab.support import Support, check_num_pos, check_w


def row_attention(q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
    """Dense attention of the first rows queries (the global tokens' rows); O(rows·m)."""
    # q: (B, H, rows, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, rows, d_v)
    rows, m = q.shape[-2], k.shape[-2]
    allowed = None
    if mask.causal:
        allowed = (torch.arange(m, device=q.device)[None, :]
                   <= torch.arange(rows, device=q.device)[:, None])[None, None]
    if mask.key_keep is not None:
        keep = mask.key_keep[:, None, None, :]
        allowed = keep if allowed is None else allowed & keep
    return masked_softmax(scaled_scores(q, k), allowed) @ v


class Global(SparsePattern):
    name = "global"

    def __init__(self, w: int, g: int, global_rows: bool = True):
        super().__init__()
        self.w, self.g, self.global_rows = check_w(w), check_num_pos(g, name="g"), bool(global_rows)

    def support(self, m: int) -> Support:
        """S = B_w ∪ (rows × {0, …, g−1}): the band and the global key columns."""
        return Support(w=self.w, columns=torch.arange(min(self.g, m)))

    def pattern(self, n: int, m: int) -> MaskMod:
        p = self.support(m).mask_mod()
        return p | global_rows(self.g) if self.global_rows else p

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
        n, m = q.shape[-2], k.shape[-2]
        c = kernel_chunk(self.w)
        idx = self.support(m).kernel_extra_idx(n, c).to(q.device)[None, None]  # (1, 1, T, g)
        out = sliding_window_attention(q, k, v, self.w, causal=mask.causal, key_keep=mask.key_keep, extra_idx=idx,
                                       chunk=c)
        rows = min(self.g, n) if self.global_rows else 0
        if rows > 0:
            out = torch.cat([row_attention(q[:, :, :rows], k, v, mask), out[:, :, rows:]], dim=2)
        return out

    def extra_repr(self) -> str:
        return f"w={self.w}, g={self.g}, global_rows={self.global_rows}"

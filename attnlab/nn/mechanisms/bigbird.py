"""BigBird: global + window + random (Zaheer et al. 2020).

    A = softmax(QKᵀ/√d_k + M),
    M_ij = 0 if |i − j| ≤ w  or  j < g  or  i < g  or  j ∈ R_{⌊i/c⌋},  else −∞

R_t are r key positions drawn for each block t of c = ``chunk_size(w)`` queries
from a generator seeded with ``seed`` (the same draw for every batch entry and
head; deterministic in (n, m, r, c, seed), so weights() and forward() agree and
a model is reproducible).  Cost O(n·(2w+1+g+r) + g·m): the g global columns and
the r random keys are the e = g + r extra keys of each chunk in the chunked
kernel, the g global rows a small dense attention.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.global_ import row_attention
from attnlab.nn.mechanisms.mask_mods import MaskMod, global_rows, random_, random_table
from attnlab.nn.mechanisms.sliding_window import chunk_size, sliding_window_attention
from attnlab.nn.mechanisms.sparse import SparsePattern
from attnlab.support import Support, check_num_pos, check_w


class BigBird(SparsePattern):
    name = "bigbird"

    def __init__(self, w: int, g: int, r: int, seed: int = 0):
        super().__init__()
        if r < 0:
            raise ValueError(f"r: number of random keys must be >= 0, got {r}")
        self.w, self.g, self.r, self.seed = check_w(w), check_num_pos(g, name="g"), int(r), int(seed)
        self.block = chunk_size(self.w)

    def random_keys(self, n: int, m: int) -> Tensor:
        """R: (⌈n/c⌉, r) random key positions per query block."""
        return random_table(n, m, self.r, self.block, self.seed)

    def support(self, m: int) -> Support:
        """S = B_w ∪ (rows × {0, …, g−1}): the band and the global key columns (the random keys come on top)."""
        return Support(w=self.w, columns=torch.arange(min(self.g, m)))

    def pattern(self, n: int, m: int) -> MaskMod:
        p = self.support(m).mask_mod() | global_rows(self.g)
        return p | random_(self.random_keys(n, m), self.block) if self.r > 0 else p

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
        n, m = q.shape[-2], k.shape[-2]
        c = self.block
        idx = self.support(m).kernel_extra_idx(n, c)  # (T, g)
        if self.r > 0:
            idx = torch.cat([idx, self.random_keys(n, m)], dim=1)
        out = sliding_window_attention(
            q, k, v, self.w, causal=mask.causal, key_keep=mask.key_keep, extra_idx=idx.to(q.device)[None, None], chunk=c
        )
        rows = min(self.g, n)
        if rows > 0:
            out = torch.cat([row_attention(q[:, :, :rows], k, v, mask), out[:, :, rows:]], dim=2)
        return out

    def extra_repr(self) -> str:
        return f"w={self.w}, g={self.g}, r={self.r}, seed={self.seed}"

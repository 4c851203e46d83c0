"""Band (sliding-window) attention, optionally dilated (Longformer).

    A = softmax(QKᵀ/√d_k + M),  M_ij = 0 if |i − j| ≤ w (and δ | j − i) else −∞

Each query sees the 2w+1 keys around it (every δ-th key with dilation δ):
cost O(n·(2w+1)) with the chunked kernel of ``sliding_window`` instead of O(n²).
"""

from __future__ import annotations

from torch import Tensor

from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.mask_mods import MaskMod, band
from attnlab.nn.mechanisms.sliding_window import dilated_sliding_window_attention
from attnlab.nn.mechanisms.sparse import SparsePattern
from attnlab.support import check_w


class Band(SparsePattern):
    name = "band"

    def __init__(self, w: int, dilation: int = 1):
        super().__init__()
        if dilation < 1:
            raise ValueError(f"dilation: must be >= 1, got {dilation}")
        self.w, self.dilation = check_w(w), int(dilation)

    def pattern(self, n: int, m: int) -> MaskMod:
        return band(self.w, self.dilation)  # δ = 1: Support(w).mask_mod()

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
        out = dilated_sliding_window_attention(q, k, v, self.w, self.dilation, causal=mask.causal,
                                               key_keep=mask.key_keep)
        return out

    def extra_repr(self) -> str:
        return f"w={self.w}, dilation={self.dilation}"

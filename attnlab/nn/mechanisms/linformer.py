"""Linformer: low-rank attention by projecting the length axis (Wang et al. 2020).

    head = softmax(Q (E K)ᵀ / √d_k) (F V),    E, F ∈ R^{k'×N} learned

The m keys and values are projected to k' = ``proj_len`` rows, so the cost is
O(n·k'·d) instead of O(n·m·d).  E and F are fixed-size parameters: N =
``max_len`` is the longest sequence the mechanism accepts (a length m ≤ N uses
the first m columns of E and F).  Padded keys are zeroed before the projection.
The equivalent dense matrix, the one multiplied into V, is
    A = softmax(Q (E K)ᵀ / √d_k) F[:, :m]   (n × m; rows need not sum to 1).
Linformer mixes all positions into each projected key, so it cannot respect a
causal mask: it is refused for decoder self-attention.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.base import Mechanism


class Linformer(Mechanism):
    name = "linformer"
    supports_causal = False

    def __init__(self, max_len: int, proj_len: int):
        super().__init__()
        if proj_len < 1:
            raise ValueError(f"proj_len: Linformer's projection length k' must be >= 1, got {proj_len}")
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        self.max_len, self.proj_len = int(max_len), int(proj_len)
        self.E = nn.Parameter(torch.randn(proj_len, max_len) / math.sqrt(max_len))
        self.F = nn.Parameter(torch.randn(proj_len, max_len) / math.sqrt(max_len))

    def _check(self, k: Tensor, mask: Mask) -> int:
        m = k.shape[-2]
        if mask.causal:
            raise ValueError("linformer cannot be used with a causal mask (decoder self-attention): "
                             "E K mixes future keys into every projected key")
        if m > self.max_len:
            raise ValueError(f"linformer: a sequence of {m} keys is longer than its projection "
                             f"(max_len = {self.max_len}); build it with a larger max_len")
        return m

    def _projected(self, k: Tensor, v: Tensor, mask: Mask) -> tuple[Tensor, Tensor]:
        # k: (B, H, m, d_k), v: (B, H, m, d_v) → E K: (B, H, k', d_k), F V: (B, H, k', d_v)
        m = self._check(k, mask)
        if mask.key_keep is not None:
            keep = mask.key_keep[:, None, :, None].to(k.dtype)
            k, v = k * keep, v * keep
        return self.E[:, :m] @ k, self.F[:, :m] @ v

    def weights(self, q: Tensor, k: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k) → A: (B, H, n, m)
        m = self._check(k, mask)
        k_proj, _ = self._projected(k, k[..., :1], mask)
        p = torch.softmax(q @ k_proj.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)  # (B, H, n, k')
        a = p @ self.F[:, :m]
        if mask.key_keep is not None:
            a = a * mask.key_keep[:, None, None, :].to(a.dtype)
        return a

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
        k_proj, v_proj = self._projected(k, v, mask)
        return F.scaled_dot_product_attention(q, k_proj, v_proj)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, proj_len={self.proj_len}"

"""Softmax restricted to a sparse pattern: the dense reference of band, global, BigBird.

    A = softmax(QKᵀ/√d_k + M),  M_ij = 0 if pattern(i, j) ∧ allowed_ij else −∞

``pattern`` is a ``MaskMod`` (``mask_mods``); ``allowed`` is the model's
padding / causal ``Mask``.  Subclasses give the pattern for a length pair
(n, m) and an efficient ``forward``; this class gives the dense ``weights``.
"""

from __future__ import annotations

import math

from torch import Tensor

from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.base import Mechanism
from attnlab.nn.mechanisms.mask_mods import MaskMod
from attnlab.nn.softmax import masked_softmax


def scaled_scores(q: Tensor, k: Tensor) -> Tensor:
    """s_ij = q_i·k_j / √d_k."""
    # q: (B, H, n, d_k), k: (B, H, m, d_k) → (B, H, n, m)
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def pattern_allowed(pattern: MaskMod, mask: Mask, B: int, H: int, n: int, m: int, device=None) -> Tensor:
    """pattern(i, j) ∧ allowed_ij as a dense bool (B, H, n, m)."""
    allowed = pattern.dense(B, H, n, m, device)
    dense = mask.allowed(n, m, device)
    return allowed if dense is None else allowed & dense


class SparsePattern(Mechanism):
    """A mechanism whose weights are the softmax restricted to ``self.pattern(n, m)``."""

    def pattern(self, n: int, m: int) -> MaskMod:
        raise NotImplementedError

    def weights(self, q: Tensor, k: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k) → A: (B, H, n, m)
        B, H, n, _ = q.shape
        m = k.shape[-2]
        return masked_softmax(scaled_scores(q, k), pattern_allowed(self.pattern(n, m), mask, B, H, n, m, q.device))

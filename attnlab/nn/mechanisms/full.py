"""Full attention: every query sees every allowed key.

    A = softmax(s(Q, K) + M),   M_ij = 0 if allowed else −∞
    Attention(Q, K, V) = A V

With the scaled dot product s = QKᵀ/√d_k the efficient forward is PyTorch's
fused ``scaled_dot_product_attention`` (flash-style on CPU and GPU); with the
additive or Gaussian scorers, or when the weights are asked for, A is formed
explicitly and the returned weights are exactly the ones multiplied into V.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.base import Mechanism
from attnlab.nn.scoring import ScaledDot
from attnlab.nn.softmax import masked_softmax


class Full(Mechanism):
    name = "full"

    def __init__(self, scoring: nn.Module | None = None, dropout: float = 0.0):
        super().__init__()
        self.scoring = scoring if scoring is not None else ScaledDot()
        self.dropout = dropout

    def weights(self, q: Tensor, k: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k) → A: (B, H, n, m)
        s = self.scoring(q, k)
        return masked_softmax(s, mask.allowed(q.shape[-2], k.shape[-2], q.device))

    def mix(self, a: Tensor, v: Tensor) -> Tensor:
        # a: (B, H, n, m), v: (B, H, m, d_v) → (B, H, n, d_v); attention dropout while training
        p = self.dropout if self.training else 0.0
        return (F.dropout(a, p) if p > 0 else a) @ v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
        if not isinstance(self.scoring, ScaledDot):
            return super().attend(q, k, v, mask)
        p = self.dropout if self.training else 0.0
        n, m = q.shape[-2], k.shape[-2]
        if mask.key_keep is None:
            # causal with n = m: SDPA's own causal kernel; otherwise nothing masked
            is_causal = mask.causal and n == m
            allowed = mask.allowed(n, m, q.device) if (mask.causal and n != m) else None
            return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p, is_causal=is_causal)
        allowed = mask.allowed(n, m, q.device)  # (B, 1, n|1, m)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)
        # a row with no allowed key gives 0, never NaN (see attnlab.nn.softmax)
        empty = ~allowed.any(dim=-1, keepdim=True)  # (B, 1, n|1, 1)
        return out.masked_fill(empty, 0.0) if bool(empty.any()) else out

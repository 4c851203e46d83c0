"""First-order Taylor attention: exp(q̂·k̂) ≈ 1 + q̂·k̂.

    A_ij = (1 + q̂_i·k̂_j) / Σ_j' (1 + q̂_i·k̂_j'),    x̂ = x / ‖x‖₂

With ℓ2-normalised q and k, q̂·k̂ ∈ [−1, 1], so every weight is ≥ 0 (the first-
order expansion of the softmax kernel is then a valid attention).  It is
linear attention with the feature map φ(x) = [1, x̂] (D = d_k + 1), since
φ(q)·φ(k) = 1 + q̂·k̂; by associativity
    V'_i = (Σ_j v_j + q̂_iᵀ Σ_j k̂_j v_jᵀ) / (m_i + q̂_iᵀ Σ_j k̂_j)
costs O((n + m)·d_k·d_v).  Causal masks by prefix sums, as in ``linear``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.nn.mechanisms.linear import FeatureMapAttention


class Taylor(FeatureMapAttention):
    name = "taylor"

    def feature_map(self, x: Tensor) -> Tensor:
        # x: (B, H, n, d_k) → φ(x) = [1, x̂]: (B, H, n, d_k + 1)
        x_hat = F.normalize(x, dim=-1)
        return torch.cat([torch.ones_like(x_hat[..., :1]), x_hat], dim=-1)

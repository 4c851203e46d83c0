"""Linear attention with a feature map φ (Katharopoulos et al. 2020).

    V'_i = φ(Q_i)ᵀ Σ_j φ(K_j) V_jᵀ  /  φ(Q_i)ᵀ Σ_j φ(K_j),     φ(x) = elu(x) + 1

Equivalently A_ij = φ(q_i)·φ(k_j) / Σ_j' φ(q_i)·φ(k_j') over the allowed keys
(``weights``), but by associativity the forward never forms A: the key
summary S = Σ_j φ(k_j) v_jᵀ (D × d_v) and z = Σ_j φ(k_j) cost O(m·D·d_v) once,
each query O(D·d_v).  Padded keys are dropped from the sums.  Causal (j ≤ i):
prefix sums S_i = Σ_{j ≤ i} φ(k_j) v_jᵀ, taken chunk by chunk — an exclusive
cumulative sum of per-chunk summaries plus a small masked c × c product inside
each chunk — so memory is O((n/c)·D·d_v), not O(n·D·d_v).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.base import Mechanism

CAUSAL_CHUNK = 64


def _safe_div(num: Tensor, den: Tensor) -> Tensor:
    # a query with no allowed key (den = 0) gets 0
    return num / torch.where(den > 0, den, torch.ones_like(den))


class FeatureMapAttention(Mechanism):
    """A_ij ∝ φ(q_i)·φ(k_j); subclasses give φ."""

    def feature_map(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def _features(self, q: Tensor, k: Tensor, mask: Mask) -> tuple[Tensor, Tensor]:
        # → φ(q): (B, H, n, D), φ(k) with padded keys zeroed: (B, H, m, D)
        phi_q, phi_k = self.feature_map(q), self.feature_map(k)
        if mask.key_keep is not None:
            phi_k = phi_k * mask.key_keep[:, None, :, None].to(phi_k.dtype)
        return phi_q, phi_k

    def weights(self, q: Tensor, k: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k) → A: (B, H, n, m)
        phi_q, phi_k = self._features(q, k, mask)
        a = phi_q @ phi_k.transpose(-2, -1)
        if mask.causal:
            n, m = q.shape[-2], k.shape[-2]
            a = a * (torch.arange(m, device=q.device)[None, :] <= torch.arange(n, device=q.device)[:, None])
        return _safe_div(a, a.sum(-1, keepdim=True))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
        phi_q, phi_k = self._features(q, k, mask)
        if not mask.causal:
            S = phi_k.transpose(-2, -1) @ v  # (B, H, D, d_v)  Σ_j φ(k_j) v_jᵀ
            z = phi_k.sum(-2)  # (B, H, D)      Σ_j φ(k_j)
            return _safe_div(phi_q @ S, (phi_q @ z[..., None]))
        return self._causal(phi_q, phi_k, v)

    @staticmethod
    def _causal(phi_q: Tensor, phi_k: Tensor, v: Tensor) -> Tensor:
        # phi_q: (B, H, n, D), phi_k: (B, H, n, D), v: (B, H, n, d_v) → (B, H, n, d_v)
        B, H, n, D = phi_q.shape
        if phi_k.shape[-2] != n:
            raise ValueError("causal linear attention needs as many keys as queries, "
                             f"got {n} queries and {phi_k.shape[-2]} keys")
        c = min(CAUSAL_CHUNK, n)
        T = -(-n // c)

        def chunks(x: Tensor) -> Tensor:
            # (B, H, n, ·) → (B, H, T, c, ·), zero-padded
            return F.pad(x, (0, 0, 0, T * c - n)).view(B, H, T, c, x.shape[-1])

        qc, kc, vc = chunks(phi_q), chunks(phi_k), chunks(v)
        S_chunk = kc.transpose(-2, -1) @ vc  # (B, H, T, D, d_v)
        z_chunk = kc.sum(-2)  # (B, H, T, D)
        S_before = S_chunk.cumsum(2) - S_chunk  # Σ over earlier chunks (exclusive prefix sum)
        z_before = z_chunk.cumsum(2) - z_chunk
        inner = (qc @ kc.transpose(-2, -1)).tril()  # (B, H, T, c, c): φ(q_i)·φ(k_j), j ≤ i in the chunk
        num = qc @ S_before + inner @ vc
        den = (qc @ z_before[..., None]).squeeze(-1) + inner.sum(-1)
        out = _safe_div(num, den[..., None])
        return out.reshape(B, H, T * c, -1)[:, :, :n]


class Linear(FeatureMapAttention):
    """φ(x) = elu(x) + 1 > 0."""

    name = "linear"

    def feature_map(self, x: Tensor) -> Tensor:
        return F.elu(x) + 1.0

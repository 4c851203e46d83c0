"""Multi-head attention (Vaswani et al. 2017, §3.2.2).

    head_h = Attention(X_q W_q^h, X_kv W_k^h, X_kv W_v^h)
           = softmax(Q_h K_hᵀ / √d_k) V_h                       (B, n, d_k)
    MultiHead(X_q, X_kv) = Concat(head_1, …, head_H) W_c          (W_c = W_O)

equivalently, splitting W_c by heads into blocks W_{c,h} ∈ R^{d_k×d},
    MultiHead(X)_i = Σ_h W_{c,h}ᵀ Σ_j α_ij^(h) V^(h)(x_j)
(Conti, *The Math behind Transformers*, multi-head attention section).

How A V is computed is the job of the *mechanism* (``attnlab.nn.mechanisms``):
full softmax attention by default, or band, linear, … .  With
``value_rank = r`` the value map is factored W_V = V_u V_d (rank ≤ r).
"""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms import Mechanism


class MultiHeadAttention(nn.Module):
    def __init__(self, d: int, heads: int, mechanism: Mechanism, value_rank: int = 0, bias: bool = True):
        super().__init__()
        assert d % heads == 0, "d must be divisible by heads"
        self.d, self.H, self.d_k = d, heads, d // heads
        self.W_q = nn.Linear(d, d, bias=bias)
        self.W_k = nn.Linear(d, d, bias=bias)
        if value_rank > 0:  # W_V = V_u V_d: d → r → d
            self.W_v = nn.Sequential(nn.Linear(d, value_rank, bias=False), nn.Linear(value_rank, d, bias=bias))
        else:
            self.W_v = nn.Linear(d, d, bias=bias)
        self.W_c = nn.Linear(d, d, bias=bias)
        self.mechanism = mechanism

    def split_heads(self, x: Tensor) -> Tensor:
        # x: (B, n, d) → (B, H, n, d_k)
        B, n, _ = x.shape
        return x.view(B, n, self.H, self.d_k).transpose(1, 2)

    def forward(self, x_q: Tensor, x_kv: Tensor, mask: Mask,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        # x_q: (B, n, d), x_kv: (B, m, d) → out (B, n, d), A (B, H, n, m) or None
        q = self.split_heads(self.W_q(x_q))  # (B, H, n, d_k)
        k = self.split_heads(self.W_k(x_kv))  # (B, H, m, d_k)
        v = self.split_heads(self.W_v(x_kv))  # (B, H, m, d_k)
        heads, a = self.mechanism(q, k, v, mask, need_weights=need_weights)  # (B, H, n, d_k)
        B, _, n, _ = heads.shape
        concat = heads.transpose(1, 2).reshape(B, n, self.d)  # Concat(head_1, …, head_H)
        return self.W_c(concat), a

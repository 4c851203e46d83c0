"""What a mechanism is: two views of the same attention.

    Attention(Q, K, V) = A V,   A = weights(Q, K) ∈ R^{n×m}, rows summing to 1
                                 over the allowed keys (or a normalised
                                 approximation of it)

``weights(q, k, mask)`` returns the dense matrix A (for analysis, pictures and
tests); ``forward(q, k, v, mask)`` returns A V, computed without forming A
where the mechanism allows it.  Every efficient ``forward`` is tested against
``weights(q, k, mask) @ v``.  A mechanism may hold parameters (Linformer's E
and F, a learned scorer), so it is an ``nn.Module``; it sees the projected,
head-split q, k, v, never the model's hidden states.
"""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.nn.mask import Mask


class Mechanism(nn.Module):
    """Base class.  Subclasses implement ``weights``; ``forward`` defaults to A V."""

    name: str = "?"
    supports_causal: bool = True

    def weights(self, q: Tensor, k: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k) → A: (B, H, n, m)
        raise NotImplementedError

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v), A or None
        a = self.weights(q, k, mask)
        return a @ v, (a if need_weights else None)

"""What a mechanism is: two views of the same attention.

    Attention(Q, K, V) = A V,   A = weights(Q, K) ∈ R^{n×m}, rows summing to 1
                                 over the allowed keys (or a normalised
                                 approximation of it)

``weights(q, k, mask)`` returns the dense matrix A (for analysis, pictures and
tests); ``attend(q, k, v, mask)`` returns A V, computed without forming A
where the mechanism allows it.  ``forward(q, k, v, mask, need_weights)``
chooses between the two, here and only here: with ``need_weights`` the output
is ``weights(...) @ v`` and A is returned with it (the weights shown are the
ones used), else ``attend``.  Every efficient ``forward`` is tested against
``weights(q, k, mask) @ v``.  A mechanism may hold parameters (Linformer's E
and F, a learned scorer), so it is an ``nn.Module``; it sees the projected,
head-split q, k, v, never the model's hidden states.
"""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.nn.mask import Mask


class Mechanism(nn.Module):
    """Base class.  Subclasses implement ``weights`` and, when they can do better than A V, ``attend``."""

    name: str = "?"
    supports_causal: bool = True  # may it run under a causal mask (decoder self-attention)?

    def weights(self, q: Tensor, k: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k) → A: (B, H, n, m)
        raise NotImplementedError

    def mix(self, a: Tensor, v: Tensor) -> Tensor:
        """A V from the dense weights (a mechanism with attention dropout drops entries of A here)."""
        # a: (B, H, n, m), v: (B, H, m, d_v) → (B, H, n, d_v)
        return a @ v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        """A V, efficiently where the mechanism allows; the default forms A."""
        # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
        return self.mix(self.weights(q, k, mask), v)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v), A or None
        if need_weights:
            a = self.weights(q, k, mask)
            return self.mix(a, v), a
        return self.attend(q, k, v, mask), None

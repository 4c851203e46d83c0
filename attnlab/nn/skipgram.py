"""Skip-gram word vectors (Mikolov et al. 2013; the text-representation chapter).

Each word w has a centre vector v_w (row of W_in) and a context vector u_w (row
of W_out).  For a centre word c and a word o inside its window,

    P(o | c) = exp(u_oᵀ v_c) / Σ_{w=1..V} exp(u_wᵀ v_c)

Full-softmax loss of one pair (small vocabularies):

    J(c, o) = −log P(o | c) = −u_oᵀ v_c + log Σ_w exp(u_wᵀ v_c)

with the closed-form gradient (ŷ = P(· | c), y = one-hot of o):

    ∂J/∂v_c = Σ_w ŷ_w u_w − u_o = Uᵀ (ŷ − y)
    ∂J/∂u_w = (ŷ_w − y_w) v_c

Negative sampling (large vocabularies): k words n_1 … n_k drawn from the unigram
distribution raised to 3/4 replace the sum over the whole vocabulary,

    J(c, o) = −log σ(u_oᵀ v_c) − Σ_{i=1..k} log σ(−u_{n_i}ᵀ v_c)

    ∂J/∂v_c = (σ(u_oᵀ v_c) − 1) u_o + Σ_i σ(u_{n_i}ᵀ v_c) u_{n_i}
    ∂J/∂u_o = (σ(u_oᵀ v_c) − 1) v_c,     ∂J/∂u_{n_i} = σ(u_{n_i}ᵀ v_c) v_c

The word vectors kept after training are the centre vectors W_in.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class SkipGram(nn.Module):
    """W_in (V, d) centre vectors v_w, W_out (V, d) context vectors u_w.

    ``sparse=True`` makes the embedding gradients sparse (only the rows of the
    batch), for ``torch.optim.SparseAdam`` on large vocabularies.
    """

    def __init__(self, vocab_size: int, d: int, sparse: bool = False):
        super().__init__()
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
        if d < 1:
            raise ValueError(f"d must be positive, got {d}")
        self.W_in = nn.Embedding(vocab_size, d, sparse=sparse)
        self.W_out = nn.Embedding(vocab_size, d, sparse=sparse)
        nn.init.uniform_(self.W_in.weight, -0.5 / d, 0.5 / d)  # word2vec's initialisation
        nn.init.zeros_(self.W_out.weight)

    def loss_full(self, c: Tensor, o: Tensor) -> Tensor:
        """mean over the batch of J(c, o) = −u_oᵀ v_c + log Σ_w exp(u_wᵀ v_c)."""
        # c, o: (B,) word ids
        v_c = self.W_in(c)  # (B, d)
        scores = v_c @ self.W_out.weight.T  # (B, V): u_wᵀ v_c
        return F.cross_entropy(scores, o)

    def loss_negative(self, c: Tensor, o: Tensor, negatives: Tensor) -> Tensor:
        """mean over the batch of J(c, o) = −log σ(u_oᵀ v_c) − Σ_i log σ(−u_{n_i}ᵀ v_c)."""
        # c, o: (B,), negatives: (B, k) word ids
        v_c = self.W_in(c)  # (B, d)
        u_o = self.W_out(o)  # (B, d)
        u_n = self.W_out(negatives)  # (B, k, d)
        pos = (u_o * v_c).sum(-1)  # (B,)
        neg = torch.bmm(u_n, v_c[:, :, None])[..., 0]  # (B, k)
        return -(F.logsigmoid(pos) + F.logsigmoid(-neg).sum(-1)).mean()


def full_softmax_gradient(v_c: Tensor, U: Tensor, o: int) -> tuple[Tensor, Tensor]:
    """Closed form of the text for one pair: (∂J/∂v_c, ∂J/∂U) of J = −log P(o | c).

        ∂J/∂v_c = Uᵀ (ŷ − y),    ∂J/∂U = (ŷ − y) v_cᵀ,    ŷ = softmax(U v_c)
    """
    # v_c: (d,), U: (V, d) → (d,), (V, d)
    y_hat = torch.softmax(U @ v_c, dim=0)  # (V,)
    y = torch.zeros_like(y_hat)
    y[o] = 1.0
    return U.T @ (y_hat - y), torch.outer(y_hat - y, v_c)


def negative_sampling_gradient(v_c: Tensor, u_o: Tensor, u_n: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Closed form for one pair with k negatives: (∂J/∂v_c, ∂J/∂u_o, ∂J/∂u_n).

        ∂J/∂v_c = (σ(u_oᵀv_c) − 1) u_o + Σ_i σ(u_{n_i}ᵀv_c) u_{n_i}
        ∂J/∂u_o = (σ(u_oᵀv_c) − 1) v_c,   ∂J/∂u_{n_i} = σ(u_{n_i}ᵀv_c) v_c
    """
    # v_c: (d,), u_o: (d,), u_n: (k, d) → (d,), (d,), (k, d)
    g_o = torch.sigmoid(u_o @ v_c) - 1.0  # scalar
    g_n = torch.sigmoid(u_n @ v_c)  # (k,)
    return g_o * u_o + g_n @ u_n, g_o * v_c, torch.outer(g_n, v_c)

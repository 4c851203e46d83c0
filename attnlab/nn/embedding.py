"""Input representation: scaled token embedding plus sinusoidal position.

    x_t = √d · W_E[token_t] + f(t),     then dropout (p = 0.1 by default)

    f(t)_{2k}   = sin(ω_k t)
    f(t)_{2k+1} = cos(ω_k t),           ω_k = 1 / N^{2k/d}

(Vaswani et al. 2017, §3.4–3.5; Conti, *The Math behind Transformers*, the
positional-encoding section).  N is ``base`` (10000 in the paper).  For any
offset s, f(t+s) is a fixed rotation of f(t) in each (2k, 2k+1) plane, which
is what lets attention read relative positions (tested in test_paper_math).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_encoding(max_len: int, d: int, base: float = 10000.0) -> Tensor:
    """The table f(t) for t = 0 … max_len−1.  Returns (max_len, d)."""
    t = torch.arange(max_len, dtype=torch.float64)[:, None]  # (T, 1)
    k = torch.arange(d // 2, dtype=torch.float64)[None, :]  # (1, d/2)
    omega = 1.0 / base ** (2 * k / d)  # ω_k
    f = torch.zeros(max_len, d, dtype=torch.float64)
    f[:, 0::2] = torch.sin(omega * t)
    f[:, 1::2] = torch.cos(omega * t)
    return f.float()


class TokenEmbedding(nn.Module):
    """x ↦ √d · W_E[x]  (the √d scale of Vaswani et al. §3.4)."""

    def __init__(self, vocab_size: int, d: int, pad_id: int = 0):
        super().__init__()
        self.d = d
        self.weight = nn.Parameter(torch.empty(vocab_size, d))
        nn.init.normal_(self.weight, mean=0.0, std=d**-0.5)
        with torch.no_grad():
            self.weight[pad_id].zero_()

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, n) token ids → (B, n, d)
        return nn.functional.embedding(x, self.weight) * math.sqrt(self.d)


class TransformerInput(nn.Module):
    """dropout(√d · W_E[x_t] + f(t)) — the input of the first block."""

    def __init__(self, embedding: TokenEmbedding, max_len: int, base: float = 10000.0, dropout: float = 0.1):
        super().__init__()
        self.embedding = embedding
        self.max_len = max_len
        self.register_buffer("f", sinusoidal_encoding(max_len, embedding.d, base), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, n) → (B, n, d)
        n = x.shape[1]
        if n > self.max_len:
            raise ValueError(f"sequence length {n} exceeds the model's max_len {self.max_len}")
        return self.dropout(self.embedding(x) + self.f[:n])

"""Position-wise feed-forward network (Vaswani et al. 2017, eq. 2).

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2,    W_1 ∈ R^{d×d_ff}, W_2 ∈ R^{d_ff×d}
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class FeedForward(nn.Module):
    def __init__(self, d: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.W_1 = nn.Linear(d, d_ff)
        self.W_2 = nn.Linear(d_ff, d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, n, d) → (B, n, d)
        return self.W_2(self.dropout(torch.relu(self.W_1(x))))

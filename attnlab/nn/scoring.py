"""Scoring functions s(q, k): how a query and a key are compared.

    scaled dot product   s_ij = q_i·k_j / √d_k                 (Vaswani et al. 2017, eq. 1)
    additive (Bahdanau)  s_ij = w_vᵀ tanh(W_q q_i + W_k k_j)    (Bahdanau et al. 2014)
    Gaussian kernel      s_ij = −‖q_i − k_j‖² / 2σ²             so exp(s_ij) = exp(−‖q−k‖²/2σ²)

The softmax of the Gaussian score is the normalised Gaussian kernel
exp(−‖q_i−k_j‖²/2σ²) / Σ_j' exp(−‖q_i−k_j'‖²/2σ²).  Each scorer maps
q: (B, H, n, d_k), k: (B, H, m, d_k) to s: (B, H, n, m).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class ScaledDot(nn.Module):
    """s_ij = q_i·k_j / √d_k."""

    name = "dot"

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k) → (B, H, n, m)
        return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


class Additive(nn.Module):
    """s_ij = w_vᵀ tanh(W_q q_i + W_k k_j), one (W_q, W_k, w_v) per head."""

    name = "additive"

    def __init__(self, heads: int, d_k: int, d_a: int | None = None):
        super().__init__()
        d_a = d_a or d_k
        self.W_q = nn.Parameter(torch.randn(heads, d_k, d_a) / math.sqrt(d_k))
        self.W_k = nn.Parameter(torch.randn(heads, d_k, d_a) / math.sqrt(d_k))
        self.w_v = nn.Parameter(torch.randn(heads, d_a) / math.sqrt(d_a))

    def project_keys(self, k: Tensor) -> Tensor:
        # k: (B, H, m, d_k) → W_k k: (B, H, m, d_a); computed once when the keys are fixed (RNN decoders)
        return torch.einsum("bhmd,hda->bhma", k, self.W_k)

    def score_projected(self, q: Tensor, k_a: Tensor) -> Tensor:
        # q: (B, H, n, d_k), k_a = W_k k: (B, H, m, d_a) → (B, H, n, m)
        q_a = torch.einsum("bhnd,hda->bhna", q, self.W_q)  # (B, H, n, d_a)
        e = torch.tanh(q_a[:, :, :, None, :] + k_a[:, :, None, :, :])  # (B, H, n, m, d_a)
        return torch.einsum("bhnma,ha->bhnm", e, self.w_v)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k) → (B, H, n, m)
        return self.score_projected(q, self.project_keys(k))


class Gaussian(nn.Module):
    """s_ij = −‖q_i − k_j‖² / 2σ²."""

    name = "gaussian"

    def __init__(self, sigma: float = 1.0):
        super().__init__()
        self.sigma = sigma

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k) → (B, H, n, m)
        sq_dist = (q * q).sum(-1)[..., :, None] + (k * k).sum(-1)[..., None, :] - 2 * q @ k.transpose(-2, -1)
        return -sq_dist.clamp_min(0.0) / (2 * self.sigma**2)


def build_scoring(name: str, heads: int, d_k: int, sigma: float = 1.0) -> nn.Module:
    if name == "dot":
        return ScaledDot()
    if name == "additive":
        return Additive(heads, d_k)
    if name == "gaussian":
        return Gaussian(sigma)
    raise ValueError(f"scoring must be one of dot, additive, gaussian; got {name!r}")

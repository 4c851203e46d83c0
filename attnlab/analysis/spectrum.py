"""The spectrum of attention matrices: singular values, ranks, norms.

For A = U Σ Vᵀ with σ_1 ≥ σ_2 ≥ … ≥ σ_r ≥ 0 (r = min(n, m)):

    ‖A‖₂ = σ_1                                   spectral norm
    ‖A‖_F = (Σ_k σ_k²)^½                         Frobenius norm
    energy(k) = Σ_{i≤k} σ_i² / Σ_i σ_i²          cumulative-energy curve
    rank_τ(A) = min { k : energy(k) ≥ τ }        energy rank (Linformer's long tail)
    erank(A) = exp(−Σ_k p_k log p_k),  p_k = σ_k / Σ_i σ_i
                                                 effective rank (Roy & Vetterli 2007)

A row-stochastic n×m matrix has σ_1 ≥ √(n/m) (its rows sum to 1: A 1_m = 1_n,
so ‖A‖₂ ≥ ‖1_n‖/‖1_m‖; σ_1 ≥ 1 for square heads), and a
near-identity head is full rank with a flat spectrum (erank ≈ n) — the thesis's
"full rank with low l2 norm" — while a head attending one column has rank ≈ 1.
Padding (``lengths``) is zeroed first; zero singular values add nothing to
either rank, so padded and cut matrices give the same results.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.analysis.inputs import as_batch, valid_mask

__all__ = ["Spectrum", "cumulative_energy", "effective_rank", "energy_rank", "singular_values", "spectrum"]


def singular_values(a, *, lengths=None, key_lengths=None) -> np.ndarray:
    """σ_1 ≥ … ≥ σ_r of every matrix, shape ``(..., min(n, m))``."""
    a = as_batch(a, "a", nonnegative=False)
    # a: (..., n, m)
    mask = valid_mask(a.shape, lengths, key_lengths)
    if mask is not None:
        a = np.where(mask, a, 0.0)
    return np.linalg.svd(a, compute_uv=False)


def cumulative_energy(sigma: np.ndarray) -> np.ndarray:
    """energy(k) = Σ_{i≤k} σ_i² / Σ σ_i², shape ``(..., r)`` (1 where A = 0)."""
    # sigma: (..., r) decreasing
    e = np.cumsum(np.square(sigma), axis=-1)
    total = e[..., -1:]
    return np.divide(e, total, out=np.ones_like(e), where=total > 0)


def energy_rank(sigma: np.ndarray, tau: float = 0.9) -> np.ndarray:
    """rank_τ = smallest k with energy(k) ≥ τ, shape ``(...)`` (0 where A = 0, like ``effective_rank``)."""
    if not 0 < tau <= 1:
        raise ValueError(f"tau: expected an energy fraction in (0, 1], got {tau!r}")
    k = (cumulative_energy(sigma) < tau - 1e-12).sum(-1) + 1
    return np.where(sigma.max(-1, initial=0.0) > 0, k, 0)


def effective_rank(sigma: np.ndarray) -> np.ndarray:
    """Roy–Vetterli effective rank exp(H(p)), p_k = σ_k / Σ σ_i, shape ``(...)`` (0 where A = 0)."""
    total = sigma.sum(-1, keepdims=True)
    p = np.divide(sigma, total, out=np.zeros_like(sigma), where=total > 0)
    h = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(-1)
    return np.where(total[..., 0] > 0, np.exp(h), 0.0)


@dataclass(frozen=True)
class Spectrum:
    """Spectral summary of a batch; shapes ``(...)`` unless said."""

    sigma: np.ndarray             # (..., r)
    energy: np.ndarray            # (..., r) cumulative-energy curve
    spectral_norm: np.ndarray
    frobenius_norm: np.ndarray
    effective_rank: np.ndarray    # Roy–Vetterli
    energy_rank: np.ndarray       # rank_τ
    tau: float


def spectrum(a, tau: float = 0.9, *, lengths=None, key_lengths=None) -> Spectrum:
    """Singular values, norms, effective and energy ranks of every matrix of ``a``."""
    sigma = singular_values(a, lengths=lengths, key_lengths=key_lengths)
    return Spectrum(
        sigma=sigma,
        energy=cumulative_energy(sigma),
        spectral_norm=sigma[..., 0],
        frobenius_norm=np.sqrt(np.square(sigma).sum(-1)),
        effective_rank=effective_rank(sigma),
        energy_rank=energy_rank(sigma, tau),
        tau=tau,
    )

"""How far an approximation X is from an attention matrix A.

    ‖A − X‖₁   = Σ_ij |a_ij − x_ij|                   entrywise 1-norm (the thesis's |A − X|)
    ‖A − X‖_F  = (Σ_ij (a_ij − x_ij)²)^½               Frobenius
    mean error = ‖A − X‖₁ / (n·m)                      the thesis's "Mean Error" (n·m real entries)
    captured   = Σ_ij min(a_ij, max(x_ij, 0)) / Σ_ij a_ij
                                                       fraction of the attention mass X keeps
    output     = ‖(A − X) V‖_F / ‖A V‖_F               relative error of the head's output

For a fit that stores some entries of A exactly and zeros the rest,
captured = stored mass / total mass and ‖A − X‖₁ = (1 − captured)·Σ a_ij.
All functions reduce the last two axes and keep the batch ``(...)``; padding
(``lengths``/``key_lengths``) is excluded from sums and from n·m.
"""

from __future__ import annotations

import numpy as np

from attnlab.analysis.inputs import as_batch, valid_mask

__all__ = ["frobenius_distance", "l1_distance", "mass_captured", "mean_error", "output_error"]


def _pair(a, x, lengths, key_lengths):
    a = as_batch(a, "a", nonnegative=False)
    x = as_batch(x, "x", nonnegative=False)
    # a, x: (..., n, m)
    if a.shape[-2:] != x.shape[-2:]:
        raise ValueError(f"x: matrix shape {x.shape[-2:]} differs from a's {a.shape[-2:]}")
    try:
        shape = np.broadcast_shapes(a.shape, x.shape)
    except ValueError:
        raise ValueError(f"x: batch shape {x.shape} does not broadcast with a's {a.shape}") from None
    mask = valid_mask(shape, lengths, key_lengths)
    if mask is not None:
        a = np.where(mask, a, 0.0)
        x = np.where(mask, x, 0.0)
    return a, x, mask


def _entries(a, mask) -> np.ndarray:
    """Number of real entries n·m of each matrix, shape (...)."""
    if mask is None:
        return np.full(a.shape[:-2], a.shape[-2] * a.shape[-1], dtype=np.float64)
    return mask.sum((-2, -1)).astype(np.float64)


def l1_distance(a, x, *, lengths=None, key_lengths=None) -> np.ndarray:
    """‖A − X‖₁ = Σ_ij |a_ij − x_ij|, shape (...)."""
    a, x, _ = _pair(a, x, lengths, key_lengths)
    return np.abs(a - x).sum((-2, -1))


def frobenius_distance(a, x, *, lengths=None, key_lengths=None) -> np.ndarray:
    """‖A − X‖_F, shape (...)."""
    a, x, _ = _pair(a, x, lengths, key_lengths)
    return np.sqrt(np.square(a - x).sum((-2, -1)))


def mean_error(a, x, *, lengths=None, key_lengths=None) -> np.ndarray:
    """‖A − X‖₁ / (n·m): the thesis's Mean Error (Min_distance / n² for n×n), shape (...)."""
    a, x, mask = _pair(a, x, lengths, key_lengths)
    return np.abs(a - x).sum((-2, -1)) / _entries(a, mask)


def mass_captured(a, x, *, lengths=None, key_lengths=None) -> np.ndarray:
    """Σ min(a_ij, max(x_ij, 0)) / Σ a_ij: the fraction of the attention mass X keeps, shape (...)."""
    a, x, _ = _pair(a, x, lengths, key_lengths)
    total = a.sum((-2, -1))
    kept = np.minimum(a, np.maximum(x, 0.0)).sum((-2, -1))
    return np.divide(kept, total, out=np.ones_like(kept), where=total > 0)


def output_error(a, x, v, *, lengths=None, key_lengths=None) -> np.ndarray:
    """‖(A − X)V‖_F / ‖AV‖_F: relative error of the head output, shape (...).

    ``v``: values of shape ``(..., m, d_v)`` (padded keys' rows are ignored).
    """
    a, x, _ = _pair(a, x, lengths, key_lengths)
    v = as_batch(v, "v", nonnegative=False)
    # a, x: (..., n, m); v: (..., m, d_v)
    if v.shape[-2] != a.shape[-1]:
        raise ValueError(f"v: expected {a.shape[-1]} rows (one per key), got shape {v.shape}")
    num = np.linalg.norm((a - x) @ v, axis=(-2, -1))
    den = np.linalg.norm(a @ v, axis=(-2, -1))
    return np.divide(num, den, out=np.where(num > 0, np.inf, 0.0), where=den > 0)

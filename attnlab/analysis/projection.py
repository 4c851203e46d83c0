"""The band space B_w and the (shifted) band projection.

    B_w = { B ∈ R^{n×m} : b_ij = 0 whenever |i − j| > w }          (half-width w)

More generally a band shifted by a diagonal offset o keeps |j − i − o| ≤ w
(o = −1: "attend to the previous token", o = +1: "to the next one"); the
thesis's "up to a proper shift".

Dimension.  B_w is spanned by the unit matrices E_ij of its free coordinates,
so dim B_w = #{(i, j) : |i − j| ≤ w}.  For a square n×n matrix the main
diagonal has n entries and the k-th diagonal above and below n − k each:

    dim B_w = n + 2·Σ_{k=1..w} (n − k)

(``band_dimension`` counts the entries directly, which also covers n×m.)

Best approximation.  For the entrywise 1-norm ‖A − X‖₁ = Σ_ij |a_ij − x_ij|
and the Frobenius norm ‖A − X‖_F² = Σ_ij (a_ij − x_ij)² the error is a sum of
one term per entry.  For X ∈ B_w the entries in the band are free and those
outside are 0, so the sum splits as

    Σ_{|i−j|≤w} φ(a_ij − x_ij)  +  Σ_{|i−j|>w} φ(a_ij)      (φ = |·| or (·)²)

The second sum does not depend on X; each term of the first is ≥ 0 and is 0
for x_ij = a_ij.  Hence the truncation band_w(A) (keep the band, zero the rest)
is a best approximation for both norms (the unique one for Frobenius, and for
the 1-norm too: any other choice makes some term positive), with error
Σ_{|i−j|>w} |a_ij| (resp. its squares' root): the off-band mass.
"""

from __future__ import annotations

import numpy as np

from attnlab.analysis.inputs import as_batch, check_w, valid_mask
from attnlab.support import band_of

__all__ = [
    "band_dimension",
    "band_mask",
    "band_mass_by_offset",
    "best_offsets",
    "project_band",
]


def band_mask(n: int, m: int | None = None, w: int = 0, offset=0) -> np.ndarray:
    """Boolean ``(..., n, m)`` mask of the (shifted) band ``|j − i − offset| ≤ w``.

    ``offset`` may be an integer or an array of shape ``(...)`` (one offset per head).
    """
    m = n if m is None else m
    return band_of(n, m, w, np.asarray(offset))  # attnlab.support: the one definition of the band


def band_dimension(n: int, w: int, m: int | None = None) -> int:
    """dim B_w = #{(i, j) : |i − j| ≤ w} (= n + 2·Σ_{k=1..w}(n − k) for square n×n), 0 ≤ w < max(n, m).

    w = n − 1 already gives the whole space (dimension n·m for square matrices); a wider band is
    rejected like everywhere else in ``analysis``.
    """
    if n < 1 or (m is not None and m < 1):
        raise ValueError(f"n: matrix sides must be >= 1, got n={n}, m={m}")
    w = check_w(w, max(n, n if m is None else m))
    return int(band_mask(n, m, w).sum())


def project_band(a, w: int, offset=0, *, lengths=None, key_lengths=None) -> np.ndarray:
    """Best approximation of ``a`` in B_w (shifted by ``offset``): the truncation.

        band_w(A)_ij = a_ij  if |j − i − offset| ≤ w,  else 0

    Optimal for the entrywise 1-norm and for Frobenius (module docstring).
    """
    a = as_batch(a, "a", nonnegative=False)
    # a: (..., n, m)
    n, m = a.shape[-2:]
    w = check_w(w, max(n, m))
    keep = band_mask(n, m, w, offset)
    mask = valid_mask(a.shape, lengths, key_lengths)
    if mask is not None:
        keep = keep & mask
    return np.where(keep, a, 0.0)


def band_mass_by_offset(a, w: int = 0, *, lengths=None, key_lengths=None) -> tuple[np.ndarray, np.ndarray]:
    """Mass of the band of half-width ``w`` for every diagonal offset.

        D_d = Σ_i |a_{i, i+d}|            (mass of diagonal d = j − i)
        M_o = Σ_{|d − o| ≤ w} D_d          (mass of the band shifted by o)

    Returns ``(offsets, M)``: offsets ``−(n−1)..(m−1)`` and ``M`` of shape ``(..., n + m − 1)``.
    """
    a = as_batch(a, "a", nonnegative=False)
    # a: (..., n, m)
    n, m = a.shape[-2:]
    w = check_w(w, max(n, m))
    mask = valid_mask(a.shape, lengths, key_lengths)
    if mask is not None:
        a = np.where(mask, a, 0.0)
    batch = a.shape[:-2]
    n_diag = n + m - 1
    d_index = (np.arange(m)[None, :] - np.arange(n)[:, None]) + (n - 1)  # (n, m) in 0..n+m-2
    flat = np.abs(a).reshape(-1, n * m)  # (B, n*m)
    b = flat.shape[0]
    bins = (np.arange(b)[:, None] * n_diag + d_index.reshape(1, -1)).ravel()
    diag = np.bincount(bins, weights=flat.ravel(), minlength=b * n_diag).reshape(b, n_diag)  # D_d
    csum = np.concatenate([np.zeros((b, 1)), np.cumsum(diag, axis=1)], axis=1)  # (B, n_diag + 1)
    idx = np.arange(n_diag)
    hi = np.minimum(idx + w, n_diag - 1) + 1
    lo = np.maximum(idx - w, 0)
    band = csum[:, hi] - csum[:, lo]  # M_o
    return np.arange(-(n - 1), m), band.reshape(*batch, n_diag)


def best_offsets(a, w: int = 0, k: int = 1, *, max_shift: int | None = None, lengths=None,
                 key_lengths=None) -> np.ndarray:
    """The ``k`` diagonal offsets whose band of half-width ``w`` carries the most mass.

    Returns integers of shape ``(..., k)`` (``(...)`` when ``k == 1``), best first;
    ties go to the offset nearest 0 (then the negative one).  ``max_shift``
    restricts the search to ``|o| ≤ max_shift``.
    """
    offsets, mass = band_mass_by_offset(a, w, lengths=lengths, key_lengths=key_lengths)
    # mass: (..., n + m - 1)
    if max_shift is not None:
        if max_shift < 0:
            raise ValueError(f"max_shift: must be >= 0, got {max_shift}")
        mass = np.where(np.abs(offsets) <= max_shift, mass, -np.inf)
    if not 1 <= k <= int(np.isfinite(mass[(0,) * (mass.ndim - 1)]).sum()):
        raise ValueError(f"k: must be between 1 and the number of candidate offsets, got {k}")
    # order candidates by |o| (then sign) so that a stable sort breaks ties toward 0
    pref = np.lexsort((offsets, np.abs(offsets)))
    order = np.argsort(-mass[..., pref], axis=-1, kind="stable")[..., :k]
    best = offsets[pref][order]
    return best[..., 0] if k == 1 else best

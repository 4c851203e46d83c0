"""The thesis's validation protocol: random search in Σ1, Σ2(w), Σ3.

For each head A (n×m) and each family Σ_f, draw ``n_attempts`` random
matrices X ∈ Σ_f (see ``families``) and keep the nearest one overall in the
entrywise 1-norm

    Min_distance(A) = min_{f, k} Σ_ij |a_ij − x^{(f,k)}_ij|,
    Mean Error(A)   = Min_distance(A) / (n·m)          (= Min_distance / n² in the thesis)

as in its Tables 16/17 (n = 16, w = 3, num-pos = 2; w = 10, num-pos = 1).
Σ2 uses the half-width ``w``; Σ3 uses ``num_pos`` columns with random windows.
The thesis does not fix the noise level of Ẽ; here it defaults to one entry
per row (density 1/m) of size ≤ ε = 0.05, and Σ2 drops cells with p = 0.3.

The draws are shared by all heads of the batch (each head still meets
``n_attempts`` independent draws per family), so a batch gives exactly the
results of its heads one by one for the same seed.  With padding, each draw
is cut to the head's real ``lengths × key_lengths`` block and its rows are
renormalised.  The loop runs over draws, never over heads or entries.

This search ignores the structure of A: its best draw is typically no closer
than the zero matrix (distance Σ a_ij = n).  ``structured_fit`` is the exact
counterpart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.analysis.families import sigma1, sigma2, sigma3
from attnlab.analysis.inputs import as_batch, check_num_pos, check_w, valid_mask

__all__ = ["FAMILIES", "RandomSearch", "random_search"]

FAMILIES = ("sigma1", "sigma2", "sigma3")


@dataclass(frozen=True)
class RandomSearch:
    """Result of ``random_search``; batch shape ``(...)``."""

    min_distance: np.ndarray  # (...) Min_distance
    mean_error: np.ndarray    # (...) Min_distance / (n·m)
    family: np.ndarray        # (...) index into FAMILIES of the nearest draw
    family_min: np.ndarray    # (..., 3) nearest draw of each family


def random_search(
    a,
    w: int,
    num_pos: int,
    *,
    n_attempts: int = 30,
    p: float = 0.3,
    density: float | None = None,
    eps: float = 0.05,
    seed=None,
    lengths=None,
    key_lengths=None,
    max_chunk_bytes: int = 1 << 27,
) -> RandomSearch:
    """Run the thesis's random-search protocol on every head of ``a`` (module docstring).

    ``a``: non-negative ``(..., n, m)``; ``seed``: an int or a ``numpy.random.Generator``.
    """
    a = as_batch(a, "a")
    # a: (..., n, m)
    n, m = a.shape[-2:]
    w = check_w(w, max(n, m))
    num_pos = check_num_pos(num_pos, m)
    if isinstance(n_attempts, bool) or not isinstance(n_attempts, (int, np.integer)) or n_attempts < 1:
        raise ValueError(f"n_attempts: expected an integer >= 1, got {n_attempts!r}")
    density = 1.0 / m if density is None else density
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    mask = valid_mask(a.shape, lengths, key_lengths)
    if mask is not None:
        a = np.where(mask, a, 0.0)
    batch = a.shape[:-2]
    flat = a.reshape(-1, 1, n, m)  # (B, 1, n, m)
    fmask = None if mask is None else mask.reshape(-1, 1, n, m)
    draws = (
        sigma1(n, m, size=n_attempts, density=density, eps=eps, rng=rng),
        sigma2(n, m, w=w, p=p, size=n_attempts, density=density, eps=eps, rng=rng),
        sigma3(n, m, num_pos=num_pos, size=n_attempts, density=density, eps=eps, rng=rng),
    )  # each (n_attempts, n, m)
    chunk = max(1, int(max_chunk_bytes // (8 * flat.shape[0] * n * m)))
    family_min = np.empty((flat.shape[0], len(draws)))
    for f, x_f in enumerate(draws):
        best = np.full(flat.shape[0], np.inf)
        for start in range(0, n_attempts, chunk):
            x = x_f[None, start : start + chunk]  # (1, c, n, m)
            if fmask is not None:  # cut each draw to the head's real block, renormalise rows
                x = np.where(fmask, x, 0.0)
                row = x.sum(-1, keepdims=True)
                x = np.where(row > 0, x / np.where(row > 0, row, 1.0), 0.0)
            d = np.abs(flat - x).sum((-2, -1))  # (B, c)
            best = np.minimum(best, d.min(-1))
        family_min[:, f] = best
    entries = (np.full(flat.shape[0], n * m) if mask is None
               else mask.reshape(-1, n, m).sum((-2, -1))).astype(np.float64)
    min_distance = family_min.min(-1)
    return RandomSearch(
        min_distance=min_distance.reshape(batch),
        mean_error=(min_distance / entries).reshape(batch),
        family=family_min.argmin(-1).reshape(batch),
        family_min=family_min.reshape(*batch, len(draws)),
    )

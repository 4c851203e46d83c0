"""The thesis's random search beside the optimal structured fit, head by head.

For every head A (n×n, row-stochastic):

    random   Min_distance = min over 3·n_attempts draws of Σ1, Σ2(w), Σ3 of ‖A − X‖₁
    optimal  ‖A − X*‖₁ with X* = band_w(A) + num_pos columns + s sparse entries
    ratio    = random Mean Error / optimal Mean Error    (Mean Error = distance / n²)

``compare_fits`` validates the heads once (square, finite, non-negative, row
sums — warning or renormalising) and returns one record per head.
"""

from __future__ import annotations

import numpy as np

from attnlab.analysis.inputs import check_attention, check_num_pos, check_w
from attnlab.analysis.structured_fit import structured_fit
from attnlab.analysis.validation import random_search

__all__ = ["FIELDS", "compare_fits"]

FIELDS = (
    "head",
    "random_min_distance",
    "random_mean_error",
    "optimal_distance",
    "optimal_mean_error",
    "ratio",
    "mass_captured",
    "stored_entries",
)


def compare_fits(
    a,
    w: int,
    num_pos: int,
    s: int | None = None,
    *,
    n_attempts: int = 30,
    seed=None,
    eps: float | None = None,
    renormalize: bool = False,
    name: str = "attention",
) -> list[dict]:
    """One dict per head with the keys ``FIELDS`` (``head`` = index along the batch).

    ``a``: ``(H, n, n)`` or ``(n, n)``.
    """
    a, _ = check_attention(a, name, square=True, renormalize=renormalize)
    a = a.reshape(-1, *a.shape[-2:])  # (H, n, n)
    n = a.shape[-1]
    check_w(w, n)
    check_num_pos(num_pos, n)
    rs = random_search(a, w, num_pos, n_attempts=n_attempts, seed=seed)
    fit = structured_fit(a, w, num_pos, s, eps=eps)
    ratio = np.divide(rs.mean_error, fit.mean_error, out=np.full(rs.mean_error.shape, np.inf), where=fit.mean_error > 0)
    return [
        {
            "head": h,
            "random_min_distance": float(rs.min_distance[h]),
            "random_mean_error": float(rs.mean_error[h]),
            "optimal_distance": float(fit.l1[h]),
            "optimal_mean_error": float(fit.mean_error[h]),
            "ratio": float(ratio[h]),
            "mass_captured": float(fit.mass_captured[h]),
            "stored_entries": int(fit.stored_entries[h]),
        }
        for h in range(a.shape[0])  # building the records only; all numbers were computed batched
    ]

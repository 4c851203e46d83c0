"""The 95 % Wilson score interval of an accuracy measured on n prompts (Wilson 1927; Newcombe 1998, method 3).

For k prompts found of n, p̂ = k / n and z = Φ⁻¹(0.975) ≈ 1.96:

    centre = (p̂ + z² / 2n) / (1 + z² / n)
    half   = z / (1 + z² / n) · √( p̂ (1 − p̂) / n + z² / 4n² )
    [lo, hi] = [centre − half, centre + half]

Unlike the normal approximation p̂ ± z √(p̂(1 − p̂)/n), it stays inside [0, 1] and is not empty at k = 0 or k = n:
10/10 reads [0.72, 1], 8/10 reads [0.49, 0.94].  Two methods on the same prompts whose intervals overlap are not
told apart by those prompts.  A score in (0, 1) per prompt (RULER's string_match_all on several keys) counts as
that fraction of a prompt found.
"""

from __future__ import annotations

import math

__all__ = ["Z95", "wilson", "interval_text", "separated"]

Z95 = 1.959963984540054   # Φ⁻¹(0.975)


def wilson(k: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson interval [lo, hi] of k successes in n trials (k may be fractional: a mean score times n)."""
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if not -1e-9 <= k <= n + 1e-9:               # a mean score × n may miss an end by a rounding
        raise ValueError(f"k must lie in [0, n] = [0, {n}], got {k}")
    k = min(max(k, 0.0), n)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def interval_text(k: float, n: int) -> str:
    """``k/n [lo–hi %]``, the interval in whole percents, e.g. ``8/10 [49–94 %]``."""
    lo, hi = wilson(k, n)
    found = f"{k:.0f}" if abs(k - round(k)) < 1e-9 else f"{k:.1f}"
    return f"{found}/{n} [{100 * lo:.0f}–{100 * hi:.0f} %]"


def separated(a: tuple[float, int], b: tuple[float, int]) -> bool:
    """Whether the 95 % intervals of (k_a, n_a) and (k_b, n_b) do not overlap: a difference the prompts resolve."""
    lo_a, hi_a = wilson(*a)
    lo_b, hi_b = wilson(*b)
    return hi_a < lo_b or hi_b < lo_a

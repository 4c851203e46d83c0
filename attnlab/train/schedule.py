"""Learning-rate schedule: linear warm-up, then inverse square root.

    lr(t) = lr_peak · min(t / t_w, √(t_w / t)),    t = 1, 2, …

(Vaswani et al. 2017, eq. 3, written with the peak rate instead of d^−0.5.)
"""

from __future__ import annotations

import math


def inverse_sqrt(step: int, warmup: int) -> float:
    """The factor lr(t) / lr_peak at optimiser step t (t ≥ 1)."""
    t = max(step, 1)
    if warmup <= 0:
        return 1.0
    return min(t / warmup, math.sqrt(warmup / t))

"""Learning-rate schedules: linear warm-up, then inverse square root (or cosine decay).

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


def warmup_cosine(step: int, warmup: int, progress: float, floor: float = 0.1) -> float:
    """Linear warm-up, then cosine decay to ``floor`` (nanoGPT's schedule, GPT-3 §B):

        lr(t) / lr_peak = t / t_w                                   for t ≤ t_w
                        = floor + (1 − floor) · ½ (1 + cos(π p))    after,

    p ∈ [0, 1] the fraction of the run done — steps / max_steps, or elapsed /
    budget for a run given minutes, so a wall-clock budget ends at ``floor``.
    """
    t = max(step, 1)
    if warmup > 0 and t <= warmup:
        return t / warmup
    p = min(max(progress, 0.0), 1.0)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * p))

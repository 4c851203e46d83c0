"""Why a training run stopped: its step or epoch budget, or the wall-time cut (which makes a run machine-dependent).

Training stops at the first of ``max_steps``, ``epochs`` and ``minutes`` (``attnlab.train.loop``).  A run bounded by
steps or epochs trains the same model on any machine; one cut by ``minutes`` trains as many steps as the machine
allowed, so every report of it says where it was cut.
"""

from __future__ import annotations

__all__ = ["stop_reason"]


def stop_reason(steps: int, max_steps: int, minutes: float) -> str:
    """``all 400 steps``, ``cut by the 2.5-minute limit at step 195 of 1200``, or ``90 steps (end of the epochs)``."""
    if max_steps and steps >= max_steps:
        return f"all {max_steps} steps"
    if minutes:
        budget = f" of {max_steps}" if max_steps else ""
        return f"cut by the {minutes:g}-minute limit at step {steps}{budget}"
    return f"{steps} steps (end of the epochs)"

"""The state of one input under a layer's plan: what its prefill chose and what its decoding steps read.

A layer's plan (``layer_plan.LayerPlan``: per head w_h, fixed columns, how many dynamic columns, slashes, key
blocks, tails) is the same for every input; what follows from one input is this object's:

    T_h      columns      the prefill's columns, then its held key blocks and the tail's vote   (B, H, g), −1: empty
    Δ_h      diagonals    the slash offsets the prefill chose (read by the prefill only)        (B, H, s)
    U_h(t)   blocks       the key blocks each query block chose                                 (B, H, T, K)
    pages    fetched      the slots the last decoding step read through its pages               (B, H_kv, L) bool
    cache                 a weak reference to the ``PlanCache`` holding this input's keys
    recorder              a calibration recorder observing this input's exact attention (no plan runs then)

An ``InputState`` is made per input (``for_input``: at its prefill, from the cache and the recorder the caller
attached), handed to the prefill and kept by the input's cache layer, so the decoding steps of that input read the
columns its own prefill chose, whichever input the layer ran last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

__all__ = ["InputState"]


@dataclass
class InputState:
    """What one input chose under a layer's plan (module docstring); the runner holds the plan only."""

    columns: torch.Tensor | None = None      # (B, H, g) T_h of the prefill, −1: empty (kept for decoding)
    diagonals: torch.Tensor | None = None    # (B, H, s) Δ_h, NO_DIAGONAL: empty (prefill only)
    blocks: torch.Tensor | None = None       # (B, H, T, K) U_h(t), −1: none (prefill only)
    fetched: torch.Tensor | None = None      # (B, H_kv, L) bool: slots the last step read through its pages
    cache: Callable[[], Any] | None = None   # weakref to the PlanCache of this input
    recorder: Any = None                     # a calibration recorder while calibrating

    def for_input(self, **chosen) -> "InputState":
        """A fresh state for the next input: what its prefill ``chosen`` (columns, diagonals, blocks; nothing else
        yet), the same cache and recorder attached."""
        return InputState(cache=self.cache, recorder=self.recorder, **chosen)

"""The values a plan's option ranges are drawn from, importable without torch.

A method declares its options with a default and a range (``attnlab.llm.methods.base``); ``attnlab methods``
prints them before torch is imported, so the constants those ranges name live here, not in the modules that
compute with them (``key_blocks`` and ``selection`` import them from here):

    BLOCK       b: tokens per query block and per key block (the kernel's chunk for heads with key blocks)
    BLOCKS_MAX  K: key blocks per query block (a sanity bound)
    WIDTHS      the bands ``choose_plan`` offers the knapsack: every width calibrated, or attnlab's grid alone
    W_GRID, G_GRID  the options' grid: band half-widths w and column counts g, each (w, g) measured by the
                calibration (``attnlab.llm.calibration.statistics``) and offered to the knapsack (``choose_plan``)
    check_budget(β)   β ∈ (0, 1], the fraction of causal attention entries a plan may keep
"""

from __future__ import annotations

import math

__all__ = ["BLOCK", "BLOCKS_MAX", "G_GRID", "VOTE_NEXT_MAX", "WIDTHS", "W_GRID", "check_budget"]

BLOCK = 16          # b: tokens per query block and per key block (the kernel's chunk for such heads)
BLOCKS_MAX = 4096   # K: key blocks per query block (a sanity bound)
VOTE_NEXT_MAX = 64  # s: blocks before a voted block counted in its vote (the option's and the plan file's bound)
WIDTHS = ("all", "own")   # choose_plan's bands: every width calibrated, or attnlab's grid W_GRID alone
W_GRID = (0, 8, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
          1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)   # w: band half-widths
G_GRID = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)              # g: key columns


def check_budget(budget: float) -> float:
    """β ∈ (0, 1]: the fraction of causal attention entries a plan may keep."""
    if (isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget)
            or not 0 < budget <= 1):
        raise ValueError(f"budget: must be a fraction in (0, 1], got {budget!r}")
    return float(budget)

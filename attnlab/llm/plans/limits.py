"""The values a plan's option ranges are drawn from, importable without torch.

A method declares its options with a default and a range (``attnlab.llm.methods.base``); ``attnlab methods``
prints them before torch is imported, so the constants those ranges name live here, not in the modules that
compute with them (``key_blocks`` and ``selection`` import them from here):

    BLOCK       b: tokens per query block and per key block (the kernel's chunk for heads with key blocks)
    BLOCKS_MAX  K: key blocks per query block (a sanity bound)
    WIDTHS      the bands ``choose_plan`` offers the knapsack: every width calibrated, or attnlab's grid alone
"""

from __future__ import annotations

__all__ = ["BLOCK", "BLOCKS_MAX", "WIDTHS"]

BLOCK = 16          # b: tokens per query block and per key block (the kernel's chunk for such heads)
BLOCKS_MAX = 4096   # K: key blocks per query block (a sanity bound)
WIDTHS = ("all", "own")   # choose_plan's bands: every width calibrated, or attnlab's grid W_GRID alone

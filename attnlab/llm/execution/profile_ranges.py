"""Named ranges of a layer's prefill for the profiler: where the time of one layer goes, part by part.

    attnlab.layer       one layer's attention call (``attention.attnlab_attention``)
    attnlab.selection   the per-input choice: last queries' scores, columns' and key blocks' top-k
    attnlab.masks       index lists and the BlockMask built from them
    attnlab.kernel      the attention kernel(s) of the band and whatever the BlockMask holds
    attnlab.parts       the parts computed beside the kernel (gathered columns, key blocks)
    attnlab.merge       their merge by log-sum-exp

``span(name)`` opens a ``torch.profiler.record_function`` range only while a profiler records (and never inside a
compiled graph), so that an unprofiled prefill dispatches nothing for it (``tests/test_op_count.py``).
``benchmarks/gpu_check.py --profile`` sums the device time and the kernels under each range, per layer.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

__all__ = ["RANGES", "span"]

RANGES = ("attnlab.layer", "attnlab.selection", "attnlab.masks", "attnlab.kernel", "attnlab.parts", "attnlab.merge")


def span(name: str):
    """A profiler range named ``name`` while a profiler records, else a context that does nothing."""
    if torch.compiler.is_compiling() or not torch.autograd.profiler._is_profiler_enabled:
        return nullcontext()
    return torch.profiler.record_function(name)

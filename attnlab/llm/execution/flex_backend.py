"""The CUDA backend of the execution seam (``backend``): a layer's prefill in one FlexAttention call.

    out = flex_attention(q, k, v, block_mask = BlockMask(S), scale = scaling, enable_gqa = True)

S is the band, diagonals and tail rows of every head of the layer (causal), the heads with different supports in one
``BlockMask`` of shape (B, H, ⌈n/t⌉, ⌈n/t⌉) (``block_masks``): the plan's band and tails as tiles built once per
(plan, n), the diagonals written straight as tile indices (``BlockMask.from_kv_blocks``), the partial tiles through
one predicate.  The per-input columns and key blocks are gathered beside it as dense parts and merged by their
log-sum-exp (``gathered_parts``: a scattered column or a 16-key block would cost the kernel a whole tile each);
``FlexBackend(gather=False)`` puts them in the BlockMask too (one call; the comparison ``benchmarks/gpu_check.py`` prints).  GQA is read in
place (query head h reads KV head h // (H / H_kv), the seam's ``kv_of``); bf16 / fp16 inputs keep FlexAttention's
fp32 softmax.  The kernel is compiled once per shape (``nn.mechanisms.flex.flex_attention_compiled``).

Decoding: a masked softmax over the allowed cached slots, GQA without copies, a half-precision cache read in place
(products accumulated in fp32, the softmax in fp32); the read-back pages' keys through the CPU backend's softmax.
The methods whose runner goes through the seam run here unchanged (attnlab's plans, streaming-llm, DuoAttention's
streaming heads as band + sinks, SnapKV's and Quest's decoding over allowed slots, MInference's three patterns as
band + sink columns, columns + diagonals, key blocks: ``methods.minference_runner.pattern_parts``).

The backend also runs on the CPU (FlexAttention compiles there, forward only): the tests compare it with the dense
support there (``tests/test_flex_backend.py``).
"""

from __future__ import annotations

import torch

from attnlab.llm.execution.backend import PageKeys, PrefillParts, register_backend
from attnlab.llm.execution.block_masks import TILE
from attnlab.llm.execution.cpu_backend import CpuBackend
from attnlab.llm.execution.gathered_parts import flex_prefill, gathered_prefill
from attnlab.nn.softmax import masked_softmax

__all__ = ["FlexBackend"]

HALF = (torch.float16, torch.bfloat16)


class FlexBackend(CpuBackend):
    """Prefill through FlexAttention with the layer's BlockMask; decoding as a masked softmax in fp32 (module docstring)."""

    name = "flex"

    def __init__(self, tile: int = TILE, gather: bool = True):
        self.tile = tile
        self.gather = gather   # columns and key blocks gathered beside the band (``gathered_parts``), else all in the BlockMask

    def prefill(self, parts: PrefillParts, q, k, v, scaling):
        if self.gather:
            return gathered_prefill(parts, q, k, v, scaling, self.tile)
        return flex_prefill(parts, q, k, v, scaling, self.tile)

    def decode(self, q, k, v, scaling, allowed=None, pages: PageKeys | None = None):
        # q: (B, H_s·r, t, d_k), k, v: (B, H_s, L, ·), allowed: (B, H_s, r, t, L) → (B, H_s·r, t, d_v)
        if q.dtype not in HALF:
            return super().decode(q, k, v, scaling, allowed, pages)
        if pages is not None:   # the read-back's gathered keys: the CPU backend's softmax on fp32 copies
            up = pages._replace(keys=pages.keys.float(), values=pages.values.float())
            return super().decode(q.float(), k.float(), v.float(), scaling, allowed, up).to(q.dtype)
        # the cache read in place in its half precision (products accumulated in fp32), the softmax in fp32:
        #   a = softmax_{allowed}(fp32(q·kᵀ) · scaling),  out = (a in v's dtype) · v   — GQA without copies
        B, H, t, d = q.shape
        H_s, L = k.shape[1], k.shape[2]
        r = H // H_s
        s = (q.reshape(B, H_s, r * t, d) @ k.transpose(-1, -2)).float().mul_(scaling).view(B, H_s, r, t, L)
        a = masked_softmax(s, allowed).to(v.dtype)
        return (a.view(B, H_s, r * t, L) @ v).view(B, H, t, v.shape[-1])


register_backend("cuda", FlexBackend)

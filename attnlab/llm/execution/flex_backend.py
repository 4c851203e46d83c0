"""The CUDA backend of the execution seam (``backend``): a layer's prefill in one FlexAttention call.

    out = flex_attention(q, k, v, block_mask = BlockMask(S), scale = scaling, enable_gqa = True)

S is the band, diagonals and tail rows of every head of the layer (causal), the heads with different supports in one
``BlockMask`` of shape (B, H, ⌈n/t⌉, ⌈n/t⌉) (``block_masks``): the plan's band and tails as tiles built once per
(plan, n), the diagonals written straight as tile indices (``BlockMask.from_kv_blocks``), the partial tiles through
one predicate.  The per-input columns and key blocks are gathered beside it as dense parts and merged by their
log-sum-exp (``gathered_parts``: a scattered column or a 16-key block would cost the kernel a whole tile each);
``FlexBackend(gather=False)`` puts them in the BlockMask too (one call; the comparison ``benchmarks/gpu_check.py``
prints).  GQA is read in place (query head h reads KV head h // (H / H_kv), the seam's ``kv_of``); bf16 / fp16 inputs
keep FlexAttention's fp32 softmax.  The kernel is compiled once per shape
(``nn.mechanisms.flex.flex_attention_compiled``).

Decoding by index (its own, ``page_table.read_by_index``): a step's query gathers only the slots its page table
names (and the read-back pages' keys), products and softmax in fp32; several queries at once (a prompt's tail after
a reused prefix) go through one masked product over the cache read in place, the softmax in fp32.
The methods whose runner goes through the seam run here unchanged (attnlab's plans, streaming-llm, DuoAttention's
streaming heads as band + sinks, SnapKV's and Quest's decoding over allowed slots, MInference's three patterns as
band + sink columns, columns + diagonals, key blocks: ``methods.minference_runner.pattern_parts``).

A layer whose every head reads every causal key (a plan's full layers) runs as one SDPA call (FlashAttention on
CUDA), the kernel it is compared with.  The backend also runs on the CPU (FlexAttention compiles there, forward
only): the tests compare it with the dense support there (``tests/test_flex_backend.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.llm.execution.backend import PageKeys, PrefillParts, register_backend
from attnlab.llm.execution.block_masks import TILE
from attnlab.llm.execution.cpu_backend import CpuBackend
from attnlab.llm.execution.gathered_parts import flex_prefill, gathered_prefill
from attnlab.llm.execution.page_table import PageTable, allowed_of, read_by_index
from attnlab.llm.execution.profile_ranges import span
from attnlab.llm.plans.plan import FULL
from attnlab.nn.softmax import masked_softmax

__all__ = ["FlexBackend"]

HALF = (torch.float16, torch.bfloat16)


class FlexBackend(CpuBackend):
    """Prefill through FlexAttention with the layer's BlockMask; decoding by index (module docstring)."""

    name = "flex"
    indexed = True   # the layer's selection as one batch over heads (``indexed_selection``), handed over as indices

    def __init__(self, tile: int = TILE, gather: bool = True):
        self.tile = tile
        # columns and key blocks gathered beside the band (``gathered_parts``), else all in the BlockMask
        self.gather = gather

    def prefill(self, parts: PrefillParts, q, k, v, scaling):
        n = q.shape[2]
        if all(w == FULL or w >= n - 1 for w in parts.w):   # a full layer: every causal key, FlashAttention's kernel
            with span("attnlab.kernel"):
                gqa = k.shape[1] != q.shape[1]
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling, enable_gqa=gqa)
        if self.gather:
            return gathered_prefill(parts, q, k, v, scaling, self.tile)
        return flex_prefill(parts, q, k, v, scaling, self.tile)

    def decode(self, q, k, v, scaling, table=None, pages: PageKeys | None = None):
        # q: (B, H_s·r, t, d_k), k, v: (B, H_s, L, ·), table.slots: (B, H_s, r, t, S) → (B, H_s·r, t, d_v)
        if table is not None and q.shape[2] == 1:   # a step: only the table's slots gathered (``page_table``)
            return read_by_index(q, k, v, scaling, table, pages)
        if pages is not None:   # the read-back's gathered keys beside every slot: all of them by index
            L = k.shape[2]
            every = torch.arange(L, device=k.device).expand(*k.shape[:2], q.shape[1] // k.shape[1], 1, L)
            return read_by_index(q, k, v, scaling, PageTable(every), pages)
        # several queries (a prompt's tail after a reused prefix) or every slot: one masked product, the cache read in
        # place in its precision (products accumulated in fp32), the softmax in fp32 — GQA without copies
        #   a = softmax_{allowed}(fp32(q·kᵀ) · scaling),  out = (a in v's dtype) · v
        B, H, t, d = q.shape
        H_s, L = k.shape[1], k.shape[2]
        r = H // H_s
        allowed = None if table is None else allowed_of(table, L)                            # (B, H_s, r, t, L)
        s = (q.reshape(B, H_s, r * t, d) @ k.transpose(-1, -2)).float().mul_(scaling).view(B, H_s, r, t, L)
        a = masked_softmax(s, allowed).to(v.dtype)
        return (a.view(B, H_s, r * t, L) @ v).view(B, H, t, v.shape[-1])


register_backend("cuda", FlexBackend)

"""MInference's prefill as a layer runner (``attnlab.llm.methods.minference``): each head runs its own pattern.

    Λ-shape         S_h(i) = {j < a} ∪ {i − w ≤ j ≤ i}
    vertical-slash  S_h(i) = {j ≤ i : j ∈ V} ∪ {j ≤ i : j − i ∈ Δ}          (V, Δ from the last 64 queries, per input)
    block-sparse    S_h(i) = ∪_{u ∈ U(⌊i/64⌋)} {64u ≤ j < 64u + 64, j ≤ i}   (U by pooled q̄·k̄, per input)

run by ``execution.sparse_patterns`` (``run_lambda``, ``run_vs``, ``run_block``); decoding reads the whole cache (the
full plan's).  A sliding layer (Gemma-3) reads its own window, as the model's mask says.
"""

from __future__ import annotations

from attnlab.llm.execution import sparse_patterns as sp
from attnlab.llm.execution.attention import LayerRunner

__all__ = ["PatternRunner"]


class PatternRunner(LayerRunner):
    """A layer whose prefill runs each head's pattern: ``patterns[layer_idx][h]`` = {"pattern", its settings}."""

    def __init__(self, *args, patterns: list[list[dict]], **kwargs):
        super().__init__(*args, **kwargs)
        self.patterns = patterns[self.layer_idx]    # per head: {"pattern": "vs" | "lambda" | "block", settings}
        self.supports = []                          # per head after a prefill: (pattern, Support | (sinks, w) | blocks (B, T, k))

    def prefill(self, q, k, v, scaling):
        # q: (B, H, n, d_k), k, v: (B, H_kv, n, ·) → (B, H, n, d_v)
        if self.sliding is not None:                     # a sliding layer reads its own window (the model's mask)
            return super().prefill(q, k, v, scaling)
        B, H, n, _ = q.shape
        out = q.new_empty(B, H, n, v.shape[-1])
        self.supports = []
        for h, hd in enumerate(self.patterns):
            g = int(self.kv_of[h])
            qh, kh, vh = q[:, h : h + 1], k[:, g : g + 1], v[:, g : g + 1]
            if hd["pattern"] == "vs":
                out[:, h : h + 1], sup = sp.run_vs(qh, kh, vh, scaling, hd["vertical"], hd["slash"])
            elif hd["pattern"] == "lambda":
                out[:, h : h + 1], sup = sp.run_lambda(qh, kh, vh, scaling, hd["sinks"], hd["w"]), (hd["sinks"], hd["w"])
            else:
                sup = sp.block_choice(qh[:, 0], kh[:, 0], hd["blocks"])
                out[:, h : h + 1] = sp.run_block(qh, kh, vh, scaling, sup)
            self.supports.append((hd["pattern"], sup))
        return out

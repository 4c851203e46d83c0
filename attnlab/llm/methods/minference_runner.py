"""MInference's prefill as a layer runner (``attnlab.llm.methods.minference``): each head runs its own pattern.

    Λ-shape         S_h(i) = {j < a} ∪ {i − w ≤ j ≤ i}                     band w + sink columns T_h = {0 … a − 1}
    vertical-slash  S_h(i) = {j ≤ i : j ∈ V} ∪ {j ≤ i : j − i ∈ Δ}          band of the nearest slashes + columns V
                                                                            + far diagonals Δ (V, Δ from the last 64
                                                                            queries, per input)
    block-sparse    S_h(i) = ∪_{u ∈ U(⌊i/64⌋)} {64u ≤ j < 64u + 64, j ≤ i}   band 0 (j = i, inside the diagonal
                                                                            block) + key blocks U (pooled q̄·k̄, per
                                                                            input)

Every head's pattern is written as the execution seam's ``PrefillParts`` (``pattern_parts``) and the layer runs in one
call of the device's backend (``backend_for(q.device).prefill``: the native kernel on the CPU, FlexAttention on CUDA);
decoding reads the whole cache (the full plan's).  A sliding layer (Gemma-3) reads its own window, as the model's mask
says.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.llm.execution import sparse_patterns as sp
from attnlab.llm.execution.attention import LayerRunner
from attnlab.llm.execution.backend import PrefillParts, backend_for
from attnlab.llm.execution.input_state import InputState
from attnlab.support import NO_DIAGONAL, Support

__all__ = ["PatternRunner", "PatternState", "pattern_parts"]


def _stack(rows: list, width: int, empty: int, like):
    """Per-head (B, e_h) index tensors → (B, H, width), padded with ``empty``."""
    out = torch.full((like.shape[0], len(rows), width), empty, dtype=torch.long, device=like.device)
    for h, r in enumerate(rows):
        out[:, h, : r.shape[-1]] = r
    return out


def pattern_parts(patterns: list[dict], q, k, kv_of, scaling: float):
    """Each head's pattern as the seam's parts: q (B, H, n, d_k), k (B, H_kv, n, d_k) → (PrefillParts, supports).

    supports: per head (pattern, its choice) — a ``Support`` (vs), (sinks, w) (Λ) or the chosen blocks (B, T, k)
    (block).
    """
    B, H, n, _ = q.shape
    T = -(-n // sp.BLOCK)
    w, cols, diags, blocks, counts, supports = [], [], [], [], [], []
    empty = q.new_zeros(B, 0, dtype=torch.long)
    for h, hd in enumerate(patterns):
        g = int(kv_of[h])
        c, dg, bl = empty, empty, empty.new_zeros(B, T, 0)
        if hd["pattern"] == "vs":
            wh, c, dg = sp.vertical_slash(q[:, h], k[:, g], scaling, hd["vertical"], hd["slash"])
            sup = Support(w=wh, columns=c, diagonals=dg)
        elif hd["pattern"] == "lambda":
            wh, sup = hd["w"], (hd["sinks"], hd["w"])
            c = torch.arange(min(hd["sinks"], n), device=q.device).expand(B, -1)      # the first a keys as columns
        else:
            wh = 0                                                                    # j = i: inside the diagonal block
            bl = sup = sp.block_choice(q[:, h], k[:, g], hd["blocks"])               # (B, T, k), −1: empty
        w.append(int(wh))
        cols.append(c)
        diags.append(dg)
        blocks.append(bl)
        counts.append(bl.shape[-1])
        supports.append((hd["pattern"], sup))
    K = max(counts)
    blk = torch.full((B, H, T, K), -1, dtype=torch.long, device=q.device)
    for h, bl in enumerate(blocks):
        blk[:, h, :, : bl.shape[-1]] = bl
    parts = PrefillParts(w=tuple(w), columns=_stack(cols, max(x.shape[-1] for x in cols), -1, q),
                         diagonals=_stack(diags, max(x.shape[-1] for x in diags), NO_DIAGONAL, q), blocks=blk,
                         block_counts=tuple(counts), tails=(0,) * H, kv_of=torch.as_tensor(kv_of).to(q.device),
                         block=sp.BLOCK)
    return parts, supports


@dataclass
class PatternState(InputState):
    """An input's state under MInference's patterns: what each head's pattern chose (decoding reads the whole cache)."""

    supports: list | None = None          # per head: (pattern, Support | (sinks, w) | blocks (B, T, k))
    pattern_parts: PrefillParts | None = None   # the seam's parts of the prefill


class PatternRunner(LayerRunner):
    """A layer whose prefill runs each head's pattern: ``patterns[layer_idx][h]`` = {"pattern", its settings}."""

    def __init__(self, *args, patterns: list[list[dict]], **kwargs):
        super().__init__(*args, **kwargs)
        self.patterns = patterns[self.layer_idx]    # per head: {"pattern": "vs" | "lambda" | "block", settings}

    def prefill(self, q, k, v, scaling):
        # q: (B, H, n, d_k), k, v: (B, H_kv, n, ·) → (out (B, H, n, d_v), the input's PatternState)
        if self.sliding is not None:                     # a sliding layer reads its own window (the model's mask)
            return super().prefill(q, k, v, scaling)
        parts, supports = pattern_parts(self.patterns, q, k, self.kv_of, scaling)
        return backend_for(q.device).prefill(parts, q, k, v, scaling), PatternState(supports=supports,
                                                                                    pattern_parts=parts)

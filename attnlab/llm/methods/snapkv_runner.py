"""SnapKV's eviction as a layer runner (``attnlab.llm.methods.snapkv``): after the prefill, each KV head keeps the
window and the prefix keys of largest pooled vote of the window's queries:

    a_ij   = softmax_{j ≤ i}(q_i·k_j · scaling)                     i ∈ W = {n − window, …, n − 1}
    v_gj   = Σ_{i ∈ W} Σ_{h ∈ G(g)} a_ij                           j < n − window (the prefix)
    p_gj   = (1/kernel) Σ_{|t| ≤ kernel//2} v_{g,j+t}              1-D average pool, zero padding
    K_g    = top_{k − window}(p_g) ∪ W,     k = ⌊n · (1 − c)⌋

The prefill and decoding are the full plan's; the runner only marks, right after the prefill (or after the window's
tokens run over a reused full-attention prefix), which keys the cache's first compaction keeps (``keep``).  The marks
are the input's (``SnapKVState.selected``, beside what the plan's prefill chose), never the runner's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnlab.llm.execution.attention import LayerRunner
from attnlab.llm.execution.input_state import InputState

__all__ = ["SnapKVRunner", "SnapKVState", "snapkv_keep", "snapkv_vote"]


def snapkv_vote(q_win, k, scaling: float, kernel: int):
    """Pooled vote p of the prefix keys: q_win (B, H, w, d) at positions m − w … m − 1, k (B, H_kv, m, d) →
    (B, H_kv, m − w)."""
    B, H, w, d = q_win.shape
    H_kv, m = k.shape[1], k.shape[2]
    qg = q_win.reshape(B, H_kv, (H // H_kv) * w, d)                   # the query heads of a KV head, stacked
    s = ((qg.float() @ k.float().transpose(-1, -2)) * scaling).view(B, H_kv, H // H_kv, w, m)
    future = torch.ones(w, w, dtype=torch.bool, device=k.device).triu(1)   # key m − w + b after query m − w + a
    s[..., m - w :].masked_fill_(future, float("-inf"))
    v = torch.softmax(s, dim=-1)[..., : m - w].sum((2, 3))                              # (B, H_kv, m − w)
    return F.avg_pool1d(v, kernel, stride=1, padding=kernel // 2)                       # zero-padded, divided by kernel


def snapkv_keep(q_win, k, scaling: float, kernel: int, kept: int):
    """K_g as a mask (B, H_kv, m): the window and the top ``kept − w`` prefix keys by the pooled vote."""
    B, H_kv, m = k.shape[0], k.shape[1], k.shape[2]
    w = q_win.shape[2]
    keep = torch.zeros(B, H_kv, m, dtype=torch.bool, device=k.device)
    keep[..., m - w :] = True
    top = max(0, min(kept, m) - w)
    if top:
        idx = torch.topk(snapkv_vote(q_win, k, scaling, kernel), top, dim=-1).indices    # (B, H_kv, top)
        keep.scatter_(-1, idx, True)
    return keep


@dataclass
class SnapKVState(InputState):
    """An input's state under SnapKV: the plan's, and the keys its window voted for."""

    selected: tuple | None = None   # (n, (B, H_kv, n) bool): the keys kept after a prefill of n tokens, until the
                                    # compaction


class SnapKVRunner(LayerRunner):
    """A full-attention layer whose cache keeps, after the prefill, what the last ``window`` queries voted for."""

    def __init__(self, *args, window: int, kernel: int, compression: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.window, self.kernel, self.compression = int(window), int(kernel), float(compression)

    def new_state(self, **chosen) -> SnapKVState:
        return SnapKVState(**chosen)

    def prefill(self, q, k, v, scaling):
        # q: (B, H, n, d_k), k, v: (B, H_kv, n, ·) → (out, the input's SnapKVState)
        out, state = super().prefill(q, k, v, scaling)
        n = q.shape[2]
        if self.sliding is None and n > self.window:
            size = int(n * (1 - self.compression))
            state.selected = (n, snapkv_keep(q[:, :, n - self.window :], k, scaling, self.kernel, size))
        return out, state

    def decode(self, q, k, v, scaling, q_pos, k_pos, state, flags=None, kv=None, summaries=None):
        # the last prompt tokens after a reused full-attention prefix (Method.reuse_tail): full attention over the
        # cache, not compacted yet; the window's queries vote as in ``prefill``.
        # q: (B, H, t, d_k), k: (B, H_kv, m, d_k)
        out = super().decode(q, k, v, scaling, q_pos, k_pos, state, flags, kv, summaries)
        cache = self.cache() if self.cache is not None else None
        m, window = int(q_pos[-1]) + 1, self.window
        if (cache is not None and cache.layers[self.layer_idx].evicted_at is None and self.sliding is None
                and m > window and q.shape[2] >= window and k.shape[2] == m):
            size = int(m * (1 - self.compression))
            state.selected = (m, snapkv_keep(q[:, :, q.shape[2] - window :], k, scaling, self.kernel, size))
        return out

    def keep(self, k_pos, seen, state, flags=None, kv=None):
        keep = super().keep(k_pos, seen, state, flags, kv)
        selected = getattr(state, "selected", None)
        if selected is not None and selected[0] == seen:                                 # right after that prefill
            keep = keep & torch.gather(selected[1], -1, k_pos.clamp_min(0))
            state.selected = None
        return keep

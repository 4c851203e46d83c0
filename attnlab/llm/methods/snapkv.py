"""SnapKV (Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before Generation").

Prefill: full attention.  Right after the prefill, each KV head g keeps the keys that the last
``window`` queries vote for, and decoding reads that compressed cache (new tokens are appended):

    a_ij   = softmax_{j ≤ i}(q_i·k_j · scaling)                     i ∈ W = {n − window, …, n − 1}
    v_gj   = Σ_{i ∈ W} Σ_{h ∈ G(g)} a_ij                           j < n − window (the prefix)
    p_gj   = (1/kernel) Σ_{|t| ≤ kernel//2} v_{g,j+t}              1-D average pool, zero padding
    K_g    = top_{k − window}(p_g) ∪ W,     k = ⌊n · (1 − c)⌋         (c: the compression ratio)

G(g): the query heads reading KV head g (GQA).  With ``window`` 64 and ``kernel`` 5 (kvpress's
defaults) and mean instead of sum (the same order), this is NVIDIA kvpress's ``SnapKVPress``; the
positions kept are checked against it (``tests/test_llm_kvpress_reference.py``).  When k < window
the window alone is kept (k is then exceeded).

Budget: ``compression`` c, the fraction of the prompt's KV tokens evicted (default 1 − budget, so
``budget`` is the fraction kept); ``kv_tokens(n)`` states the tokens kept per KV head.  Sliding
layers (Gemma-3) keep their own window, which the model reads anyway, and are not voted on.
Perplexity of one forward pass is full attention's: SnapKV changes only what decoding reads.
A reused full-attention prefix (``prefill_reuse``, ``attnlab eval``) is followed by the window's tokens run
here (``decode`` of a cache not compacted yet): the same keys, values and votes as one prefill.
"""

from __future__ import annotations

# numpy and torch load inside the functions that compute: `attnlab methods` reads this file's class without them
from attnlab.errors import UserError
from attnlab.llm.methods import register
from attnlab.llm.methods.base import Option, PlanMethod

__all__ = ["SnapKV", "snapkv_keep", "snapkv_vote"]


def snapkv_vote(q_win, k, scaling: float, kernel: int):
    """Pooled vote p of the prefix keys: q_win (B, H, w, d) at positions m − w … m − 1, k (B, H_kv, m, d) → (B, H_kv, m − w)."""
    import torch
    import torch.nn.functional as F

    B, H, w, d = q_win.shape
    H_kv, m = k.shape[1], k.shape[2]
    qg = q_win.reshape(B, H_kv, (H // H_kv) * w, d)                                     # the query heads of a KV head, stacked
    s = ((qg.float() @ k.float().transpose(-1, -2)) * scaling).view(B, H_kv, H // H_kv, w, m)
    future = torch.ones(w, w, dtype=torch.bool, device=k.device).triu(1)                 # key m − w + b after query m − w + a
    s[..., m - w :].masked_fill_(future, float("-inf"))
    v = torch.softmax(s, dim=-1)[..., : m - w].sum((2, 3))                              # (B, H_kv, m − w)
    return F.avg_pool1d(v, kernel, stride=1, padding=kernel // 2)                       # zero-padded, divided by kernel


def snapkv_keep(q_win, k, scaling: float, kernel: int, kept: int):
    """K_g as a mask (B, H_kv, m): the window and the top ``kept − w`` prefix keys by the pooled vote."""
    import torch

    B, H_kv, m = k.shape[0], k.shape[1], k.shape[2]
    w = q_win.shape[2]
    keep = torch.zeros(B, H_kv, m, dtype=torch.bool, device=k.device)
    keep[..., m - w :] = True
    top = max(0, min(kept, m) - w)
    if top:
        idx = torch.topk(snapkv_vote(q_win, k, scaling, kernel), top, dim=-1).indices    # (B, H_kv, top)
        keep.scatter_(-1, idx, True)
    return keep


def _snap_runner(base, window: int, kernel: int, compression: float):
    """The layer's full-attention runner, which after its prefill marks the keys SnapKV keeps."""
    import torch

    from attnlab.llm.execution.attention import LayerRunner

    class SnapKVRunner(LayerRunner):
        def prefill(self, q, k, v, scaling):
            # q: (B, H, n, d_k), k, v: (B, H_kv, n, ·)
            out = super().prefill(q, k, v, scaling)
            n = q.shape[2]
            self.selected = None
            if self.sliding is None and n > window:
                kept = int(n * (1 - compression))
                self.selected = (n, snapkv_keep(q[:, :, n - window :], k, scaling, kernel, kept))
            return out

        def decode(self, q, k, v, scaling, q_pos, k_pos, flags=None, kv=None, summaries=None):
            # the last prompt tokens after a reused full-attention prefix (Method.reuse_tail): full attention over the
            # cache, not compacted yet; the window's queries vote as in ``prefill``.  q: (B, H, t, d_k), k: (B, H_kv, m, d_k)
            out = super().decode(q, k, v, scaling, q_pos, k_pos, flags, kv, summaries)
            cache = self.cache() if self.cache is not None else None
            m = int(q_pos[-1]) + 1
            if (cache is not None and cache.layers[self.layer_idx].evicted_at is None and self.sliding is None
                    and m > window and q.shape[2] >= window and k.shape[2] == m):
                self.selected = (m, snapkv_keep(q[:, :, q.shape[2] - window :], k, scaling, kernel, int(m * (1 - compression))))
            return out

        def keep(self, k_pos, seen, flags=None, kv=None):
            keep = super().keep(k_pos, seen, flags, kv)
            sel = getattr(self, "selected", None)
            if sel is not None and sel[0] == seen:                                       # right after that prefill
                keep = keep & torch.gather(sel[1], -1, k_pos.clamp_min(0))
                self.selected = None
            return keep

    runner = SnapKVRunner.__new__(SnapKVRunner)
    runner.__dict__.update(base.__dict__)
    runner.selected = None
    return runner


@register
class SnapKV(PlanMethod):
    name = "snapkv"
    prefill = "every causal entry (full attention)"
    decoding = ("after the prefill each KV head keeps the last `window` tokens + the prefix keys of largest pooled vote "
                "of the window's queries, ⌊n(1−c)⌋ in all; new tokens are appended and everything kept is read")
    options = {"window": Option(64, 1, 8192, "last prompt queries that vote, and whose keys are always kept"),
               "kernel": Option(5, 1, 63, "width of the vote's pooling (odd)"),
               "compression": Option(None, 0.0, 0.99, "fraction of the prompt evicted (default: 1 − β)", kind=float)}
    prefill_reuse = True   # full attention; the vote needs the queries of the last window only (``reuse_tail``)

    def __init__(self, budget: float = 1.0, **options):
        super().__init__(budget, **options)
        self.window = int(self.option("window"))
        self.kernel = int(self.option("kernel"))
        if self.kernel % 2 == 0:
            raise UserError(f"--option kernel: must be odd (the pool keeps the prefix's length), got {self.kernel}")
        self.compression = float(self.opts.get("compression", 1.0 - self.budget))

    def make_plan(self, model, n, calibration):
        from attnlab.llm.plans.plan import Plan, model_shape

        return Plan.full(model_shape(model), n)

    def _install(self, model) -> None:
        from attnlab.llm.execution.attention import attention_modules

        super()._install(model)
        for mod in attention_modules(model):
            mod.attnlab_layer = _snap_runner(mod.attnlab_layer, self.window, self.kernel, self.compression)

    def reuse_tail(self, n: int) -> int:
        """The window's tokens run under SnapKV after a reused prefix (their queries vote); none when n ≤ window (no vote)."""
        return self.window if n > self.window else 0

    def kv_tokens(self, n: int) -> int:
        """KV tokens kept per KV head (full layers) after a prefill of n tokens: max(⌊n(1 − c)⌋, window)."""
        return n if n <= self.window else max(int(n * (1 - self.compression)), self.window)

    def describe(self) -> dict:
        return {**super().describe(), "window": self.window, "kernel": self.kernel, "compression": self.compression,
                "kv_tokens": self.kv_tokens(self.n) if self.n else None}

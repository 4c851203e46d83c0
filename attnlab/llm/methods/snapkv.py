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

__all__ = ["SnapKV"]   # its vote and eviction: ``snapkv_runner``


@register
class SnapKV(PlanMethod):
    name = "snapkv"
    baseline = True
    prefill = "every causal entry (full attention)"
    decoding = ("after the prefill each KV head keeps the last `window` tokens + the prefix keys of largest pooled "
                "vote of the window's queries, ⌊n(1−c)⌋ in all; new tokens are appended and everything kept is read")
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

    def layer_runner(self):
        from attnlab.llm.methods.snapkv_runner import SnapKVRunner

        return SnapKVRunner, {"window": self.window, "kernel": self.kernel, "compression": self.compression}

    def reuse_tail(self, n: int) -> int:
        """The window's tokens run under SnapKV after a reused prefix (their queries vote); none when n ≤ window (no
        vote)."""
        return self.window if n > self.window else 0

    def kv_tokens(self, n: int) -> int:
        """KV tokens kept per KV head (full layers) after a prefill of n tokens: max(⌊n(1 − c)⌋, window)."""
        return n if n <= self.window else max(int(n * (1 - self.compression)), self.window)

    def describe(self) -> dict:
        return {**super().describe(), "window": self.window, "kernel": self.kernel, "compression": self.compression,
                "kv_tokens": self.kv_tokens(self.n) if self.n else None}

"""The per-row top-k oracle (``attnlab.llm.plans.oracle``): a bound, not a method one could run fast.

    prefill: row i keeps its k_i = ⌈β(i+1)⌉ keys of largest score (all n² scores computed);
    decoding: the whole cache is read (the oracle bounds the prefill's support only).

β as stated: the mean over layers of Σ_i min(k_i, keys row i can reach) / (n(n+1)/2) (a sliding
layer of window W reaches min(i + 1, W) keys).
"""

from attnlab.llm.methods import register
from attnlab.llm.methods.base import Method


@register
class OracleTopK(Method):
    name = "oracle-topk"
    default_run = False
    prefill = "every row its ⌈β(i+1)⌉ keys of largest score (chosen from all n² scores)"
    decoding = "the whole KV cache is kept and read"

    def prepare(self, model, n: int, calibration=None) -> None:
        from attnlab.llm.plans.plan import model_shape

        super().prepare(model, n, calibration)
        shape = model_shape(model)
        self.windows = shape["windows"] or [None] * shape["num_layers"]   # per layer: its sliding window or None

    def _install(self, model) -> None:
        from attnlab.llm.plans.oracle import apply_oracle

        apply_oracle(model, self.budget)

    def prefill_fraction(self, n: int) -> float:
        from attnlab.llm.plans.oracle import entries_kept

        windows = getattr(self, "windows", None) or [None]
        return sum(entries_kept(self.budget, n, w) for w in windows) / len(windows)

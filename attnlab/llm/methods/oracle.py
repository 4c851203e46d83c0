"""The per-row top-k oracle (``attnlab.llm.oracle``): a bound, not a method one could run fast.

    prefill: row i keeps its k_i = ⌈β(i+1)⌉ keys of largest score (all n² scores computed);
    decoding: the whole cache is read (the oracle bounds the prefill's support only).
"""

from attnlab.llm.methods import register
from attnlab.llm.methods.base import Method


@register
class OracleTopK(Method):
    name = "oracle-topk"
    prefill = "every row its ⌈β(i+1)⌉ keys of largest score (chosen from all n² scores)"
    decoding = "the whole KV cache is kept and read"

    def _install(self, model) -> None:
        from attnlab.llm.oracle import apply_oracle

        apply_oracle(model, self.budget)

    def prefill_fraction(self, n: int) -> float:
        from attnlab.llm.oracle import entries_kept

        return entries_kept(self.budget, n)

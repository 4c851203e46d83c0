"""Full attention: the ceiling every other method is measured against."""

from attnlab.llm.methods import register
from attnlab.llm.methods.base import Method


@register
class Full(Method):
    name = "full"
    prefill = "every causal entry j ≤ i (the model's own attention, SDPA)"
    decoding = "the whole KV cache is kept and read (a sliding layer: its window, as the model's own cache)"

    def prepare(self, model, n, calibration=None):
        from attnlab.llm.plan import model_shape

        super().prepare(model, n, calibration)
        self.shape = model_shape(model)

    def prefill_fraction(self, n: int) -> float:
        """The model's own attention: 1, or less where layers slide (a sliding head reads ≤ W keys a row)."""
        from attnlab.llm.plan import Plan

        return Plan.full(self.shape, n).fraction(n) if getattr(self, "shape", None) else 1.0

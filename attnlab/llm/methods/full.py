"""Full attention: the ceiling every other method is measured against (``methods.REFERENCE``).

    S_h(i) = {j ≤ i} (∩ {i − j < W} in a sliding layer: the model's own mask),  K(t) = {0, …, t − 1};
    β = Σ_h |S_h| / (L·H·n(n+1)/2) = 1, or below 1 when layers slide (``Plan.full(shape).fraction(n)``).

Its plan (every head full) is what ``attnlab plan --method full`` writes and what its counts come
from; applied, the model runs its own attention (SDPA) and its own cache.
"""

from attnlab.llm.methods import REFERENCE, register
from attnlab.llm.methods.base import Method, PlanMethod


@register
class Full(PlanMethod):
    name = REFERENCE
    prefill = "every causal entry j ≤ i (the model's own attention, SDPA)"
    decoding = "the whole KV cache is kept and read (a sliding layer: its window, as the model's own cache)"
    baseline = True
    prefill_reuse = True   # it is the full-attention prefill (``eval`` reuses a shared prompt prefix, prefix_cache.py)

    def __init__(self, budget: float = 1.0, **options):
        super().__init__(budget, **options)
        self.budget = 1.0            # every entry is kept, whatever budget was asked for

    def make_plan(self, model, n, calibration):
        from attnlab.llm.plans.plan import Plan, model_shape

        return Plan.full(model_shape(model), n)

    def _install(self, model) -> None:   # the model's own attention: nothing to change
        pass

    def _uninstall(self, model) -> None:
        pass

    new_cache = Method.new_cache          # transformers' DynamicCache (a sliding layer keeps its window)

    def prefill_fraction(self, n: int) -> float:
        """The model's own attention: 1, or less where layers slide (a sliding head reads ≤ W keys a row)."""
        return self.plan.fraction(n) if getattr(self, "plan", None) is not None else 1.0

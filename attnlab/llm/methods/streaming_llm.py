"""StreamingLLM (Xiao et al. 2023): 4 attention sinks + a window of recent tokens, in both phases.

    S_h(i) = {0, 1, 2, 3} ∪ {j : i − w ≤ j ≤ i},   w the largest window whose plan keeps ≤ β of the entries;
    K(t)   = {0, 1, 2, 3} ∪ {t − w, …, t − 1}   (the cache evicts everything else).

With the option ``compression`` c (kvpress's ``StreamingLLMPress(compression_ratio=c)``), the window
is set by the KV tokens instead: after a prompt of n tokens the cache keeps k = max(1, ⌊n(1 − c)⌋)
tokens, the 4 sinks and the w = k − 4 most recent, the same positions as kvpress's press
(``tests/test_llm_kvpress_reference.py``); the prefill reads the same sinks + window (kvpress's
prefill is full).
"""

from attnlab.errors import UserError
from attnlab.llm.methods import register
from attnlab.llm.methods.base import Option, PlanMethod


@register
class StreamingLLM(PlanMethod):
    name = "streaming-llm"
    baseline = True
    prefill = "4 sink tokens + the w most recent tokens (w the largest window at budget β, or ⌊n(1−c)⌋ − 4)"
    decoding = "the cache keeps the 4 sinks + the last w tokens; older keys are evicted"
    options = {"compression": Option(None, 0.0, 0.99, "fraction of the prompt evicted: keeps ⌊n(1−c)⌋ tokens "
                                     "(default: the largest window at β)", kind=float)}

    def make_plan(self, model, n, calibration):
        import numpy as np

        from attnlab.llm.plans import baselines
        from attnlab.llm.plans.plan import SINKS, HeadPlan, Plan, model_shape
        from attnlab.support import Support

        if self.option("compression") is None:
            return baselines.streaming_llm(model_shape(model), self.budget, n)
        k = max(1, int(n * (1 - self.option("compression"))))
        if k <= SINKS:
            raise UserError(f"--option compression: keeps {k} of {n} tokens, no more than the {SINKS} sinks")
        w = k - SINKS
        return Plan.uniform(model_shape(model), HeadPlan(support=Support(w=w, columns=np.arange(SINKS))),
                            "streaming-llm", self.budget, n)

    def kv_tokens(self, n: int) -> int:
        """KV tokens kept per KV head after a prompt of n tokens (full layers)."""
        w = int(self.plan.heads[0][0].w) if getattr(self, "plan", None) is not None else n
        return min(n, w + 4)

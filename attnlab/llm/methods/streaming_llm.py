"""StreamingLLM (Xiao et al. 2023): 4 attention sinks + a window of recent tokens, in both phases.

    S_h(i) = {0, 1, 2, 3} ∪ {j : i − w ≤ j ≤ i},   w the largest window whose plan keeps ≤ β of the entries;
    K(t)   = {0, 1, 2, 3} ∪ {t − w, …, t − 1}   (the cache evicts everything else).
"""

from attnlab.llm.methods import register
from attnlab.llm.methods.base import PlanMethod


@register
class StreamingLLM(PlanMethod):
    name = "streaming-llm"
    prefill = "4 sink tokens + the w most recent tokens (w the largest window at budget β)"
    decoding = "the cache keeps the 4 sinks + the last w tokens; older keys are evicted"

    def make_plan(self, model, n, calibration):
        from attnlab.llm import baselines
        from attnlab.llm.plan import model_shape

        return baselines.streaming_llm(model_shape(model), self.budget, n)

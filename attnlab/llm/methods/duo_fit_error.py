"""``duo-fit-error``: DuoAttention's two kinds of heads, ranked by the error of a sink + window fit (not learned gates).

The heads whose sink + window fit loses the most mass on calibration text stay full; the others keep
4 sinks + a window (``attnlab.llm.plans.baselines.duo_attention``).  The published method learns a gate
per KV head instead: ``duo-attention`` (``duo_attention.py``).
"""

from attnlab.llm.methods import register
from attnlab.llm.methods.base import PlanMethod


@register
class DuoFitError(PlanMethod):
    name = "duo-fit-error"
    calibrated = True
    prefill = "retrieval heads (largest sink+window fit error) full; streaming heads 4 sinks + window"
    decoding = "retrieval heads keep the whole cache; streaming heads the sinks + window"

    def make_plan(self, model, n, calibration):
        from attnlab.llm.plans import baselines

        return baselines.duo_attention(calibration, self.budget)

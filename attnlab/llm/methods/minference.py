"""MInference (Jiang et al. 2024), as attnlab ran it in round 2: per head one of 6 candidate patterns.

Each head picks, on calibration text, one of MInference's patterns scaled to the budget (Λ-shape,
vertical-slash ×4, block-sparse mapped to vertical-slash), by captured mass (``minference-mass``) or
by the output error of the last queries (``minference-error``); the vertical lines are chosen per
input from the last 64 queries.  ``attnlab.llm.baselines.minference`` holds the equations.
"""

from attnlab.llm.methods import register
from attnlab.llm.methods.base import PlanMethod


class _MInference(PlanMethod):
    calibrated = True
    by = "mass"
    prefill = "per head its calibrated pattern: a band of slash lines + sink or per-input vertical columns"
    decoding = "the cache keeps what the pattern can still read (band + columns); the rest is evicted"

    def calibration_candidates(self, shape, n):
        from attnlab.llm import baselines

        return baselines.minference_candidates(self.budget, n, shape)

    def make_plan(self, model, n, calibration):
        from attnlab.llm import baselines

        return baselines.minference(calibration, self.budget, by=self.by)


@register
class MInferenceMass(_MInference):
    name = "minference-mass"
    by = "mass"


@register
class MInferenceError(_MInference):
    name = "minference-error"
    by = "error"

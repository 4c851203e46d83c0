"""attnlab's per-head plan: band + columns per head, chosen by a knapsack over calibrated option errors.

    plan[l][h] = FULL | B_{w_lh} ∪ (rows × (T_fixed ∪ T_dyn(x)))   with Σ entries ≤ β·L·H·n(n+1)/2,

chosen by ``attnlab.llm.plan.choose_plan`` (the output-error rule when the calibration holds option
errors, the captured-mass rule otherwise).  ``PlanFile`` runs a plan saved by ``attnlab plan``.
"""

from attnlab.errors import UserError
from attnlab.llm.methods import register
from attnlab.llm.methods.base import PlanMethod


@register
class AttnlabPlan(PlanMethod):
    name = "attnlab"
    calibrated = True
    prefill = "per head its planned support (band w_h + sink columns + per-input columns), some heads full"
    decoding = "the cache keeps, per KV head, the keys its heads can still read (band + columns)"

    def make_plan(self, model, n, calibration):
        from attnlab.llm.plan import choose_plan

        return choose_plan(calibration, self.budget)


class PlanFile(PlanMethod):
    """A plan read from a file (``attnlab plan``): its method, budget and length are the file's."""

    name = "plan"
    prefill = AttnlabPlan.prefill
    decoding = AttnlabPlan.decoding

    def __init__(self, path):
        from attnlab.llm.plan import Plan

        self.path = str(path)
        self.file_plan = Plan.load(path)
        super().__init__(self.file_plan.budget if 0 < self.file_plan.budget <= 1 else 1.0)

    def make_plan(self, model, n, calibration):
        self.file_plan.check(model, name=f"--plan {self.path}")
        if self.file_plan.n and self.file_plan.n != n:
            raise UserError(f"--plan {self.path}: made for n = {self.file_plan.n}, run at n = {n}")
        return self.file_plan

    def describe(self) -> dict:
        return {**super().describe(), "method": f"plan:{self.file_plan.method}", "file": self.path}

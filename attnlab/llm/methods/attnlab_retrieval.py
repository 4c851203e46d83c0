"""attnlab's plan that keeps what the context says: retrieval heads full, the knapsack spends the rest.

    R = the k heads of largest retrieval score r_lh   (r_lh: mean attention from the answer tokens to the
        needle's value tokens while the model copies it, on synthetic needle prompts — Wu et al. 2024;
        ``attnlab.llm.head_scan.retrieval_scores``, stored with the calibration as ``Calibration.retrieval``)
    plan[l][h] = FULL for (l, h) ∈ R;  the other heads: ``choose_plan``'s knapsack under what is left of β.

Both phases follow the plan: a retrieval head reads every causal key in the prefill and its KV head keeps
its whole cache; the other heads read band + columns (their per-input columns chosen from the last
queries) and their cache keeps what they can still read.  Option ``retrieval_heads`` = k.
"""

import numpy as np

from attnlab.errors import UserError
from attnlab.llm.methods import register
from attnlab.llm.methods.base import PlanMethod


@register
class AttnlabRetrieval(PlanMethod):
    name = "attnlab-retrieval"
    calibrated = True
    needs_retrieval = True
    options = {"retrieval_heads": (int, 0, 10**6)}
    prefill = "the k heads of largest retrieval score full; the others their planned band + columns (knapsack over the rest of β)"
    decoding = "retrieval heads' KV heads keep the whole cache; the others keep what their support can still read"

    def make_plan(self, model, n, calibration):
        from attnlab.llm.plan import choose_plan

        k = int(self.opts.get("retrieval_heads", 8))
        r = np.asarray(calibration.retrieval, dtype=np.float64)                     # (L, H)
        if k and not r.any():
            raise UserError(f"--method {self.name}: the calibration holds no retrieval scores (made before them); recalibrate")
        if k > r.size:
            raise UserError(f"--method {self.name}: retrieval_heads={k} but the model has {r.size} heads")
        keep = np.zeros(r.shape, dtype=bool)
        if k:
            keep.reshape(-1)[np.argsort(-r.reshape(-1), kind="stable")[:k]] = True
        plan = choose_plan(calibration, self.budget, n, keep_full=keep, method=self.name)
        plan.meta["retrieval_heads"] = [[int(l), int(h)] for l, h in zip(*np.nonzero(keep))]
        return plan

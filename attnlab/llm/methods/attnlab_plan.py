"""attnlab's per-head plan: band + columns per head, chosen by a knapsack over calibrated options.

    plan[l][h] = FULL | B_{w_lh} ∪ (rows × (T_fixed ∪ T_dyn(x)))   with Σ entries ≤ β·L·H·n(n+1)/2,

chosen by ``attnlab.llm.plans.selection.choose_plan`` from a table of the calibration:

    attnlab-band       ``err-rel`` when the calibration holds option errors, else ``fit`` (the per-head band plan
                       alone, no retrieval part; the recommended default ``attnlab`` is a preset of
                       ``attnlab-retrieval``)
    attnlab-mass       ``fit``: maximise the captured mass μ_h(w, g) with the exact fit's columns
    attnlab-est        ``est``: the same with the columns an input gets at run time
    attnlab-err        ``err``: minimise Σ_h ε_h, ε_h = mean_i ‖W_h (o_S,i − o_i)‖²
    attnlab-err-rel    ``err-rel``: ε_h of layer l divided by mean ‖x‖² of its residual stream
    attnlab-err-grad   ``err-grad``: ε_h of layer l times mean ‖∂L/∂x‖² (needs the loss gradients)
    attnlab-delta      ``delta``: minimise Σ_h (g_i · W_h (o_S,i − o_i))² (needs the loss gradients)

Option ``pages`` = K (every variant): at decoding each planned head also reads back the K pages of 16
evicted keys of largest Quest bound (``Plan.pages``, ``attnlab.llm.execution.pages``; 0, the default: none).
Option ``slashes`` = s (every variant): at the prefill each planned head (not full, not in a sliding layer) also
reads the s diagonals δ < −w of largest mass from its last queries, chosen per input (``HeadPlan.slashes``;
prefill only); their bound s·(n − 1) entries per head (``plan.slash_fraction``) is taken from β before the knapsack.
Option ``widths`` = all | own (every variant): the bands offered to the knapsack — every width the calibration
measured (default; with MInference in the same run its candidate widths too) or attnlab's grid alone, so that the
plan does not depend on which other methods were calibrated with it (``selection.choose_plan``).
``PlanFile`` runs a plan saved by ``attnlab plan``.
"""

import warnings

from attnlab.llm.methods import is_registered, register, register_file_method
from attnlab.llm.methods.base import Option, PlanMethod
from attnlab.llm.methods.parts.band_floor import BandFloor
from attnlab.llm.methods.parts.slash_lines import SlashLines


@register
class AttnlabPlan(PlanMethod):
    name = "attnlab-band"
    calibrated = True
    table: str | None = None      # ``choose_plan``'s table (None: its default)
    options = {"pages": Option(0, 0, 10**6, "pages of 16 evicted keys each planned head reads back at decoding "
                               "(Quest bound)"),
               "slashes": SlashLines.options["slashes"],   # declared once, by the part (experimental)
               "widths": BandFloor.options["widths"]}
    prefill = ("per head its planned support (band w_h + sink columns + per-input columns; slashes=s: + s per-input "
               "diagonals), some heads full")
    decoding = ("the cache keeps, per KV head, the keys its heads can still read (band + columns; slash lines are "
                "prefill-only)")

    def make_plan(self, model, n, calibration):
        from attnlab.errors import UserError
        from attnlab.llm.plans.plan import slash_fraction, with_slashes
        from attnlab.llm.plans.selection import choose_plan

        s = int(self.option("slashes"))
        widths = self.option("widths")
        shape = calibration.shape
        lines = slash_fraction(shape.get("windows"), shape["num_layers"], shape["num_heads"], s, n or calibration.n)
        if lines and lines >= self.budget:
            raise UserError(f"budget {self.budget}: below {s} slash lines per head ({lines:.4f} of the entries at "
                            f"n = {n})")
        if self.table is None:
            if not (calibration.err_rows and calibration.err.any()):
                warnings.warn(f"calibration n={calibration.n} holds no option errors (made before them): "
                              f"{self.name} uses the mass rule; recalibrate for the output-error rule", stacklevel=2)
            plan = choose_plan(calibration, self.budget - lines, method=self.name, widths=widths)
        else:
            plan = choose_plan(calibration, self.budget - lines, table=self.table, method=self.name, widths=widths)
        plan.budget = self.budget
        if s:
            plan.meta["slashes"] = s
        plan.pages = int(self.option("pages"))
        return with_slashes(plan, s) if s else plan


def _variant(table: str, grads: bool = False) -> type[AttnlabPlan]:
    """The attnlab plan chosen by one table of ``choose_plan`` (a study of the rule; not run by default)."""
    name = "attnlab-mass" if table == "fit" else f"attnlab-{table}"
    cls = type(name.replace("-", "_"), (AttnlabPlan,),
               {"name": name, "table": table, "prefill": f"as attnlab-band's, the plan chosen by the {table} table: "
                + AttnlabPlan.prefill, "calibration_grads": grads, "default_run": False, "__module__": __name__,
                "__doc__": f"attnlab's plan chosen by choose_plan(table={table!r})."})
    return register(cls)


TABLES = (("fit", False), ("est", False), ("err", False), ("err-rel", False), ("err-grad", True), ("delta", True))
for _table, _grads in TABLES:   # (table, needs the loss gradients)
    _variant(_table, _grads)


@register_file_method
class PlanFile(PlanMethod):
    """A plan read from a file (``attnlab plan``): its method, budget and length are the file's."""

    name = "plan"
    prefill = AttnlabPlan.prefill
    decoding = AttnlabPlan.decoding

    def __init__(self, path):
        from attnlab.llm.plans.plan import Plan

        self.path = str(path)
        self.file_plan = Plan.load(path, "--plan", is_registered)   # the option that names the file, in its errors
        super().__init__(self.file_plan.budget if 0 < self.file_plan.budget <= 1 else 1.0)

    def make_plan(self, model, n, calibration):
        return self.file_plan.check(model, name=f"--plan {self.path}", n=n)   # another model or another length: refused

    def describe(self) -> dict:
        return {**super().describe(), "method": f"plan:{self.file_plan.method}", "file": self.path}

"""MInference (Jiang et al. 2024, "MInference 1.0: Accelerating Pre-filling for Long-Context LLMs via Dynamic Sparse
Attention").

``minference`` — as the paper defines it (default ``patterns=search``): each head runs one of MInference's
three patterns, chosen offline on calibration text by the paper's Kernel-Aware Optimal Sparse Pattern
Search (``attnlab.llm.calibration.pattern_search``: the pattern whose support captures the most attention mass of the
full softmax, all three at the same cost of K = β(n + 1)/2 keys per row); the per-input parts are
estimated on every prompt (``attnlab.llm.execution.sparse_patterns``):

    Λ-shape         S_h(i) = {j < a} ∪ {i − w ≤ j ≤ i},  a + w + 1 = K                       (static)
    vertical-slash  S_h(i) = {j ≤ i : j ∈ V} ∪ {j ≤ i : j − i ∈ Δ},  |V| + |Δ| = K
                    â_rj = softmax_{j ≤ p_r}(q_{p_r}·k_j · scaling),  p_r = n − 64 + r   (the last 64 queries)
                    V = top_|V|(Σ_r â_rj)  (the first min(30, |V|) keys always),
                    Δ = top_|Δ|(Σ_r â_{r, p_r + δ}) over δ ≤ 0  (the nearest min(100, |Δ|) always)
    block-sparse    S_h(i) = ∪_{u ∈ U(t)} {64u ≤ j < 64u + 64, j ≤ i},  t = ⌊i/64⌋,
                    U(t) = {t} ∪ top_{k−1}{u < t : q̄_t·k̄_u}  (q̄, k̄: block means),  64(k − 1) + 32.5 ≈ K

Decoding reads the whole KV cache (MInference sparsifies the prefill only).  ``patterns=vs``: every head
vertical-slash with v = ⌊K/2⌋, s = K − v (options ``vertical``, ``slash``); needs no calibration.  What
MInference's released configs amount to: its code's search maps Λ and block-sparse winners to
vertical-slash, and the shipped per-model pattern files list vertical-slash for every head (Phi-3: 43 of
1024 heads Λ).  Each head's pattern is written as the execution seam's parts and the layer runs on the device's
backend (``minference_runner.pattern_parts``): vertical-slash as band + columns + diagonals; Λ as band + sink
columns; block-sparse as band 0 + the chosen key blocks of each 64-row query block.

``minference-mass`` / ``minference-error`` — attnlab's earlier variants: per head one of 6 candidate
patterns scaled to the budget (Λ-shape, vertical-slash ×4, block-sparse mapped to vertical-slash),
chosen on calibration text by captured mass or by the output error of the last queries, slash lines
as the contiguous band, and the cache evicted to what the pattern can read
(``attnlab.llm.plans.baselines.minference``).
"""

from __future__ import annotations

from attnlab.errors import UserError
from attnlab.llm.methods import register
from attnlab.llm.methods.base import Option, PlanMethod

# numpy and torch load inside the functions that compute: `attnlab methods` reads this file's class without them

__all__ = ["MInference", "MInferenceError", "MInferenceMass"]


@register
class MInference(PlanMethod):
    name = "minference"
    baseline = True
    prefill = ("per head the pattern MInference's offline search chose on calibration text (most attention mass at the "
               "same cost, K = β(n+1)/2 keys per row): Λ-shape, vertical-slash (lines from the last 64 queries) or "
               "block-sparse (64×64 blocks by pooled q·k); patterns=vs: every head vertical-slash")
    decoding = "the whole KV cache is kept and read (MInference sparsifies the prefill only)"
    calibrated = True                  # the default, patterns=search; patterns=vs needs none (set per instance)
    options = {"patterns": Option("search", help="search: each head its pattern from the offline search (needs "
                                  "calibration); vs: every head vertical-slash", choices=("search", "vs")),
               "vertical": Option(None, 0, 10**7, "patterns=vs: vertical lines per head (default: half of β(n+1)/2)",
                                  kind=int),
               "slash": Option(None, 1, 10**7, "patterns=vs: slash lines per head (default: the other half)", kind=int)}

    def __init__(self, budget: float = 1.0, **options):
        super().__init__(budget, **options)
        self.patterns = self.option("patterns")
        lines = sorted({"vertical", "slash"} & set(self.opts))
        if self.patterns == "search" and lines:
            raise UserError(f"--option {lines[0]}: only with patterns=vs (the search sets every pattern at β's "
                            "keys per row)")
        self.calibrated = self.patterns == "search"
        self.heads: list[list[dict]] | None = None

    def lines(self, n: int) -> tuple[int, int]:
        """(v, s): the options, else half of the β(n + 1)/2 keys per row each."""
        from attnlab.llm.execution import sparse_patterns as sp

        keys = sp.budget_keys(self.budget, n)
        return int(self.opts.get("vertical", keys // 2)), int(self.opts.get("slash", keys - keys // 2))

    def calibration_pattern_keys(self, n: int) -> list[int] | None:
        from attnlab.llm.execution import sparse_patterns as sp

        return [sp.budget_keys(self.budget, n)] if self.patterns == "search" else None

    def make_plan(self, model, n, calibration):
        from attnlab.llm.plans.plan import Plan, model_shape

        shape = model_shape(model)
        if self.patterns == "vs":
            v, s = self.lines(max(n, 1))
            head = {"pattern": "vs", "vertical": v, "slash": s}
            self.heads = [[head] * shape["num_heads"] for _ in range(shape["num_layers"])]
        else:
            self.heads = self.searched(calibration, n)
        return Plan.full(shape, n)

    def searched(self, calibration, n: int) -> list[list[dict]]:
        """The per-head choice from the calibration's recall table at this budget (``pattern_search.choose``)."""
        from attnlab.llm.calibration.pattern_search import choose
        from attnlab.llm.execution import sparse_patterns as sp

        K = sp.budget_keys(self.budget, n)
        keys = list(getattr(calibration, "pattern_keys", []))
        if K not in keys:
            raise UserError(f"--method minference: the calibration holds no pattern search at {K} keys per row "
                            f"(β = {self.budget:g}, n = {n}); it is measured by `attnlab eval --calibrate`")
        return choose(calibration.pattern_recall[:, :, keys.index(K)], K)

    def layer_runner(self):
        from attnlab.llm.methods.minference_runner import PatternRunner

        return PatternRunner, {"patterns": self.heads}

    def new_cache(self, model):
        """The model's own cache: every key of a full layer, a sliding layer its window (decoding reads what full's
        does)."""
        from transformers import DynamicCache

        return DynamicCache(config=model.config)

    def prefill_fraction(self, n: int) -> float:
        """Upper bound of β: the entries each head reads over the causal entries of all heads.

        A head of a full layer reads its pattern's entries (``sparse_patterns.entries``); a head of a sliding layer
        (Gemma-3) runs the model's window W (``PatternRunner.prefill``): Σ_i min(i + 1, W) entries whatever its pattern,
        counted as the full plan counts it (``plan.head_entries``).
        """
        if not self.heads:
            return 1.0
        from attnlab.llm.execution import sparse_patterns as sp
        from attnlab.llm.plans.plan import FULL, head_entries

        read = 0
        for l, row in enumerate(self.heads):
            W = self.plan.window(l)
            if W is None:
                read += sum(sp.entries(hd["pattern"], hd, n) for hd in row)
            else:   # a sliding layer reads its window
                read += len(row) * head_entries(FULL, 0, 0, n, W)
        return read / (len(self.heads) * len(self.heads[0]) * n * (n + 1) / 2)

    def describe(self) -> dict:
        from attnlab.llm.calibration.pattern_search import counts

        d = super().describe()
        if self.heads:
            d["pattern_counts"] = counts(self.heads)
        return d


class _MInferenceByTable(PlanMethod):
    calibrated = True
    by = "mass"
    prefill = "per head its calibrated pattern: a band of slash lines + sink or per-input vertical columns"
    decoding = "the cache keeps what the pattern can still read (band + columns); the rest is evicted"

    def calibration_candidates(self, shape, n):
        from attnlab.llm.plans import baselines

        return baselines.minference_candidates(self.budget, n, shape)

    def make_plan(self, model, n, calibration):
        from attnlab.llm.plans import baselines

        return baselines.minference(calibration, self.budget, by=self.by)


@register
class MInferenceMass(_MInferenceByTable):
    name = "minference-mass"
    by = "mass"


@register
class MInferenceError(_MInferenceByTable):
    name = "minference-error"
    by = "error"

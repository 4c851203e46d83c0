"""Read-back: at decoding every planned head also reads the K pages of 16 evicted keys of largest score.

    pages P_1 … P_K of 16 evicted keys, chosen per step by Quest's bound Σ_c max(q_c·min_c, q_c·max_c)
    (``execution.pages``), or k of them by the mean key's score q·k̄_P (``Plan.mean_pages``);
    page_score = calibrated: k = K − ⌊K/2⌋ where that split ranks the pages full attention reads better than the bound
    alone on the calibration text (recall@K over the last 32 rows of its first window, ``calibration.page_ranking``,
    ``Calibration.page_ranking``), else k = 0.

Quest's bound sums a per-channel slack over d_k channels: SmolLM2 (d_k = 64) keeps the bound, Gemma-3 (d_k = 256) the
split.  Decoding only: no share of β.
"""

from __future__ import annotations

from attnlab.errors import UserError
from attnlab.llm.methods.base import Option
from attnlab.llm.methods.parts.part import Draft, Part


class ReadBack(Part):
    name = "read-back"
    purpose = "at decoding each planned head reads back the K pages of evicted keys of largest score"
    sliding = "none in a sliding layer: a key that leaves the window is dropped, never stored nor read back"
    share_rule = "none: decoding only"
    options = {
        "pages": Option(0, 0, 10**6, "K: pages of 16 evicted keys each planned head reads back a decoding step"),
        "page_score": Option("bound", help="how the pages are chosen: bound (Quest's, or mean_pages as given), or "
                             "calibrated: half by the mean key where that split ranks the pages full attention reads "
                             "better on the calibration text (recall@K)", choices=("bound", "calibrated")),
        "mean_pages": Option(0, 0, 10**6, "k (needs pages ≥ k): of those pages, k chosen by the mean key's score "
                             "q·k̄_P, not the bound",
                             experimental="readback-dev: 8 of 16 pages by the mean key tie on Gemma-3 (8K 5/5, 2K "
                             "8/10) and lose one NIAH dev prompt on SmolLM2 (8/10 against 9/10); page_score=calibrated "
                             "chooses the split per model instead (docs/records/readback-dev)"),
    }
    requires = (("mean_pages", "pages", "it chooses among the pages read back"),)

    def check(self, method: str, every: dict) -> None:
        super().check(method, every)
        K, k = int(self["pages"]), int(self["mean_pages"])
        if self["page_score"] == "calibrated" and (k or not K):
            raise UserError(f"--method {method}: page_score=calibrated " + ("chooses mean_pages itself (give one of "
                            "them)" if k else "needs pages > 0 (it chooses among the pages read back)"))
        if k > K:
            raise UserError(f"--method {method}: mean_pages={k} needs pages >= {k} (it chooses among the pages read "
                            f"back; pages={K})")

    def page_ranking_pages(self) -> int:
        return int(self["pages"]) if self["page_score"] == "calibrated" else 0

    def apply(self, plan, draft: Draft):
        plan.pages = int(self["pages"])
        plan.mean_pages = int(self["mean_pages"])
        if self["page_score"] == "calibrated":   # the split where it ranks better on the calibration text
            import numpy as np

            from attnlab.llm.calibration.page_ranking import ranking_row

            got = ranking_row(getattr(draft.calibration, "page_ranking", np.zeros(8)))   # rank_pages' figures
            K_cal = got["K"]
            if K_cal != plan.pages:
                raise UserError(f"--method {draft.method}: page_score=calibrated needs the calibration's page ranking "
                                f"at K = {plan.pages} (it has {f'K = {K_cal}' if K_cal else 'none'}); recalibrate")
            bound, split = got["recall_bound"], got["recall_half"]
            better = None not in (split, bound) and split > bound                          # none measured: the bound
            plan.mean_pages = plan.pages - plan.pages // 2 if better else 0
            plan.meta.update(page_score={"recall_bound": bound, "recall_split": split, "mean_pages": plan.mean_pages})
        return plan

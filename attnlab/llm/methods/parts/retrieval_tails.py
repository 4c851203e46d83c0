"""Retrieval tails: the k heads of largest retrieval score read every key from the rows that ask.

    R = the k heads of largest r_lh   (r_lh: mean attention from the answer tokens to the needle's value tokens while
        the model copies it, on synthetic needle prompts — Wu et al. 2024; ``Calibration.retrieval``)
    tail = T > 0: each head of R reads every causal key from its last T prefill rows (the question, the answer
        prefix) and its whole cache at decoding (``HeadPlan.tail``);  tail = 0: each head of R runs full.

    β_tails = Σ_{h∈R, global layer} tail_entries(0, T, n) / (L·H·n(n+1)/2)   (w = 0: the bound before the knapsack)

A head needs the far context where the context is queried, not on every row: 16 such heads at 2K cost ≈ 0.4 % of
the entries, not 6 %.
"""

from __future__ import annotations

from attnlab.errors import UserError
from attnlab.llm.methods.base import Option
from attnlab.llm.methods.parts.part import Draft, Part, head_replaced

TAIL = 64   # the default tail: rows of a retrieval head that read every key


class RetrievalTails(Part):
    name = "retrieval-tails"
    purpose = "the k heads of largest retrieval score read every key from their last T prefill rows"
    sliding = "a retrieval head in a sliding layer keeps its window: no tail, no cost"
    share_rule = "Σ_{h∈R} tail_entries(0, T, n): the tails' rows, w = 0"
    needs_retrieval = True
    options = {
        "retrieval_heads": Option(16, 0, 10**6, "k: heads of largest retrieval score that read every key from their "
                                  "tail"),
        "tail": Option(TAIL, 0, 10**7, "T: last prefill rows of a retrieval head that read every key (0: the head runs "
                       "full)"),
        "by_kv": Option(0, 0, 1, "1: retrieval heads taken as whole KV groups",
                        experimental="SmolLM2 4K multi-key dev prompts: 33 heads in 11 KV groups 5/10, 48 in 16 groups "
                        "7/10 at 923 KV tokens (4.4× fewer), the per-head choice 7/10 — the heads that matter lie in "
                        "more KV heads than 5× allows (docs/archive/earlier-results-multikey.md)"),
    }

    def choose(self, draft: Draft) -> None:
        """R: the k heads of largest score, or (by_kv) the ⌈k / r⌉ KV groups of largest best score, r = H / H_kv."""
        import numpy as np

        k = int(self["retrieval_heads"])
        r = np.asarray(draft.calibration.retrieval, dtype=np.float64)                   # (L, H)
        if k and not r.any():
            raise UserError(f"--method {draft.method}: the calibration holds no retrieval scores (made before them); "
                            "recalibrate")
        if k > r.size:
            raise UserError(f"--method {draft.method}: retrieval_heads={k} but the model has {r.size} heads")
        keep = np.zeros(r.shape, dtype=bool)
        if k and int(self["by_kv"]):   # whole KV groups, ranked by their best query head's score
            L, H = r.shape
            g = H // int(draft.calibration.shape.get("num_kv_heads") or H)              # query heads per KV head
            best = r.reshape(L, H // g, g).max(-1).reshape(-1)                          # (L·H_kv,)
            groups = np.argsort(-best, kind="stable")[: -(-k // g)]
            keep.reshape(-1, g)[groups] = True                                  # query head h reads KV head h // g
        elif k:
            keep.reshape(-1)[np.argsort(-r.reshape(-1), kind="stable")[:k]] = True
        draft.keep = keep
        draft.heads = [[int(l), int(h)] for l, h in zip(*np.nonzero(keep))]

    def share(self, draft: Draft) -> float:
        from attnlab.llm.plans.plan import tail_entries

        T = int(self["tail"])
        if not T:
            return 0.0
        return sum(tail_entries(0, T, draft.n) for l, _ in draft.heads if draft.global_layer(l)) / draft.total

    def share_text(self) -> str:
        return f"the {self['retrieval_heads']} retrieval heads' tails of {self['tail']} rows"

    def knapsack(self, draft: Draft) -> dict:
        return {} if int(self["tail"]) else {"keep_full": draft.keep}   # tail = 0: the heads of R run full

    def apply(self, plan, draft: Draft):
        T = int(self["tail"])
        if T:
            for l, h in draft.heads:
                if not plan.heads[l][h].is_full and draft.global_layer(l):
                    head_replaced(plan, l, h, tail=T)
        return plan

    def meta(self) -> dict:
        return {"tail": int(self["tail"])} | ({"by_kv": 1} if self["by_kv"] else {})

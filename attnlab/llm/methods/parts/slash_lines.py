"""Slash lines: at the prefill every planned head also reads the s diagonals δ < −w of largest mass from its last
queries, chosen per input (``HeadPlan.slashes``, ``plans.slash_lines``; prefill only).

    β_slashes = slash_fraction = s·(n − 1) per planned head of a global layer / (L·H·n(n+1)/2)
"""

from __future__ import annotations

from attnlab.llm.methods.base import Option
from attnlab.llm.methods.parts.part import Draft, Part


class SlashLines(Part):
    name = "slash-lines"
    purpose = "every planned head also reads s per-input diagonals in the prefill"
    sliding = "none in a sliding layer"
    share_rule = "s·(n − 1) per planned head of a global layer"
    options = {"slashes": Option(0, 0, 10**4, "s: per-input diagonals δ < −w each planned head also reads in the "
                                 "prefill", experimental="SmolLM2 NIAH at 2K: attnlab-retrieval:slashes=8 8/10 at "
                                 "β = 0.05 and 9/10 at 0.10, as without them (perplexity ±0.2) "
                                 "(docs/archive/earlier-results-retrieval.md)")}

    def share(self, draft: Draft) -> float:
        from attnlab.llm.plans.plan import slash_fraction

        return slash_fraction(draft.windows, draft.L, draft.H, int(self["slashes"]), draft.n)

    def share_text(self) -> str:
        return f"{self['slashes']} slash lines per head"

    def apply(self, plan, draft: Draft):
        from attnlab.llm.plans.plan import with_slashes

        s = int(self["slashes"])
        return with_slashes(plan, s) if s else plan

    def meta(self) -> dict:
        return {"slashes": int(self["slashes"])} if self["slashes"] else {}

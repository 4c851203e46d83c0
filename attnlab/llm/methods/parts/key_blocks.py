"""Key blocks of the retrieval heads: on every prefill row, the K blocks of 16 keys of largest pooled score.

    a retrieval head's block of 16 queries I also reads the K key blocks J of largest q̄_I · k̄_J, chosen per input
    (``HeadPlan.blocks``, ``plans.key_blocks``)

    β_blocks = Σ_{h∈R, global layer} min(K·16, n)·(n − 1) / (L·H·n(n+1)/2)   (w = 0: the bound before the knapsack)

Multi-key needles need it: the rows of a later needle must see the earlier ones in the heads that retrieve, not only
the rows that ask.
"""

from __future__ import annotations

from attnlab.llm.methods.base import Option
from attnlab.llm.methods.parts.part import Draft, Part, head_replaced
from attnlab.llm.plans.limits import BLOCK, BLOCKS_MAX


class KeyBlocks(Part):
    name = "key-blocks"
    purpose = "each retrieval head also reads, on every prefill row, the K key blocks of 16 of largest pooled score"
    sliding = "none in a sliding layer (its window holds every key it may read)"
    share_rule = "|R|·min(16·K, n)·(n − 1)"
    options = {"blocks": Option(0, 0, BLOCKS_MAX, "K (needs tail): key blocks of 16 a retrieval head reads on every "
                                "prefill row")}
    requires = (("blocks", "tail", "tail=0 keeps the retrieval heads full: nothing to choose"),)

    def share(self, draft: Draft) -> float:
        K = int(self["blocks"])
        n = draft.n
        return sum(min(K * BLOCK, n) * (n - 1) for l, _ in draft.heads if draft.global_layer(l)) / draft.total

    def share_text(self) -> str:
        return f"{self['blocks']} key blocks"

    def apply(self, plan, draft: Draft):
        K = int(self["blocks"])
        if K:
            for l, h in draft.heads:
                if plan.heads[l][h].tail:
                    head_replaced(plan, l, h, blocks=K)
        return plan

    def meta(self) -> dict:
        return {"blocks": int(self["blocks"])} if self["blocks"] else {}

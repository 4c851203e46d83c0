"""Key blocks of the other heads: every planned head outside R reads K' key blocks of 16 per block of 16 queries.

    a planned head (not full, not a retrieval head) of a global layer also reads, on every prefill row, the K' key
    blocks of largest pooled score for its block of 16 queries; at decoding it reads what its band and columns hold
    and the keys of the blocks its last query block chose, so its cache stays compressed.

    β_other = #{such heads} · min(K'·16, n)·(n − 1) / (L·H·n(n+1)/2)

Why: at 4K a multi-key needle at depth 0 was lost by every plan with a full decoding after the plan's prefill as
well (the prefill loses it), and found by the per-row top-k oracle at the same β: the rows that choose their own
keys outside the retrieval heads keep it.
"""

from __future__ import annotations

from attnlab.llm.methods.base import Option
from attnlab.llm.methods.parts.part import Draft, Part, head_replaced
from attnlab.llm.plans.limits import BLOCK, BLOCKS_MAX


class OtherBlocks(Part):
    name = "other-blocks"
    purpose = "every other planned head reads K' key blocks of 16 per block of 16 queries in the prefill"
    sliding = "none in a sliding layer"
    share_rule = "#(planned heads outside R)·min(16·K', n)·(n − 1)"
    options = {"other_blocks": Option(0, 0, BLOCKS_MAX, "K': key blocks of 16 every other planned head reads on every "
                                      "prefill row")}

    def others(self, draft: Draft, l: int, h: int) -> bool:
        return draft.global_layer(l) and (draft.keep is None or not draft.keep[l, h])

    def share(self, draft: Draft) -> float:
        K2 = int(self["other_blocks"])
        heads = sum(1 for l in range(draft.L) for h in range(draft.H) if self.others(draft, l, h))
        return heads * min(K2 * BLOCK, draft.n) * (draft.n - 1) / draft.total

    def share_text(self) -> str:
        return f"the other heads' {self['other_blocks']} key blocks"

    def apply(self, plan, draft: Draft):
        K2 = int(self["other_blocks"])
        if K2:   # a full head, a retrieval head, a head with a tail, a sliding layer: none
            for l in range(draft.L):
                for h in range(draft.H):
                    old = plan.heads[l][h]
                    if self.others(draft, l, h) and not old.is_full and not old.tail:
                        head_replaced(plan, l, h, blocks=K2)
        return plan

    def meta(self) -> dict:
        return {"other_blocks": int(self["other_blocks"])} if self["other_blocks"] else {}

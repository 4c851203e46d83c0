"""A voted decoding cache: a retrieval head reads, instead of its whole cache, the P keys its tail rows voted for.

    C_h = T_h ∪ B_h ∪ V_h,   V_h = top-P_j Σ_{i in the tail} a_ij      (the decoding columns: columns, block keys, voted
                                                                     keys; SnapKV's vote, cast by the rows that ask)

``tail_keep`` (the plan file's ``kept``, ``LayerPlan.vote_size``) is the vote's size P: how many keys the vote picks
for the head to read, not the cache's eviction decision (``DecodeStep.keep``), which then keeps those keys resident.

Decoding only: the prefill, and so β, is unchanged (no share); its KV head's cache stays compressed.
"""

from __future__ import annotations

from attnlab.llm.methods.base import Option
from attnlab.llm.methods.parts.part import Draft, Part, head_replaced
from attnlab.llm.plans.limits import VOTE_NEXT_MAX

NOT_TAKEN_KV = ("SmolLM2 multi-key dev prompts: attnlab:group_vote=1:decode_band=192 13/20 at 2K as the default, "
                "6/20 at 8K against its 10/20: not taken (docs/records/page-choice-dev, benchmarks/recipes/"
                "kv-budget-dev.sh)")


class VotedCache(Part):
    name = "voted-cache"
    purpose = "at decoding a retrieval head keeps its band, columns and the P keys its tail rows attended most"
    sliding = "none in a sliding layer (a retrieval head there has no tail to vote)"
    share_rule = "none: decoding only"
    options = {
        "tail_keep": Option(0, 0, 10**7, "P (needs tail): keys a retrieval head keeps at decoding, voted by its tail "
                            "rows (0: its whole cache)"),
        "vote_next": Option(0, 0, VOTE_NEXT_MAX, "s (needs tail_keep): a block's vote also counts the mass of the "
                            "s blocks before it",
                            experimental="SmolLM2 multi-key dev prompts at 2K and 8K: vote_next=1 and vote_next=2 "
                            "13/20 and 10/20, as the default (full 14/20 and 12/20): no gain, not taken "
                            "(docs/records/page-choice-dev)"),
        "group_vote": Option(0, 0, 1, "1 (needs tail_keep): the retrieval heads of a KV group cast one vote, P keys a "
                             "KV head", experimental=NOT_TAKEN_KV),
    }
    requires = (("tail_keep", "tail", "the tail's rows cast the vote"),
                ("vote_next", "tail_keep", "it shapes the vote"),
                ("group_vote", "tail_keep", "it groups the vote"))

    def apply(self, plan, draft: Draft):
        P, V = int(self["tail_keep"]), int(self["vote_next"])
        if P:
            for l, h in draft.heads:
                if plan.heads[l][h].tail:
                    head_replaced(plan, l, h, kept=P, vote_next=V)
        plan.group_vote = int(self["group_vote"])
        return plan

    def meta(self) -> dict:
        P, V = int(self["tail_keep"]), int(self["vote_next"])
        return ({"tail_keep": P} if P else {}) | ({"vote_next": V} if V else {}) | \
            ({"group_vote": 1} if self["group_vote"] else {})

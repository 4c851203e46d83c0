"""A decoding band: at decoding every planned head's band reads, and its KV head keeps, at most c keys.

    w_dec = min(w_h, c), in a sliding layer min(W − 1, c)      (``Plan.decode_band``, ``LayerPlan.w_read_at``)

Its columns, voted keys and read-back pages as before: the decoding cache's budget apart from the prefill's β, as
SnapKV's and DuoAttention's caches are.  The prefill's attention is unchanged (no share of β), but a voted cache's
vote, cast at the prefill's end, then counts the keys the capped band no longer holds (``prefill.vote``).
"""

from __future__ import annotations

from attnlab.llm.methods.base import Option
from attnlab.llm.methods.parts.part import Draft, Part
from attnlab.llm.methods.parts.voted_cache import NOT_TAKEN_KV


class DecodeBand(Part):
    name = "decode-band"
    purpose = "at decoding every planned band reads and keeps at most c keys"
    sliding = "min(W − 1, c) keys in a sliding layer"
    share_rule = "none: decoding only"
    options = {"decode_band": Option(0, 0, 10**7, "c: at decoding a planned head's band reads and keeps at most c keys "
                                     "(0: its prefill band w)", experimental=NOT_TAKEN_KV)}

    def apply(self, plan, draft: Draft):
        plan.decode_band = int(self["decode_band"])
        return plan

    def meta(self) -> dict:
        return {"decode_band": int(self["decode_band"])} if self["decode_band"] else {}

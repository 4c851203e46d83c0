"""Band floors: the least band the knapsack may give a planned head, in every layer and in a sliding one.

    w_h ≥ f for every planned head (band_floor);   w_h ≥ min(F, W − 1) in a sliding layer of window W (sliding_floor)

``choose_plan`` holds them (where β cannot afford F — Gemma-3 at 2K, β = 0.1 — the grid's next band below it that
fits).  Why: the knapsack gave 25 of SmolLM2's heads w = 0 at 2K (no neighbour read), and eval-why --layers closed
the NIAH and varied-pass-key losses by one such head.  No share of its own: the knapsack pays the floor from its part.
"""

from __future__ import annotations

from attnlab.llm.methods.base import Option
from attnlab.llm.methods.parts.part import Draft, Part
from attnlab.llm.plans.limits import WIDTHS


class BandFloor(Part):
    name = "band-floor"
    purpose = "every planned head a band of at least f keys, a head of a sliding layer at least min(F, W − 1)"
    sliding = "sliding_floor is its floor there: min(F, W − 1) keys"
    share_rule = "none: the knapsack pays the floors from its own part"
    options = {
        "sliding_floor": Option(0, 0, 10**7, "F: least band of a head in a sliding layer (Gemma-3)"),
        "band_floor": Option(0, 0, 10**7, "f: least band of every planned head (0: the knapsack may give a head no "
                             "neighbour)"),
        "widths": Option("all", help="bands offered to the knapsack: every width calibrated, or attnlab's grid alone",
                         choices=WIDTHS,
                         experimental="SmolLM2 NIAH at 2K: attnlab's grid alone 8/10 and 9/10 at β = 0.05 and "
                         "0.10, every calibrated width 9/10 and 10/10 (docs/archive/earlier-results-retrieval.md)"),
    }

    def knapsack(self, draft: Draft) -> dict:
        return {"sliding_floor": int(self["sliding_floor"]), "widths": self["widths"],
                "band_floor": int(self["band_floor"])}

"""One part of a composed plan: a few declared options, its share of β, and what it does in a sliding layer.

    β = β_knapsack + Σ_parts β_part      β_part: the entries the part may add, a bound stated before the knapsack;
                                         the knapsack (``selection.choose_plan``) spends what is left on bands + columns

A part (a kvpress press; ``composed.ComposedPlan`` composes them as kvpress's ComposedPress does) states:

* ``options``   its options, each declared once (``Option``: default, range, help; ``experimental`` when set aside);
* ``requires``  (option, option of another part, why): the first given > 0 needs the second > 0 — checked once,
                when the method is made (``check``), before any model or calibration work;
* ``sliding``   what it does in a layer with a sliding window (Gemma-3's local layers): one sentence;
* ``choose``    what it picks before the shares (the retrieval heads);
* ``share``     β_part at length n (0: it adds nothing to the prefill);
* ``knapsack``  the keywords it gives ``choose_plan`` (a floor, the widths offered);
* ``apply``     what it adds to the plan the knapsack chose (in place; a new plan where it makes one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from attnlab.errors import UserError
from attnlab.llm.methods.base import Option


@dataclass
class Draft:
    """A plan being made at length n: the calibration, the model's shape, the retrieval heads chosen so far.

    ``windows[l]``: layer l's sliding window (None: a global layer, where the parts act); ``keep`` (L, H): the
    retrieval heads (``retrieval_tails``); ``total`` = L·H·n(n+1)/2, the causal entries of every head.
    """

    method: str
    budget: float
    n: int
    calibration: Any
    L: int
    H: int
    windows: list
    keep: Any = None                      # (L, H) bool, set by the retrieval part (no part: no retrieval head)
    heads: list = field(default_factory=list)   # [[l, h], …] the retrieval heads, in layer order

    @property
    def total(self) -> float:
        return self.L * self.H * self.n * (self.n + 1) / 2

    def global_layer(self, l: int) -> bool:
        return self.windows[l] is None


class Part:
    """A part of a composed plan method.  Subclasses declare the class fields and override what they do."""

    name: ClassVar[str] = ""
    purpose: ClassVar[str] = ""                     # one line: what it adds
    sliding: ClassVar[str] = ""                     # one line: what it does in a sliding layer
    share_rule: ClassVar[str] = "none"              # β_part, as ``share`` computes it (entries over L·H·n(n+1)/2)
    options: ClassVar[dict[str, Option]] = {}
    requires: ClassVar[tuple[tuple[str, str, str], ...]] = ()   # (option, option it needs > 0, why)
    needs_retrieval: ClassVar[bool] = False         # reads the calibration's retrieval scores

    def __init__(self, **values: Any):
        unknown = sorted(set(values) - set(self.options))
        if unknown:
            raise UserError(f"--option: part {self.name} has no option {', '.join(unknown)}"
                            f" (it takes: {', '.join(self.options)})")
        self.values = {key: opt.default for key, opt in self.options.items()}
        self.values.update({key: self.options[key].parse(key, value) for key, value in values.items()})

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def check(self, method: str, every: dict[str, Any]) -> None:
        """The part's dependencies on ``every`` option of the composition (absent part: its options 0)."""
        for key, need, why in self.requires:
            if int(self.values[key]) and not int(every.get(need, 0)):
                raise UserError(f"--method {method}: {key}={self.values[key]} needs {need} > 0 ({why})")

    def choose(self, draft: Draft) -> None:
        pass

    def share(self, draft: Draft) -> float:
        return 0.0

    def share_text(self) -> str:
        """The share named in the error where β cannot pay every part's share."""
        return self.name

    def knapsack(self, draft: Draft) -> dict:
        return {}

    def apply(self, plan, draft: Draft):
        return plan

    def meta(self) -> dict:
        """What the plan file's ``meta`` records of the part."""
        return {}

    def page_ranking_pages(self) -> int:
        """K > 0: the part reads the calibration's page ranking at K."""
        return 0


def head_replaced(plan, l: int, h: int, **fields) -> None:
    """Head (l, h) of ``plan`` with ``fields`` set (a HeadPlan is frozen)."""
    from dataclasses import replace

    plan.heads[l][h] = replace(plan.heads[l][h], **fields)

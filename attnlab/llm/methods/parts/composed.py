"""A plan method composed of parts (``part.Part``), as kvpress's ComposedPress composes presses.

    1. choose   the parts pick what the others read (the retrieval heads R)
    2. shares   β_part of each part at length n; refused in one line where Σ β_part ≥ β
    3. knapsack ``choose_plan`` spends β − Σ β_part on bands + columns, under the parts' floors
    4. apply    each part adds its own to the plan, in the composition's order

The options are the parts' options, each declared once in its part; a dependency between two options (``blocks``
needs ``tail``) is the part's, checked once when the method is made.  ``attnlab-retrieval`` composes every part;
``compose`` makes another in Python, and ``--method retrieval-tails+key-blocks:blocks=8`` on the command line.
"""

from __future__ import annotations

from typing import ClassVar

from attnlab.errors import UserError
from attnlab.llm.methods.base import PlanMethod
from attnlab.llm.methods.parts.part import Draft, Part


class ComposedPlan(PlanMethod):
    """The plan of ``parts`` (part classes, in the order they apply) at budget β."""

    calibrated = True
    parts: ClassVar[tuple[type[Part], ...]] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.options = {key: opt for part in cls.parts for key, opt in part.options.items()}
        cls.needs_retrieval = any(part.needs_retrieval for part in cls.parts)

    def __init__(self, budget: float = 1.0, **options):
        super().__init__(budget, **options)
        self.composed = [part(**{key: v for key, v in self.opts.items() if key in part.options}) for part in self.parts]
        every = {key: value for part in self.composed for key, value in part.values.items()}
        for part in self.composed:   # each dependency once, by the part that has it
            part.check(self.name, every)

    @property
    def page_ranking_pages(self) -> int:
        """K at which the calibration must rank the page scores (0: no part reads them)."""
        return max((part.page_ranking_pages() for part in self.composed), default=0)

    def make_plan(self, model, n, calibration):
        from attnlab.llm.plans.selection import choose_plan

        shape = calibration.shape
        L, H = int(shape["num_layers"]), int(shape["num_heads"])
        draft = Draft(self.name, self.budget, n, calibration, L, H, shape.get("windows") or [None] * L)
        for part in self.composed:
            part.choose(draft)
        shares = [(part, part.share(draft)) for part in self.composed]
        rest = self.budget
        for _, share in shares:
            rest -= share
        spent = sum(share for _, share in shares)
        if spent and spent >= self.budget:
            named = ", ".join(f"{part.share_text()} ({share:.4f})" for part, share in shares if share)
            raise UserError(f"budget {self.budget}: below {named} of the entries at n = {n}")
        knapsack = {}
        for part in self.composed:
            knapsack.update(part.knapsack(draft))
        plan = choose_plan(calibration, rest, n, method=self.name, **knapsack)
        for part in self.composed:
            plan = part.apply(plan, draft)
        plan.budget = self.budget
        plan.meta.update(retrieval_heads=draft.heads)
        for part in self.composed:
            plan.meta.update(part.meta())
        return plan

    @classmethod
    def describe_parts(cls, values: dict | None = None) -> list[tuple[type[Part], dict]]:
        """Each part with the option values ``values`` gives it (a preset's), for ``attnlab methods``."""
        values = values or {}
        return [(part, {key: values[key] for key in part.options if key in values}) for part in cls.parts]

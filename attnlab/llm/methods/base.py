"""A method: how a causal LM's attention runs, stated as two policies (DESIGN.md, point 10).

    prefill policy   S_h(i) ⊆ {j ≤ i}: which keys query i of the prompt reads in head h;
    decoding policy  K_h(t) ⊆ {j < t}: which keys the KV cache keeps after step t, and which of
                     them a generated token reads.

The budgets are stated as the field states them (MInference, DuoAttention, SnapKV, Quest):

    β   = Σ_h |S_h| / (L·H·n(n+1)/2)      the fraction of the causal entries read in the prefill,
    KV  = mean over KV heads of |K_h(t)|   the tokens kept per KV head at decoding.

A method is one small file under ``attnlab/llm/methods/`` that defines a subclass and decorates it
with ``@register``; ``attnlab eval``, ``plan``, ``plan-run`` and the benchmarks look methods up by
name (``attnlab.llm.methods.get``) and never branch on a name.  Applying a method is a context
manager that restores the model as it was::

    m = methods.get("streaming-llm", budget=0.1)
    m.prepare(model, n=4096)                     # calibration-free: the model's shape is enough
    with m.applied(model):
        cache = m.new_cache(model)
        model.generate(ids, past_key_values=cache, max_new_tokens=32, do_sample=False)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, ClassVar

from attnlab.errors import UserError

REFERENCE = "full"   # the method every other is measured against (full attention, ``full.py``)
# what ``describe()`` says of a method's plan (and MInference's patterns): every answer row carries them, and
# eval-why compares them with the row it explains; ``kept_heads`` / ``kept``: the heads with a tail's vote and the
# vote's largest size P (``HeadPlan.kept``, the option ``tail_keep``: keys the vote picks to read, not the cache's keep)
PLAN_FIELDS = ("full_heads", "tail_heads", "pages", "slash_heads", "slashes", "block_heads", "blocks", "kept_heads",
               "kept", "pattern_counts")

__all__ = ["Method", "Option", "PLAN_FIELDS", "PlanMethod"]


@dataclass(frozen=True)
class Option:
    """One option of a method, declared: its default, its range and what it does (a kvpress press's field).

    ``default`` None: derived at run time (``help`` says from what, e.g. from β); ``kind`` the type a value
    given as text is read as (default: the default's type); a number must lie in [lo, hi], a choice be one of
    ``choices``.  ``experimental``: an option no preset uses, with the measurement that set it aside.
    """

    default: Any
    lo: Any = None
    hi: Any = None
    help: str = ""
    kind: type | None = None
    choices: tuple = ()
    experimental: str = ""   # set aside: the measurement that did (``attnlab methods --all`` lists it apart)

    @property
    def type(self) -> type:
        return self.kind or type(self.default)

    def parse(self, key: str, value: Any) -> Any:
        """``value`` (text or a number) read and checked; a one-line UserError naming ``key`` otherwise."""
        kind = self.type
        if kind in (int, float):   # canonical numbers only: ASCII digits, no '_' or spaces, finite
            from attnlab.option_values import number

            out = number(value, kind, f"--option {key}")
        else:
            try:
                out = kind(value)
            except (TypeError, ValueError):
                raise UserError(f"--option {key}: expected {kind.__name__}, got {value!r}") from None
        if self.choices and out not in self.choices:
            raise UserError(f"--option {key}: expected one of {', '.join(self.choices)}, got {out!r}")
        if self.lo is not None and not self.lo <= out <= self.hi:
            raise UserError(f"--option {key}: must be in [{self.lo:g}, {self.hi:g}], got {out}")
        return out

    def range_text(self) -> str:
        """The values the option takes, as ``attnlab methods`` prints them."""
        if self.choices:
            return " | ".join(self.choices)
        if self.lo is not None:
            return f"[{self.lo}, {self.hi}]" if self.type is int else f"[{self.lo:g}, {self.hi:g}]"
        return self.type.__name__


class Method:
    """A prefill policy and a decoding policy, at a budget.  Subclasses set the class fields and ``_install``."""

    name: ClassVar[str] = ""
    prefill: ClassVar[str] = ""        # one sentence: which entries each prompt query reads
    decoding: ClassVar[str] = ""       # one sentence: what the cache keeps, what a new token reads
    calibrated: ClassVar[bool] = False  # needs calibration text (``prepare(..., calibration=...)``)
    needs_retrieval: ClassVar[bool] = False  # needs the calibration's retrieval scores (``Calibration.retrieval``)
    page_ranking_pages: int = 0  # K > 0: needs the calibration's page ranking at K (``Calibration.page_ranking``)
    options: ClassVar[dict[str, Option]] = {}  # option → its declared default, range and help; checked by __init__
    default_run: ClassVar[bool] = True  # run when a benchmark is not told which methods (variants and bounds: False)
    baseline: ClassVar[bool] = False    # a method of the field that attnlab is compared against (``attnlab methods``)
    # the prefill is full attention, S_h(i) = {j ≤ i}, and the cache is made from its keys and values: a full-attention
    # prefill of the same tokens may stand for it (``eval`` reuses one, prefix_cache.py)
    prefill_reuse: ClassVar[bool] = False

    def __init__(self, budget: float = 1.0, **options: Any):
        if not (isinstance(budget, (int, float)) and 0 < budget <= 1):
            raise UserError(f"--budget: must be a fraction in (0, 1], got {budget}")
        self.budget = float(budget)
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise UserError(f"--option: method {self.name} has no option {', '.join(unknown)}"
                            f" (it takes: {', '.join(self.options) or 'none'})")
        self.opts = {key: self.options[key].parse(key, value) for key, value in options.items()}   # the options given
        self.n = 0

    def option(self, key: str) -> Any:
        """The value of option ``key``: the one given, else its declared default (None: derived, see its help)."""
        return self.opts[key] if key in self.opts else self.options[key].default

    # ---- per length ---------------------------------------------------------------------------
    def prepare(self, model, n: int, calibration=None) -> None:
        """Make what the method needs at prompt length n (a plan, gates, …).  ``calibration``: a
        ``calibration.Calibration`` at length n, required when ``calibrated``."""
        if self.calibrated and calibration is None:
            raise UserError(f"--method {self.name}: needs calibration text (--calibrate FILE)")
        self.n = n

    def check_inputs(self) -> None:
        """The method's own input files (a gate file, …) present and readable, checked before any model loads:
        a one-line ``UserError`` naming the option.  Default: nothing to check."""

    def check_model(self, model) -> None:
        """The method's own input files (a gate file, …) checked against ``model`` before anything runs or is
        written: a one-line ``UserError`` naming the file.  Default: nothing to check."""

    # ---- what calibration must measure, and the plan file it gives ------------------------------
    calibration_grads: ClassVar[bool] = False  # the calibration also needs the loss gradients (calibrate(grads=True))

    def calibration_candidates(self, shape: dict, n: int) -> list[tuple[int, int, int]] | None:
        """Extra (w, fixed columns, dynamic columns) options the calibration must measure (MInference's)."""
        return None

    def calibration_pattern_keys(self, n: int) -> list[int] | None:
        """Keys per row K at which the calibration must run MInference's pattern search (``llm.pattern_search``)."""
        return None

    def make_plan(self, model, n: int, calibration):
        """The ``plan.Plan`` this method runs at length n (``attnlab plan`` writes it); a method without one refuses."""
        raise UserError(f"--method {self.name}: runs without a plan file (it is applied directly, not through "
                        "`attnlab plan`)")

    @classmethod
    def writes_plan(cls) -> bool:
        """Whether the method has a plan file that is the method: it defines ``make_plan``, and its policy is not in
        its decoding alone (a method whose prefill is full attention, ``prefill_reuse``, besides full itself — SnapKV —
        would write the plan of full attention under its name, its budget dropped)."""
        return cls.make_plan is not Method.make_plan and (cls.name == REFERENCE or not cls.prefill_reuse)

    # ---- running ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def applied(self, model):
        """Run ``model`` with this method inside the block; the model's attention is restored after."""
        before = model.config._attn_implementation
        self._install(model)
        try:
            yield self
        finally:
            self._uninstall(model)
            model.set_attn_implementation(before)

    def _install(self, model) -> None:  # full attention: nothing to change
        pass

    def _uninstall(self, model) -> None:
        pass

    def new_cache(self, model):
        """The KV cache of the decoding policy (default: transformers' DynamicCache, every key kept; a sliding
        layer keeps its window, as the model's own ``generate`` does)."""
        from transformers import DynamicCache

        return DynamicCache(config=model.config)

    def reuse_tail(self, n: int) -> int:
        """With ``prefill_reuse``: the last prompt tokens the method still runs itself after a reused full-attention
        prefix of n − tail tokens (their queries choose what it keeps, SnapKV's window); 0: the reused prefill is its
        own."""
        return 0

    # ---- budgets as stated ------------------------------------------------------------------
    def prefill_fraction(self, n: int) -> float:
        """β: entries read in the prefill / causal entries of all heads at length n."""
        return 1.0

    def describe(self) -> dict:
        return {"method": self.name, "budget": self.budget, "prefill": self.prefill, "decoding": self.decoding,
                **self.opts}

    def plan_fields(self) -> dict:
        """The ``PLAN_FIELDS`` of ``describe()`` this method has (a result row's description of the plan run)."""
        return {key: value for key, value in self.describe().items() if key in PLAN_FIELDS}


class PlanMethod(Method):
    """A method whose prefill and decoding follow one static ``Plan`` per length (band + columns per head).

    Prefill: each head reads its support S_h (``attention.LayerRunner.prefill``); decoding: the cache
    (``kv_cache.PlanCache``) keeps, per KV head, the keys its query heads can still read.
    """

    def prepare(self, model, n: int, calibration=None) -> None:
        super().prepare(model, n, calibration)
        self.plan = self.make_plan(model, n, calibration)

    def layer_runner(self):
        """How this method runs a layer: the runner class (``attention.LayerRunner`` or a subclass that overrides its
        ``prefill``, ``decode`` or ``keep``) and the keywords it is constructed with (``apply_plan``)."""
        from attnlab.llm.execution.attention import LayerRunner

        return LayerRunner, {}

    def _install(self, model) -> None:
        from attnlab.llm.execution.attention import apply_plan

        self._previous = getattr(model, "attnlab_plan", None)   # a plan the model ran before: put back on exit
        runner, options = self.layer_runner()
        apply_plan(model, self.plan, runner, **options)

    def _uninstall(self, model) -> None:
        from attnlab.llm.execution.attention import apply_plan, remove_plan

        remove_plan(model)
        if getattr(self, "_previous", None) is not None:
            apply_plan(model, self._previous)
            self._previous = None

    def new_cache(self, model):
        from attnlab.llm.execution.kv_cache import PlanCache

        return PlanCache(model)

    def prefill_fraction(self, n: int) -> float:
        return self.plan.fraction(n)

    def describe(self) -> dict:
        d = super().describe()
        if getattr(self, "plan", None) is not None:
            p = self.plan
            tails = sum(1 for row in p.heads for h in row if getattr(h, "tail", 0))
            planned = [h for row in p.heads for h in row if not h.is_full]
            d.update(full_heads=p.full_heads(), fraction=p.fraction(self.n), tail_heads=tails,
                     pages=int(getattr(p, "pages", 0)),
                     slash_heads=p.slash_heads(), slashes=max((h.slashes for h in planned), default=0),
                     block_heads=p.block_heads(), blocks=max((h.blocks for h in planned), default=0),
                     kept_heads=sum(1 for row in p.heads for h in row if getattr(h, "kept", 0)),
                     kept=max((getattr(h, "kept", 0) for row in p.heads for h in row), default=0))
        return d

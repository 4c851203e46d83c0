"""An eval folder's ``config.json`` (``attnlab eval``), format ``attnlab-eval/1``: the settings of the grid it holds.

    {"format": "attnlab-eval/1", "model": str, "tasks": [task], "lengths": [n], "depths": D, "samples": S,
     "methods": [NAME[:key=value…]], "budgets": [β], "plan": FILE | null, "haystack": "noise" | FILE, "seed": s,
     "calibrate": FILE | null, "calibrate_windows": c, "calibrate_mix": "task:k,…" | null, "ppl": FILE | null,
     "ppl_windows": p, "max_new": m | null, "template": "auto" | "chat" | "none", "question": "after" | "before"}

The fields are ``EvalSettings``'s (``attnlab.llm.eval.eval_settings``), one each; the rules: tasks of ``TASKS``, lengths
64 ≤ n ≤ N_MAX, budgets β ∈ (0, 1], each list non-empty (methods may be) with no item twice; a method's name (before its
options) registered, or parts the registry composes; depths, samples, windows, max_new ≥ 1, seed ≥ 0.

Versions: ``template`` and ``question`` came later; a config without them was run with their defaults (``auto``,
``after``), and is read so (``LATER``, the one migration).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from attnlab.schemas.plan import N_MAX
from attnlab.schemas.schema_file import Strict, load_json

__all__ = ["FORMAT", "LATER", "EvalConfig", "load"]

FORMAT = "attnlab-eval/1"
LATER = {"template": "auto", "question": "after"}   # settings added later: a folder without them ran their default
MIN_LENGTH = 64                                     # a prompt's tokens, at least (``check_lengths``)


def _distinct(xs: list, what: str) -> list:
    seen = [x for k, x in enumerate(xs) if x in xs[:k]]
    if seen:
        raise ValueError(f"{seen[0]!r} given twice (each {what} once)")
    return xs


class EvalConfig(Strict):
    """The settings of an eval folder (module docstring)."""

    format: Literal["attnlab-eval/1"]
    model: str = Field(min_length=1)
    tasks: list[str] = Field(min_length=1)
    lengths: list[int] = Field(min_length=1)
    depths: int = Field(ge=1)
    samples: int = Field(ge=1)
    methods: list[str]
    budgets: list[float] = Field(min_length=1)
    plan: str | None
    haystack: str = Field(min_length=1)
    seed: int = Field(ge=0)
    calibrate: str | None
    calibrate_windows: int = Field(ge=1)
    calibrate_mix: str | None
    ppl: str | None
    ppl_windows: int = Field(ge=1)
    max_new: int | None = Field(ge=1)
    template: Literal["auto", "chat", "none"]
    question: Literal["after", "before"]

    @model_validator(mode="before")
    @classmethod
    def _later(cls, doc: Any) -> Any:
        """A config written before ``template`` and ``question``: their defaults, the settings it ran."""
        return {**LATER, **doc} if isinstance(doc, dict) else doc

    @field_validator("tasks")
    @classmethod
    def _tasks(cls, tasks: list[str]) -> list[str]:
        from attnlab.llm.eval.tasks import TASKS

        bad = [t for t in tasks if t not in TASKS]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a task ({', '.join(TASKS)})")
        return _distinct(tasks, "task")

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, lengths: list[int]) -> list[int]:
        if min(lengths) < MIN_LENGTH or max(lengths) > N_MAX:
            bad = min(lengths) if min(lengths) < MIN_LENGTH else max(lengths)
            raise ValueError(f"every length in [{MIN_LENGTH}, {N_MAX}] tokens, got {bad}")
        return _distinct(lengths, "length")

    @field_validator("budgets")
    @classmethod
    def _budgets(cls, budgets: list[float]) -> list[float]:
        bad = [b for b in budgets if not 0 < b <= 1]
        if bad:
            raise ValueError(f"a budget is a fraction in (0, 1], got {bad[0]}")
        return _distinct(budgets, "budget")

    @field_validator("methods")
    @classmethod
    def _methods(cls, specs: list[str]) -> list[str]:
        from attnlab.llm.methods import is_registered  # an eval folder is read by the eval, which runs methods

        bad = [s for s in specs if not is_registered(s.split(":", 1)[0])]
        if bad:
            raise ValueError(f"{bad[0]!r}: not a registered method, preset or composition of parts "
                             "(`attnlab methods --all` lists them)")
        return _distinct(specs, "method")


def load(path, option: str | None = None) -> EvalConfig:
    """The ``config.json`` ``path`` through ``EvalConfig``; one UserError line naming the file, the field and the
    rule otherwise."""
    return load_json(path, EvalConfig, option, what="eval config (config.json of attnlab eval)")

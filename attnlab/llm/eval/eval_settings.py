"""``attnlab eval``'s settings: the options, parsed and checked once, with the files they name read once.

    settings = EvalSettings(model, tasks, lengths, …)     what ``config.json`` keeps (paths, the mix as written)
    checked = check_settings(settings)                   every option checked before the model loads, and
        checked.texts    --haystack, --calibrate, --ppl: each file's text, read once (UTF-8; empty, binary refused)
        checked.mix      --calibrate-mix parsed: [(task, count)]
        checked.shipped  n → the calibration archive attnlab ships, read through its schema (no --calibrate)
    run_eval(model, tokenizer, checked, out)             the grid reads nothing else (``eval_grid``)

A ``CheckedSettings`` is what ``check_settings`` returns and all that ``run_eval`` takes: the grid is handed the
options checked, and what it reads was read, or refused in one ``UserError`` line naming the option, before the model
loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from attnlab.errors import UserError
from attnlab.llm import methods as registry
from attnlab.llm.eval.tasks import QUESTIONS, TASKS, TEMPLATES, PromptFormat

__all__ = ["CheckedSettings", "EvalSettings", "check_budgets", "check_context", "check_lengths", "check_methods",
           "check_settings", "method_at", "parse_budgets", "parse_lengths", "parse_method", "parse_methods",
           "parse_plan_method"]


@dataclass
class EvalSettings:
    model: str
    tasks: list[str] = field(default_factory=lambda: ["niah"])
    lengths: list[int] = field(default_factory=lambda: [2048])
    depths: int = 11
    samples: int = 10
    methods: list[str] = field(default_factory=list)     # registry names besides full
    budgets: list[float] = field(default_factory=lambda: [0.1])
    plan: str | None = None                              # a plan file run beside full
    haystack: str = "noise"                              # "noise" or a text file
    seed: int = 0
    calibrate: str | None = None                         # calibration text of the calibrated methods
    calibrate_windows: int = 2
    calibrate_mix: str | None = None                     # retrieval prompts added ("niah:2,vt:1", calibration.mix)
    ppl: str | None = None                               # text whose perplexity is reported beside
    ppl_windows: int = 1
    max_new: int | None = None                           # answer tokens (default: the task's)
    template: str = "auto"                               # chat | none | auto (the chat template where there is one)
    question: str = "after"                              # the question after or before the context

    def format(self) -> PromptFormat:
        return PromptFormat(self.template, self.question)

    def runs(self) -> list[tuple[str, float]]:
        """(method, β) pairs: full first, then every method at every budget."""
        out = [(registry.REFERENCE, 1.0)]
        if self.plan:
            out.append((registry.PLAN_FILE, 0.0))
        out += [(m, b) for m in self.methods if m != registry.REFERENCE for b in self.budgets]
        return out



class CheckedSettings(NamedTuple):
    """``EvalSettings`` checked once (``check_settings``), with what they name read once, before the model loads."""

    settings: EvalSettings
    texts: dict      # "--haystack", "--calibrate", "--ppl" → the file's text (absent: not given, or noise)
    mix: list        # --calibrate-mix: [(task, count)] (``calibration.mix.parse_mix``)
    shipped: dict    # n → ``ShippedCalibration``: the archive attnlab ships, where a calibrated method runs without
                     # --calibrate


def check_lengths(lengths: list[int]) -> list[int]:
    """Prompt lengths of at least 64 tokens (the model's context is checked once it is known)."""
    if min(lengths) < 64:
        raise UserError(f"--lengths: every length must be >= 64 tokens, got {min(lengths)}")
    return lengths


def check_budgets(budgets: list[float]) -> list[float]:
    """Budgets β in (0, 1]."""
    bad = [b for b in budgets if not 0 < b <= 1]
    if bad:
        raise UserError(f"--budget: must be a fraction in (0, 1], got {bad[0]}")
    return budgets


def check_methods(specs: list[str]) -> list[str]:
    """Registered names with their options: an unknown name or option is one line."""
    for spec in specs:
        base, opts = parse_method(spec)
        registry.get(base, 1.0, **opts)
    return specs


def parse_lengths(text: str) -> list[int]:
    """``--lengths 2048,4096``: positive token counts."""
    from attnlab.option_values import numbers

    return check_lengths(numbers(text, int, "--lengths"))     # ASCII digits only, an empty item or a repeat refused


def parse_budgets(text: str) -> list[float]:
    """``--budget 0.1,0.25``: fractions in (0, 1]."""
    from attnlab.option_values import numbers

    return check_budgets(numbers(text, float, "--budget"))    # finite, ASCII, an empty item or a repeat refused


def parse_methods(text: str) -> list[str]:
    """``--method streaming-llm,snapkv:window=32``: registered names with their options (empty: full alone)."""
    from attnlab.llm.methods.method_specs import method_list

    return check_methods(method_list(text, "--method"))      # canonical specs (the rows' labels), each once


def parse_plan_method(spec: str) -> str:
    """``attnlab plan --method NAME[:key=value…]``: a registered method that writes a plan file, with its options."""
    base, opts = parse_method(spec)
    if base not in registry.plan_names() and not registry.composed(base):   # parts composed write a plan too
        raise UserError(f"--method: expected one of {', '.join(registry.plan_names())} (options as name:key=value), "
                        f"got {spec!r}")
    registry.get(base, 1.0, **opts)
    return spec


def parse_method(spec: str) -> tuple[str, dict]:
    """``name`` or ``name:key=value:key=value`` → (name, options)."""
    from attnlab.option_values import split_method

    name, pairs = split_method(spec)            # not key=value, or a key given twice: one line
    return name, dict(pairs)


def method_at(settings: EvalSettings, name: str, budget: float):
    """The method ``name`` (``NAME[:key=value…]``, the plan file's own name) of the grid at β = ``budget``."""
    base, opts = parse_method(name)
    return registry.get(base, budget, plan_file=settings.plan, **opts)


def check_context(lengths: list[int], max_len: int | None) -> None:
    """The longest prompt within the model's context of ``max_len`` tokens (None: not known yet)."""
    if max_len is not None and max(lengths) > max_len:
        raise UserError(f"--lengths: {max(lengths)} is beyond the model's context of {max_len} tokens")


def check_settings(settings: EvalSettings, max_len: int | None = None) -> CheckedSettings:
    """Every option checked before the model runs (one line naming the option), and the files they name read once:
    where the settings are built (``attnlab eval``, before the model loads: ``max_len`` None, the model's context
    unknown yet).  ``run_eval`` takes only what this returns."""
    unknown = [t for t in settings.tasks if t not in TASKS]
    if unknown:
        raise UserError(f"--task: unknown task {unknown[0]!r} (known: {', '.join(TASKS)})")
    check_methods(settings.methods)
    check_budgets(settings.budgets)
    if settings.depths < 1:
        raise UserError(f"--depths: must be >= 1, got {settings.depths}")
    if settings.samples < 1:
        raise UserError(f"--samples: must be >= 1, got {settings.samples}")
    check_lengths(settings.lengths)
    check_context(settings.lengths, max_len)
    if settings.haystack != "noise" and not Path(settings.haystack).exists():   # a folder, a FIFO: ``read_texts``
        raise UserError(f"--haystack {settings.haystack}: no such file (or 'noise')")
    need = [m for m in settings.methods if method_at(settings, m, 1.0).calibrated]
    shipped = {}
    if need and not settings.calibrate:   # the calibration attnlab ships for the model and length, or one line
        from attnlab.llm.calibration.shipped import calibration_for

        for n in settings.lengths:
            shipped[n] = calibration_for(settings.model, n,
                                         [method_at(settings, m, b) for m in need for b in settings.budgets])
    mix = []
    if settings.calibrate_mix:   # parsed once, here (torch comes with the mix's module: only when it is given)
        from attnlab.llm.calibration.mix import parse_mix

        mix = parse_mix(settings.calibrate_mix)                              # an unknown task, a count < 1: one line
        if not settings.calibrate:
            raise UserError("--calibrate-mix: needs --calibrate (the mixed prompts' haystack is the calibration text)")
    for option in ("calibrate", "ppl"):
        path = getattr(settings, option)
        if path and not Path(path).exists():                                 # a folder, a FIFO: ``read_texts``
            raise UserError(f"--{option} {path}: no such file")
    if settings.template not in TEMPLATES:
        raise UserError(f"--template: expected one of {', '.join(TEMPLATES)}, got {settings.template!r}")
    if settings.question not in QUESTIONS:
        raise UserError(f"--question: expected one of {', '.join(QUESTIONS)}, got {settings.question!r}")
    if settings.max_new is not None and settings.max_new < 1:
        raise UserError(f"--max-new: must be >= 1, got {settings.max_new}")
    return CheckedSettings(settings, read_texts(settings), mix, shipped)


def read_texts(settings: EvalSettings) -> dict:
    """The text of each file an option names, read once (``eval_inputs.read_input_text``: a folder, a FIFO, empty,
    binary or not UTF-8 refused in one line naming the option)."""
    from attnlab.llm.eval.eval_inputs import read_input_text

    named = (("--haystack", None if settings.haystack == "noise" else settings.haystack),
             ("--calibrate", settings.calibrate), ("--ppl", settings.ppl))
    return {option: read_input_text(option, path) for option, path in named if path}

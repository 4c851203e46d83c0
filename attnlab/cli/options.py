"""The one table of option constraints, checked before a command does anything.

    @app.command()
    @checked("train")
    def train(heads: int = ..., ...): ...

``checked(command)`` validates every parameter of the command that the table
names, before the body runs: its type, its range (bounds included unless
marked open; a bound may name another option of the same command, as
``--value-rank ≤ --d-model``), that a float is finite, that a text is one of
its choices or parses (``parse``: ``--layers 0-3``).  The command's own rule
always wins: a rule under ``"command.name"`` is that command's, and a rule
under ``"name"`` applies only to a parameter of the rule's type (train's
``--layers`` is an integer, attention's a list ``0-3``: one is never checked
by the other's rule).  The message names the flag, its range and the value
given: ``attnlab: error: --heads must be an integer in [1, 4096], got 0``.

To add an option: add a line to ``RULES`` (the table is the documentation
of every range), or, for a free value (a model or corpus spec, a sentence),
a line to ``FREE`` saying why (flags and paths are free by type,
``FREE_KINDS``); tests/test_cli_walk.py fails for an option with neither.  Checks that need loaded data (``--beam`` ≤
the vocabulary of the run, ``--n`` ≤ the model's context) call
``check_value`` with the bound once it is known.
"""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from attnlab import option_values
from attnlab.errors import UserError

Bound = Union[int, float, str, None]  # a number, or the name of another option of the command


@dataclass(frozen=True)
class Rule:
    kind: type  # int, float or str
    lo: Bound = None
    hi: Bound = None
    lo_open: bool = False  # lo < value instead of lo <= value
    hi_open: bool = False
    choices: tuple[str, ...] = ()
    many: bool = False  # a comma list of choices
    registry: str = ""  # "module:NAME": the choices are the keys of that dict (or what that function returns),
    #                     imported when checked
    flag: str = ""  # default: --name-with-dashes
    note: str = ""  # appended to the message, e.g. "(0 = full rank)"
    parse: str = ""  # "module:function": a text format; the function raises ValueError (or UserError) on a bad text


BIG = 10**9  # a sanity bound for counts no run can reach
SEED_MAX = 2**32 - 1  # numpy's and the synthetic grammar's seeds
VOCAB_MAX = 2**24  # = attnlab.data.tokenizer.MAX_VOCAB (not imported: it pulls in torch); tokenizers aborts far beyond

RULES: dict[str, Rule] = {
    # model shape (train; experiment presets go through the same ModelConfig)
    "train.layers": Rule(int, 1, 1000),
    "dec_layers": Rule(int, 0, 1000, note="(0 = same as --layers)"),
    "heads": Rule(int, 1, 4096),
    "d_model": Rule(int, 2, 2**20),
    "ff": Rule(int, 1, 2**22),
    "dropout": Rule(float, 0.0, 1.0, hi_open=True),
    "max_len": Rule(int, 2, 2**20),
    "value_rank": Rule(int, 0, "d_model", note="(0 = full rank)"),
    "w": Rule(int, 0, BIG),
    "num_pos": Rule(int, 0, BIG),
    "sparse": Rule(int, 0, BIG),
    "proj_len": Rule(int, 1, 2**20),
    "dilation": Rule(int, 1, BIG),
    "num_random": Rule(int, 0, BIG),
    "model": Rule(str, choices=("transformer", "gru", "lm")),
    "attention": Rule(str, registry="attnlab.nn.mechanisms:MECHANISMS"),
    "norm": Rule(str, choices=("post", "pre")),
    "scoring": Rule(str, choices=("dot", "additive", "gaussian")),
    "attention_on": Rule(str, choices=("all", "encoder", "decoder", "cross"), many=True),
    "tokenizer": Rule(str, choices=("bpe", "word", "char")),
    "precision": Rule(str, choices=("fp32", "bf16")),
    "schedule": Rule(str, choices=("inverse_sqrt", "cosine")),
    # language models on text (train, evaluate, generate)
    "context": Rule(int, 0, 2**20, note="(0 = --max-len)"),
    "batch_size": Rule(int, 0, BIG, note="(0 = --max-tokens // --context)"),
    "eval_every": Rule(int, 0, BIG, note="(0 = --checkpoint-every)"),
    "eval_tokens": Rule(int, 0, BIG, note="(0 = the whole dev text)"),
    # training
    "vocab_size": Rule(int, 5, VOCAB_MAX, note="(4 special tokens included)"),
    "max_tokens": Rule(int, 1, 2**31),
    "lr": Rule(float, 0.0, 10.0, lo_open=True),
    "optimizer": Rule(str, choices=("adamw", "muon")),
    "muon_lr": Rule(float, 0.0, 10.0, lo_open=True),
    "warmup": Rule(int, 0, BIG),
    "label_smoothing": Rule(float, 0.0, 1.0, hi_open=True),
    "epochs": Rule(int, 0, BIG, note="(0 = no epoch limit)"),
    "max_steps": Rule(int, 0, BIG, note="(0 = no step limit)"),
    "minutes": Rule(float, 0.0, 10**7, note="(0 = no time limit)"),
    "checkpoint_every": Rule(int, 1, BIG),
    "log_every": Rule(int, 1, BIG),
    "seed": Rule(int, 0, SEED_MAX),
    "synthetic_pairs": Rule(int, 1, 10**8),
    "dev_limit": Rule(int, 0, BIG, note="(0 = skip)"),
    # decoding and scoring
    "beam": Rule(int, 1, 1000),
    "length_penalty": Rule(float, 0.0, 10.0),
    "limit": Rule(int, 0, BIG, note="(0 = all)"),
    "split": Rule(str, choices=("train", "dev", "test")),
    # sampling (generate)
    "tokens": Rule(int, 1, BIG),
    "temperature": Rule(float, 0.0, 1000.0, note="(0 = greedy)"),
    "top_k": Rule(int, 0, BIG, note="(0 = all tokens)"),
    # long inputs of pretrained LLMs (attention / roles / approximate --hf --file)
    "block_rows": Rule(int, 1, 2**20),
    "pool": Rule(int, 1, 2**20),
    "memory_gib": Rule(float, 0.0, 2**20, lo_open=True, flag="--memory-limit"),
    "layers": Rule(str, parse="attnlab.llm.heads.long_capture:parse_layers"),  # 0-3, 0,5 or 2 (train's is train.layers)
    "rows": Rule(str, parse="attnlab.llm.heads.long_capture:parse_rows"),
    "kind": Rule(str, choices=("encoder", "decoder", "cross")),
    "approximate.target": Rule(float, 0.0, 1.0, lo_open=True),
    # structured LLM plans (plan, plan-run)
    "plan.budget": Rule(float, 0.0, 1.0, lo_open=True),
    "plan.n": Rule(int, 2, 2**20),
    "plan.method": Rule(str, parse="attnlab.llm.eval.eval_settings:parse_plan_method"),  # NAME or NAME:key=value
    "plan.pages": Rule(int, 0, 10**6, note="(0 = none)"),  # = plans.plan.PAGES_MAX (not imported: it pulls in torch)
    "plan.slashes": Rule(int, 0, 10**4, note="(0 = none)"),  # = plans.plan.SLASHES_MAX (not imported: torch)
    "plan-run.n": Rule(int, 2, 2**20),
    "calibrate.n": Rule(int, 64, 2**20),
    "calibrate.method": Rule(str, parse="attnlab.llm.eval.eval_settings:parse_methods"),
    "calibrate.budget": Rule(str, parse="attnlab.llm.eval.eval_settings:parse_budgets"),
    "windows": Rule(int, 1, 10**4),
    # attnlab eval (the lengths against the model's context once it is known: attnlab.llm.eval.eval_settings)
    "eval.task": Rule(str, registry="attnlab.llm.eval.tasks:TASKS", many=True),
    "eval.lengths": Rule(str, parse="attnlab.llm.eval.eval_settings:parse_lengths"),
    "eval.method": Rule(str, parse="attnlab.llm.eval.eval_settings:parse_methods"),
    "eval.budget": Rule(str, parse="attnlab.llm.eval.eval_settings:parse_budgets"),
    "eval.depths": Rule(int, 1, 1000),
    "eval.samples": Rule(int, 1, 10**6),
    "eval.calibrate_windows": Rule(int, 1, 10**4),
    "calibrate_mix": Rule(str, parse="attnlab.llm.calibration.mix:parse_mix"),
    "eval.ppl_windows": Rule(int, 1, 10**4),
    "eval.seed": Rule(int, 0, SEED_MAX),
    "eval.max_new": Rule(int, 1, 4096),
    "backend": Rule(str, registry="attnlab.llm.execution.backend_names:BACKENDS"),   # the seam's backends by name
    "eval.template": Rule(str, registry="attnlab.llm.eval.tasks:TEMPLATES"),   # the prompt formats (tasks.prompt)
    "eval.question": Rule(str, registry="attnlab.llm.eval.tasks:QUESTIONS"),
    "eval-why.top": Rule(int, 1, 10**4),                                     # heads shown per lost prompt
    "eval-why.heads": Rule(int, 0, 10**4),                                  # layers whose heads are restored one by one
    "eval-why.row": Rule(str, registry="attnlab.llm.eval.lost_prompts:ROWS"),   # the row measured (answer_row)
    # head detectors (heads)
    "heads.length": Rule(int, 8, 2**20),
    "repeats": Rule(int, 2, 1000),
    "samples": Rule(int, 1, 10**4),
    "prompts": Rule(int, 1, 10**4),
    "detectors": Rule(str, choices=("previous-token", "duplicate-token", "induction", "sink", "retrieval", "all"),
                      many=True),
    "heads.top": Rule(int, 0, BIG),
    # embeddings
    "dim": Rule(int, 1, 2**16),
    "window": Rule(int, 1, 1000),
    "negative": Rule(int, 0, 1000, note="(0 = full softmax)"),
    "min_count": Rule(int, 1, BIG),
    "side": Rule(str, choices=("src", "tgt")),
    "embeddings.minutes": Rule(float, 0.0, 10**7, lo_open=True),
    "embeddings.epochs": Rule(int, 1, BIG),
    "neighbours.k": Rule(int, 1, BIG, flag="-k"),
    # analysis
    "attempts": Rule(int, 1, 10**6),
    "sweep.w": Rule(str, parse="attnlab.cli.approximate:int_list"),  # "0..10" / "0,2,4": against n once read
    "sweep.num_pos": Rule(str, parse="attnlab.cli.approximate:int_list"),
    "roles.limit": Rule(int, 1, BIG),
    "bpe-steps.vocab_size": Rule(int, 1, 10**6),
    "bpe-steps.show_corpus": Rule(int, 0, BIG, flag="--show"),
}


# Parameters whose value no table can range: by type, flags and paths (an output is claimed by
# attnlab.outputs, an input read with a one-line error); by name ("name" for every command, "command.name"
# for one), model and corpus specs (resolved by their loaders) and free text.  Each says why.  A parameter
# with neither a rule nor an exemption fails tests/test_cli_walk.py.
FREE_KINDS: dict[type, str] = {
    bool: "a flag: given or not, no value to range",
    Path: "a path: an output is claimed (attnlab.outputs), an input read with a one-line error",
}
FREE: dict[str, str] = {
    "hf": "a model spec: attnlab.llm.models.loading.resolve_spec (known name, folder, .gguf, hub name)",
    "data": "a corpus spec: attnlab.data.spec / attnlab.data.text, parsed fully with one-line errors",
    "device": "a torch device: checked against the devices present (attnlab.train.loop)",
    "args": "a run folder and sentences",
    "target": "target sentences",
    "prompt": "the text to continue",
    "text": "the corpus as one string",
    "word": "the word to look up",
    "models fetch.name": "a known model: fetch_model refuses another, naming the known ones",
    "eval.haystack": "'noise' or a text file: checked by attnlab eval before the model loads (one line)",
    "eval-why.method": "a method of the folder's results: checked against its results.jsonl before the model loads "
                       "(one line)",
}


def exemption(command: str, name: str, kind: type | None = None) -> str | None:
    """Why the parameter ``name`` of ``command`` (of type ``kind``) has no rule, or None (it needs one)."""
    return FREE.get(f"{command}.{name}", FREE.get(name)) or FREE_KINDS.get(kind)


def _flag(name: str, rule: Rule) -> str:
    return rule.flag or "--" + name.replace("_", "-")


def _rule(command: str, name: str, kind: type | None = None) -> Rule | None:
    """The command's own rule ``command.name``; else the rule ``name`` if ``kind`` (the parameter's type) is its
    type."""
    own = RULES.get(f"{command}.{name}")
    if own is not None:
        return own
    rule = RULES.get(name)
    return rule if rule is None or kind is None or rule.kind is kind else None


def param_kind(hint: Any) -> type:
    """int, float, str, bool, Path … of a parameter annotation (``Optional[int]`` → int, ``List[str]`` → str)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return param_kind(args[0]) if typing.get_origin(hint) is not None and args else hint


def param_kinds(func: Callable) -> dict[str, type]:
    """name → ``param_kind`` of every annotated parameter of a command function."""
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # pragma: no cover - an annotation that does not resolve: checked by name only
        return {}
    return {name: param_kind(hint) for name, hint in hints.items() if name != "return"}


def _parse(rule: Rule, flag: str, value: Any) -> None:
    import importlib

    module, _, function = rule.parse.partition(":")
    try:
        getattr(importlib.import_module(module), function)(value)
    except (ValueError, UserError) as err:
        message = " ".join(str(err).split())
        raise UserError(message if message.startswith(flag) else f"{flag}: {message}") from None


def _bound(bound: Bound, values: dict[str, Any]) -> float | None:
    return values.get(bound) if isinstance(bound, str) else bound


def registry_choices(spec: str) -> tuple[str, ...]:
    """The names a ``registry="module:NAME"`` rule allows: the keys of that dict, or what that function returns."""
    import importlib

    module, _, table = spec.partition(":")
    names = getattr(importlib.import_module(module), table)
    return tuple(sorted(names() if callable(names) else names))


def check_value(command: str, name: str, value: Any, values: dict[str, Any] | None = None,
                hi: Bound = None, why: str = "", kind: type | None = None) -> None:
    """Check one option against its rule (``hi`` tightens the upper bound, ``why`` says what it is;
    ``kind``: the parameter's type, see ``_rule``); ``UserError`` naming the flag.  A list (an option
    given several times) is checked item by item."""
    rule = _rule(command, name, kind)
    if rule is None or value is None:
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            check_value(command, name, item, values, hi, why, kind)
        return
    flag = _flag(name, rule)
    values = values or {}
    if rule.parse:
        _parse(rule, flag, value)
        return
    if rule.registry:
        rule = Rule(str, choices=registry_choices(rule.registry), flag=rule.flag, many=rule.many)
    if rule.choices:
        items = option_values.items(value, flag) if rule.many else [value]   # an empty item or a repeat: refused
        bad = [v for v in items if v not in rule.choices]
        if bad or (rule.many and len(items) > 1 and "all" in items):
            kind = "a comma list of" if rule.many else "one of"
            raise UserError(f"{flag} must be {kind} {', '.join(rule.choices)}, got {value!r}"
                            + (f" (unknown: {', '.join(map(repr, bad))})" if rule.many and bad else ""))
        return
    if rule.kind is str:
        return
    if rule.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise UserError(f"{flag} must be an integer, got {value!r}")
    if rule.kind is float and not math.isfinite(float(value)):
        raise UserError(f"{flag} must be a finite number, got {value!r}")
    lo, top = _bound(rule.lo, values), _bound(rule.hi, values)
    if hi is not None and (top is None or hi < top):
        top = hi
    below = lo is not None and (value <= lo if rule.lo_open else value < lo)
    above = top is not None and (value >= top if rule.hi_open else value > top)
    if below or above:
        what = "an integer" if rule.kind is int else "a number"
        left = "(" if rule.lo_open else "["
        right = ")" if rule.hi_open else "]"
        span = f"{left}{'-∞' if lo is None else lo}, {'∞' if top is None else top}{right}"
        if isinstance(rule.hi, str) and top == _bound(rule.hi, values) and hi is None:
            span += f" (--{rule.hi.replace('_', '-')} is {top})"
        elif hi is not None and top == hi and why:
            span += f" ({why})"
        raise UserError(f"{flag} must be {what} in {span}, got {value}{' ' + rule.note if rule.note else ''}")


def check_options(command: str, values: dict[str, Any], kinds: dict[str, type] | None = None) -> None:
    """Check every option of ``values`` (name → value) that the table names (``kinds``: name → parameter type)."""
    kinds = kinds or {}
    for name, value in values.items():
        check_value(command, name, value, values, kind=kinds.get(name))


def raw_numbers(kinds: dict[str, type], argv: list[str] | None = None) -> None:
    """The numbers of the command line as typed, before typer converts them: ``--depths 1_000``, ``--seed " 8"``
    and full-width digits are refused (``option_values.number``) for every int or float option of the running
    command (``kinds``: parameter name → type).  Outside a command line (a library call) nothing is checked."""
    import sys

    ctx = _click_context()
    if ctx is None:
        return
    if argv is None:   # the command line of attnlab's own entry (its script, python -m attnlab), not a test runner's
        if Path(sys.argv[0]).name not in ("attnlab", "__main__.py") or ctx.info_name not in sys.argv[1:]:
            return
        argv = sys.argv[1:]
    for param in ctx.command.params:
        kind = kinds.get(param.name)
        if kind not in (int, float) or getattr(param, "is_flag", False) or param.param_type_name != "option":
            continue   # an argument has no flag to find it by (typer checks its type)
        for i, token in enumerate(argv):
            for opt in param.opts:
                if token == opt and i + 1 < len(argv):
                    option_values.number(argv[i + 1], kind, opt)
                elif token.startswith(opt + "="):
                    option_values.number(token[len(opt) + 1:], kind, opt)


def _click_context():
    """The click context of the command being run (typer's own click), or None."""
    import sys

    import typer

    click_globals = sys.modules.get(typer.BadParameter.__module__.rsplit(".", 1)[0] + ".globals")
    return click_globals.get_current_context(silent=True) if click_globals is not None else None


def checked(command: str) -> Callable:
    """Decorator of a typer command: the numbers as typed (``raw_numbers``), then ``check_options`` on its
    arguments, before its body runs."""
    def wrap(func: Callable) -> Callable:
        kinds = param_kinds(func)

        @functools.wraps(func)
        def run(*args, **kwargs):
            raw_numbers(kinds)
            check_options(command, kwargs, kinds)
            return func(*args, **kwargs)
        run.checked_as = command  # tests/test_bad_input.py asserts every command carries it
        return run
    return wrap

"""Walk the whole command line, from the typer app itself.

Every command (``attnlab models fetch`` included) and every one of its parameters is found in
``typer.main.get_command(attnlab.cli.app)``: a command or an option added later is walked
without a line here.  For each parameter:

* it has a rule in ``attnlab.cli.options.RULES`` of its own type, or a listed exemption
  (``FREE``: a model or corpus spec, a sentence; ``FREE_KINDS``: a flag, a path) — an option
  cannot ship unchecked;
* every value its help shows — its default, the values a help text gives a meaning to
  (``0 = greedy``), its examples (``e.g. 0-3 or 0,5``, ``4096:4352``, ``0..10``), every choice —
  is accepted: ``attnlab COMMAND --option=VALUE`` goes through the real entry point (click's
  conversion, then the command's ``@checked`` rules) and reaches the command's body, where the
  test stops it;
* a value outside its rule (below or above a bound, not finite, not a choice, not of its format)
  is refused: exit 2, one line ``attnlab: error: ...`` naming the option, no traceback, and the
  body never runs.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Optional

import pytest
import typer

import attnlab.cli.options as options
from attnlab.cli import app
from attnlab.cli.options import Rule, _rule, exemption, param_kinds


class Reached(Exception):
    """Raised where the command's body would start: every check of the option layer passed."""


def all_commands() -> dict[str, object]:
    group = typer.main.get_command(app)
    out = {}
    for name, command in group.commands.items():
        subs = getattr(command, "commands", None)
        out.update({f"{name} {sub}": c for sub, c in subs.items()} if subs else {name: command})
    return out


COMMANDS = all_commands()


def flag_of(param) -> str:
    return param.opts[0] if param.param_type_name == "option" else param.human_readable_name


def call(args: list[str], capsys, monkeypatch, stop: bool) -> tuple[object, str, str]:
    """``attnlab ARGS`` in this process: (exit code, or "reached" when the body was reached; stdout; stderr)."""
    from attnlab.cli import main

    real = options.check_options

    def spy(command, values, kinds=None):
        real(command, values, kinds)
        raise Reached(command)

    monkeypatch.setattr(options, "check_options", spy)
    monkeypatch.setattr(sys, "argv", ["attnlab", *args])
    capsys.readouterr()
    try:
        main()
        code = 0
    except Reached:
        code = "reached"
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def dummy(param, kind) -> list[str]:
    """A value click converts and the rule (if any) accepts, for a required parameter not under test."""
    value = str(param.default) if param.default not in (None, ...) and not callable(param.default) else (
        "100" if kind is int else "0.5" if kind is float else "x")
    return [param.opts[0], value] if param.param_type_name == "option" else [value]


def base_args(command: str, cmd, skip: str | None = None) -> list[str]:
    kinds = param_kinds(cmd.callback)
    args = []
    for p in cmd.params:
        if p.required and p.name != skip:
            args += dummy(p, kinds.get(p.name))
    return command.split() + args


def given(param, value: str) -> list[str]:
    """``--option=VALUE`` (a value such as -1 is not read as an option), ``-k VALUE``, or the argument."""
    if param.param_type_name != "option":
        return [value]
    long = [o for o in param.opts if o.startswith("--")]
    return [f"{long[0]}={value}"] if long else [param.opts[0], value]


NUMBER = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"


def shown_values(param, rule: Rule, kind) -> set[str]:
    """The values the help of ``param`` shows: default, ``N = meaning``, ``e.g. A or B``, formats such as 0-3."""
    help_text = " ".join((param.help or "").split())
    values = set()
    if param.default is not None and not callable(param.default) and param.default is not ... and not isinstance(param.default, (list, tuple)):
        values.add(str(param.default))
    values |= set(re.findall(rf"(?<![\w.\-])({NUMBER}) = ", help_text))  # "0 = greedy", "(0 = all)"
    for example in re.findall(r"(?:e\.g\.|such as|like)\s+([^;()\[\]]+)", help_text):
        values |= {t.strip(" .,") for t in re.split(r"\s+or\s+|\s+", example) if re.fullmatch(r"[\d][\d,.:\-]*", t.strip(" .,"))}
    if rule.parse:  # a text format: every token of the help written in it ("0..10, 0,2,4 or 3")
        values |= set(re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?:(?:\.\.|[-:,])\d+(?:\.\d+)?)*(?![\w.])", help_text))
    if rule.choices or rule.registry:
        values |= set(choices(rule))
    if kind in (int, float):
        values = {v for v in values if re.fullmatch(NUMBER, v)}
    return values


def choices(rule: Rule) -> tuple[str, ...]:
    if rule.registry:
        from attnlab.cli.options import registry_choices

        return registry_choices(rule.registry)
    return rule.choices


def bad_values(rule: Rule, kind) -> list[str]:
    """Values outside ``rule``: below and above its numeric bounds, not finite, not a choice, not of its format."""
    if rule.choices or rule.registry:
        return ["no-such-choice"]
    if rule.parse:
        return ["zz", "1-x"]
    out = []
    fmt = (lambda x: str(int(x))) if kind is int else (lambda x: repr(float(x)))
    if isinstance(rule.lo, (int, float)):
        out.append(fmt(rule.lo) if rule.lo_open else fmt(rule.lo - 1 if kind is int else rule.lo - 0.5))
    if isinstance(rule.hi, (int, float)):
        out.append(fmt(rule.hi) if rule.hi_open else fmt(rule.hi + 1 if kind is int else rule.hi * 2 + 1))
    if kind is float:
        out += ["nan", "inf"] if not math.isinf(rule.hi or 0) else ["nan"]
    return out


def test_the_walk_finds_every_command():
    assert {"attention", "approximate", "roles", "plan", "plan-run", "models list", "models fetch", "train", "generate",
            "evaluate"} <= set(COMMANDS)


def unchecked(command: str, cmd) -> tuple[list[str], list[str]]:
    """(parameters with no rule and no exemption, parameters whose rule is of another type) of one command."""
    kinds = param_kinds(cmd.callback)
    missing, mistyped = [], []
    for p in cmd.params:
        kind = kinds.get(p.name)
        rule = _rule(command, p.name, kind)
        if rule is None and exemption(command, p.name, kind) is None:
            missing.append(f"{flag_of(p)} ({getattr(kind, '__name__', kind)})")
        if rule is not None and rule.kind is not kind:
            mistyped.append(f"{flag_of(p)}: rule of {rule.kind.__name__}, parameter of {getattr(kind, '__name__', kind)}")
        if rule is not None and rule.kind is str:
            assert rule.choices or rule.registry or rule.parse, f"{command} {flag_of(p)}: a text rule checks nothing"
    return missing, mistyped


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_parameter_has_a_rule_or_an_exemption(command):
    cmd = COMMANDS[command]
    assert getattr(cmd.callback, "checked_as", None) == command, f"{command}: decorate it with @checked({command!r})"
    missing, mistyped = unchecked(command, cmd)
    assert not missing, f"attnlab {command}: no rule in attnlab/cli/options.py RULES (nor a FREE exemption) for {missing}"
    assert not mistyped, mistyped


def test_a_new_option_without_a_rule_is_caught():
    """What the walk does with a command added later: an unranged --frobnicate, an integer --layers (the
    global layers rule is a text format: another option's rule never checks it) and a text --out are named."""
    from attnlab.cli.options import checked

    extra = typer.Typer(add_completion=False)

    @extra.command("frob")
    @checked("frob")
    def frob(frobnicate: int = typer.Option(3, "--frobnicate"), layers: Optional[int] = typer.Option(None, "--layers"),
             out: Optional[str] = typer.Option(None, "--out")) -> None:
        pass

    missing, mistyped = unchecked("frob", typer.main.get_command(extra))
    assert missing == ["--frobnicate (int)", "--layers (int)", "--out (str)"]
    assert mistyped == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_values_shown_in_help_are_accepted_and_values_out_of_range_refused(command, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # nothing a command might write lands in the repository
    monkeypatch.delenv("ATTNLAB_CACHE", raising=False)
    cmd = COMMANDS[command]
    kinds = param_kinds(cmd.callback)
    code, _, err = call(base_args(command, cmd), capsys, monkeypatch, stop=True)
    assert code == "reached", f"attnlab {command} with its defaults is refused: {err}"
    accepted = refused = 0
    for p in cmd.params:
        kind = kinds.get(p.name)
        rule = _rule(command, p.name, kind)
        if rule is None:
            continue
        base = base_args(command, cmd, skip=p.name)
        flag = flag_of(p)
        for value in sorted(shown_values(p, rule, kind)):
            args = base + given(p, value)
            code, _, err = call(args, capsys, monkeypatch, stop=True)
            assert code == "reached", f"attnlab {' '.join(args)}: a value its help shows is refused: {err}"
            accepted += 1
        for value in bad_values(rule, kind):
            args = base + given(p, value)
            code, out, err = call(args, capsys, monkeypatch, stop=True)
            lines = err.strip().splitlines()
            assert code == 2, f"attnlab {' '.join(args)}: not refused ({code}): {err}"
            assert len(lines) == 1 and lines[0].startswith("attnlab: error: ") and "Traceback" not in err, err
            assert any(opt in lines[0] for opt in p.opts) or (rule.flag and rule.flag in lines[0]), (flag, lines[0])
            refused += 1
    print(f"attnlab {command}: {len(cmd.params)} parameters, {accepted} shown values accepted, {refused} out-of-range refused")


def test_the_documented_layer_lists_are_accepted_by_attention_and_approximate(capsys, monkeypatch, tmp_path):
    """The issue's case: --layers 0-3, 0,5 and 0 were all refused as 'must be an integer'."""
    monkeypatch.chdir(tmp_path)
    for command in ("attention", "approximate", "roles"):
        for value in ("0-3", "0,5", "0"):
            code, _, err = call([command, "--hf", "m", "--file", "t.txt", "--layers", value], capsys, monkeypatch, stop=True)
            assert code == "reached", (command, value, err)
    code, _, err = call(["train", "--out", "r", "--layers", "0-3"], capsys, monkeypatch, stop=True)
    assert code == 2 and "--layers" in err and err.count("\n") == 1, err  # train's --layers is a count


def test_a_click_usage_error_is_one_line_naming_the_option(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for args, needle in ((["plan", "--hf", "m", "--calibrate", "c", "--n", "abc"], "--n"),
                         (["plan", "--hf", "m", "--calibrate", "c", "--bogus", "1"], "--bogus"),
                         (["plan", "--calibrate", "c"], "--hf"),
                         (["no-such-command"], "no-such-command")):
        code, out, err = call(args, capsys, monkeypatch, stop=True)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("attnlab: error: ") and needle in lines[0], err

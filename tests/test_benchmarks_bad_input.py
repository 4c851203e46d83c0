"""Every ``benchmarks/*.py`` script follows the command line's rules on bad input (``attnlab.script_guard.main_guard``).

Each script's parser is walked: an unknown option, a word where a number is expected, a value outside the
choices, and the missing required arguments.  Then the runs that crashed before: a missing run folder
(``table16_sentences.py``, ``head_surgery.py``), a missing or incomplete ``--data`` folder
(``llm_structured.py``).  Every case runs the script as ``__main__`` in this process and must exit 2 with one
line ``attnlab: error: ...``, no traceback, and no file written, changed or removed in the work folder (by
SHA-256) — no empty ``--out`` folder left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py")     # the scripts (a module they import, e.g.
                 if '__name__ == "__main__"' in p.read_text(encoding="utf-8"))   # results_overview.py, is not one)


class Parsed(BaseException):
    """Raised in place of parsing: carries the script's parser (BaseException: main_guard lets it through)."""

    def __init__(self, parser):
        self.parser = parser


def hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


@contextlib.contextmanager
def torch_state_kept():
    """A script run here must leave torch's global state (grad mode, default dtype) as it found it: checked, then
    restored, so that one script's leak fails its own case instead of every later test of the session."""
    import torch

    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    try:
        yield
    finally:
        leaked = (torch.is_grad_enabled(), torch.get_default_dtype()) != (grad, dtype)
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
        assert not leaked, "the script changed torch's grad mode or default dtype for the whole process"


def run_script(script: Path, args: list[str]) -> tuple[object, str]:
    """Run ``script ARGS`` as ``__main__`` here: (exit code, stderr)."""
    old = sys.argv
    err = io.StringIO()
    sys.argv = [str(script), *args]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), torch_state_kept():
            try:
                runpy.run_path(str(script), run_name="__main__")
                code = 0
            except SystemExit as exit_:
                code = exit_.code
            except BaseException as exc:  # noqa: BLE001 - an escaped exception is a failed case
                import traceback

                traceback.print_exc(file=err)
                code = f"raised {type(exc).__name__}"
    finally:
        sys.argv = old
    return code, err.getvalue()


def parser_of(script: Path, monkeypatch) -> argparse.ArgumentParser:
    """The script's parser, caught when its ``main`` asks it to parse."""
    def catch(self, *a, **kw):
        raise Parsed(self)

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", catch)
        m.setattr(argparse.ArgumentParser, "parse_known_args", catch)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                runpy.run_path(str(script), run_name="__main__")
        except Parsed as p:
            return p.parser
    raise AssertionError(f"{script.name}: main() never parsed its arguments")


def bad_argvs(parser: argparse.ArgumentParser) -> list[tuple[str, list[str]]]:
    """(what, argv) cases from the parser's own actions."""
    cases = [("unknown option", ["--no-such-option", "1"])]
    required = [a for a in parser._actions if a.required or (not a.option_strings and a.nargs not in ("?", "*"))]
    if required:
        cases.append(("no arguments (required ones missing)", []))
    for a in parser._actions:
        if not a.option_strings or a.nargs == 0:
            continue
        if a.type in (int, float):
            cases.append((f"{a.option_strings[0]} abc", [a.option_strings[0], "abc"]))
        if a.choices:
            cases.append((f"{a.option_strings[0]} outside the choices", [a.option_strings[0], "no-such-choice"]))
    for a in parser._actions:
        if not a.option_strings and a.choices:
            cases.append((f"{a.dest} outside the choices", ["no-such-choice"]))
    return cases


def check(code, err: str, needles=()) -> list[str]:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    problems = [f"exit {code}"] if code != 2 else []
    if len(lines) != 1 or not lines[0].startswith("attnlab: error: "):
        problems.append(f"{len(lines)} stderr lines: {err.strip()[-300:]!r}")
    if "Traceback" in err:
        problems.append("traceback")
    return problems + [f"no {n!r}" for n in needles if lines and n not in lines[-1]]


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_every_benchmark_parser_refuses_bad_options_in_one_line(script, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    (tmp_path / "notes.txt").write_text("a user's notes\n")
    cases = bad_argvs(parser_of(script, monkeypatch))
    bad = []
    for what, args in cases:
        before = hashes(tmp_path)
        code, err = run_script(script, args)
        problems = check(code, err) + (["files changed"] if hashes(tmp_path) != before else [])
        if problems:
            bad.append(f"{script.name} {what}: {', '.join(problems)}")
    print(f"{script.name}: {len(cases) - len(bad)} of {len(cases)} bad option cases refused in one line")
    assert not bad, "\n".join(bad)


def test_the_benchmark_runs_that_crashed_are_one_line_and_leave_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "readme.md").write_text("no split here\n")
    bench = ROOT / "benchmarks"
    cases = [
        ("table16_sentences.py, missing run folder", bench / "table16_sentences.py", ["nosuch-run", "--data", "synthetic"], ("nosuch-run",)),
        ("head_surgery.py, missing run folder", bench / "head_surgery.py", ["nosuch-run"], ("nosuch-run",)),
        ("llm_structured.py ppl, missing --data", bench / "llm_structured.py", ["ppl", "--data", "nosuch", "--out", "new-out"], ("--data", "nosuch")),
        ("llm_structured.py speed, --data without test.txt", bench / "llm_structured.py",
         ["speed", "--data", "data", "--out", "new-out"], ("--data", "test.txt")),
        ("llm_structured.py calibrate, --data without train.txt", bench / "llm_structured.py",
         ["calibrate", "--data", "data", "--out", "new-out"], ("--data", "train.txt")),
        ("llm_structured.py decode, --data without test.txt", bench / "llm_structured.py",
         ["decode", "--data", "data", "--out", "new-out"], ("--data", "test.txt")),
        ("llm_structured.py decode, no rounds", bench / "llm_structured.py", ["decode", "--rounds", "0", "--out", "new-out"], ("--rounds",)),
        ("llm_structured.py decode, no tokens", bench / "llm_structured.py", ["decode", "--new-tokens", "0", "--out", "new-out"],
         ("--new-tokens",)),
        ("kvpress_compare.py, missing JSON", bench / "kvpress_compare.py", ["nosuch.json"], ("nosuch.json",)),
        ("kvpress_compare.py, a notes file as JSON", bench / "kvpress_compare.py", ["data/readme.md"], ("Expecting value",)),
        ("induction_vs_retrieval.py, missing heads.json", bench / "induction_vs_retrieval.py", ["nosuch.json"], ("nosuch.json",)),
    ]
    bad = []
    for what, script, args, needles in cases:
        before = hashes(tmp_path)
        code, err = run_script(script, args)
        problems = check(code, err, needles) + (["files changed"] if hashes(tmp_path) != before else [])
        if problems:
            bad.append(f"{what}: {', '.join(problems)}")
    assert not (tmp_path / "new-out").exists()   # the --out folder is made only once the inputs are good
    assert not bad, "\n".join(bad)

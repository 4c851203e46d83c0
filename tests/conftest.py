"""Fixtures shared by the test files."""

from __future__ import annotations

import io
import sys
from typing import NamedTuple

import pytest


class Result(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def run_attnlab(capsys, monkeypatch, *args, stdin: bytes | None = None) -> Result:
    """``attnlab ARGS`` in this process (attnlab.cli.main, as the console script), ``stdin`` its standard input
    when given: (exit code, stdout, stderr)."""
    from attnlab.cli import main

    monkeypatch.setattr(sys, "argv", ["attnlab", *map(str, args)])
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    capsys.readouterr()
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return Result(code, out, err)


@pytest.fixture
def cli(capsys, monkeypatch):
    """``run_attnlab`` bound to the test's capsys and monkeypatch: ``cli(*args)``."""
    return lambda *args: run_attnlab(capsys, monkeypatch, *args)

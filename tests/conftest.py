"""Fixtures shared by the test files."""

from __future__ import annotations

import sys
from typing import NamedTuple

import pytest


class Result(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys, monkeypatch):
    """``attnlab ARGS`` in this process (attnlab.cli.main, as the console script): (exit code, stdout, stderr)."""
    from attnlab.cli import main

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["attnlab", *map(str, args)])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run

"""Run the `attnlab` console entry point in-process, as a user would from a shell (tests import this)."""

from __future__ import annotations

import sys

import pytest


def run_main(args: list[str], capsys) -> tuple[int, str, str]:
    """``attnlab ARGS``: (exit code, stdout, stderr); what the test printed before is forgotten."""
    from attnlab.cli import main

    capsys.readouterr()
    old = sys.argv
    sys.argv = ["attnlab", *args]
    try:
        with pytest.raises(SystemExit) as exc:
            main()
    finally:
        sys.argv = old
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err

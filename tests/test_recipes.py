"""benchmarks/recipes/*.sh: each one a script bash can parse, opened by the comment docs/results.md shows, calling
only benchmark scripts and attnlab commands that exist (a recipe is the command beside a published figure)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "benchmarks" / "recipes").glob("*.sh"))


@pytest.fixture(scope="module")
def commands() -> set[str]:
    """The attnlab CLI's command names (the typer app's)."""
    import typer

    from attnlab.cli import app

    return set(typer.main.get_command(app).commands)


def test_there_are_recipes():
    assert len(RECIPES) >= 20


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_a_recipe_parses_and_says_what_it_measures(recipe, commands):
    if shutil.which("bash") is None:
        pytest.skip("no bash on this machine")
    parsed = subprocess.run(["bash", "-n", str(recipe)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    text = recipe.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash" and lines[1].startswith("# ") and len(lines[1]) > 20   # results.py's description
    for script in set(re.findall(r"benchmarks/[a-z_0-9]+\.py", text)):
        assert (ROOT / script).is_file(), f"{recipe.name} calls {script}, which is not there"
    for command in set(re.findall(r"\.venv/bin/attnlab ([a-z][a-z-]*)", text)):
        assert command in commands, f"{recipe.name} runs `attnlab {command}`, which is not a command"

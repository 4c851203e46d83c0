"""Style, checked by ruff with pyproject.toml's [tool.ruff] (pyflakes, import order, 120 columns): every file of
attnlab/ is clean, and so are the scripts and tests of ``CLEAN``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLEAN = ["attnlab", "benchmarks/outputs_unchanged_2k.py", "tests/test_outputs_unchanged.py",
         "tests/test_method_parts.py", "tests/test_style.py"]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module", autouse=True)
def has_ruff():
    if subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode != 0:
        pytest.fail("ruff is a test dependency (pyproject.toml) and is not installed: pip install -e '.[test]'")


def test_the_clean_files_stay_clean():
    out = ruff(*CLEAN)
    assert out.returncode == 0, out.stdout[-3000:]


def test_ruff_sees_a_long_line(tmp_path):
    """Not vacuous: a line of 121 characters is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("x = '" + "a" * 115 + "'\n")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"),
                          "--select", "E501", str(bad)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "E501" in out.stdout


def test_no_line_of_attnlab_is_over_120_characters():
    """Counted in characters, as a reader's editor counts them: ruff measures display width (a combining macron, as
    in q̄, is none) and lets a line through whose excess is a ``# noqa`` pragma; this counts every character."""
    long = [f"{path.relative_to(ROOT)}:{i}" for path in sorted((ROOT / "attnlab").rglob("*.py"))
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if len(line) > 120]
    assert not long, long[:10]

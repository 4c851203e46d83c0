"""The command line answers before torch loads: ``--help`` and ``attnlab methods`` import neither torch,
transformers nor numpy, option errors neither torch nor transformers (DESIGN.md: errors in about a second; the
heavy imports only inside the commands that need them; numpy, a tenth of torch's time, may check a setting).

Each case runs the CLI's ``main`` in a fresh interpreter and reads that interpreter's ``sys.modules`` after the
command: a property of what is imported, not a timing that depends on the machine's load.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "numpy")

PROBE = """
import json, sys
sys.argv = ["attnlab", *json.loads(sys.argv[1])]
from attnlab.cli import main
code = 0
try:
    main()
except SystemExit as exit:
    code = exit.code or 0
print(json.dumps({"code": code, "heavy": sorted(m for m in %r if m in sys.modules)}), file=sys.stderr)
""" % (HEAVY,)


def run_cli(*args: str, cwd=None) -> tuple[dict, str, str]:
    """(``{"code", "heavy"}``, stdout, stderr without the probe's line) of ``attnlab ARGS`` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(args))], capture_output=True, text=True,
                          timeout=120, cwd=cwd)
    *err, last = proc.stderr.rstrip("\n").split("\n")
    return json.loads(last), proc.stdout, "\n".join(err)


def test_the_probe_sees_an_import():
    """Not vacuous: a command that loads torch is seen loading it."""
    state, out, _ = run_cli("methods")
    assert state["code"] == 0 and "streaming-llm" in out
    proc = subprocess.run([sys.executable, "-c", PROBE.replace("main()", "import torch; main()"), json.dumps(["--help"])],
                          capture_output=True, text=True, timeout=120)
    assert "torch" in json.loads(proc.stderr.strip().splitlines()[-1])["heavy"]


@pytest.mark.parametrize("args", [
    ("--help",),
    ("methods",),
    ("eval", "--help"),
    ("plan", "--help"),
    ("attention", "--help"),
    ("heads", "--help"),
])
def test_help_and_methods_import_no_torch(args):
    state, out, err = run_cli(*args)
    assert state["code"] == 0, err
    assert out.strip(), "the command printed nothing"
    assert state["heavy"] == [], f"attnlab {' '.join(args)} imported {state['heavy']}"


@pytest.mark.parametrize("args", [
    ("eval", "--hf", "smollm2-135m", "--lengths", "abc", "--haystack", "noise"),
    ("eval", "--hf", "smollm2-135m", "--method", "nosuch", "--haystack", "noise"),
    ("eval", "--hf", "smollm2-135m", "--budget", "2", "--haystack", "noise"),
    ("eval", "--hf", "smollm2-135m", "--haystack", "/nonexistent/hay.txt"),
    ("eval", "--nosuch-option"),
    ("eval", "--hf", "nosuch-model"),
    ("heads", "--hf", "nosuch-model"),
    ("plan", "--hf", "nosuch-model", "--calibrate", "/nonexistent/text.txt"),
    ("attention", "--hf", "nosuch-model", "--file", "/nonexistent/text.txt"),
])
def test_option_errors_import_no_torch(args, tmp_path):
    state, _, err = run_cli(*args, "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert state["code"] == 2 and err.startswith("attnlab: error: ") and len(err.splitlines()) == 1, err
    heavy = [m for m in state["heavy"] if m != "numpy"]
    assert heavy == [], f"attnlab {' '.join(args)} imported {heavy} before refusing"
    assert not (tmp_path / "run").exists()

"""torch's OpenMP threads wait passively once attnlab is imported (a user's policy wins), and the benchmark that
measures why runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = ("import os, sys; import attnlab; "
         "print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)")


def _probe(**env) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                         cwd=ROOT, check=True)
    return out.stdout.strip()


def test_importing_attnlab_sets_passive_waiting_before_torch_loads():
    policy, torch_loaded = _probe().split()
    assert policy == "PASSIVE" and torch_loaded == "False"


def test_a_policy_the_user_sets_wins():
    assert _probe(OMP_WAIT_POLICY="ACTIVE").split()[0] == "ACTIVE"


def test_thread_wait_benchmark_runs_and_refuses_bad_options():
    script = str(ROOT / "benchmarks" / "thread_wait.py")
    out = subprocess.run([sys.executable, script, "--steps", "1", "--threads", "1", "--policies", "passive"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    (row,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert row["policy"] == "PASSIVE" and row["steps"] == 1 and row["wall_s"] > 0 and row["cpu_s"] > 0
    bad = subprocess.run([sys.executable, script, "--policies", "spin"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "--policies" in bad.stderr and "Traceback" not in bad.stderr

"""``benchmarks/gpu_check.py`` tells the truth: ``--smoke`` runs every section on the CPU and names the commit it
measured; a section that fails, or a CUDA test that fails, makes the exit status non-zero; a bad argument is one
line, exit 2, nothing run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402


@pytest.mark.parametrize("args, said", [
    (["--test-timeout", "-1"], "--test-timeout -1"),
    (["--lengths", "-5"], "--lengths -5"),
    (["--lengths", "1_000"], "--lengths 1_000"),
    (["--prefill-n", "-1"], "--prefill-n"),
    (["--errors", "."], "--errors ."),
    (["--errors", "no/such/folder/errors.txt"], "does not exist"),
    (["--skip", "speedy"], "--skip speedy"),
])
def test_bad_arguments_are_one_line_exit_2(tmp_path, args, said):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--smoke", *args], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and said in lines[0] and "Traceback" not in r.stderr, lines
    assert not list(tmp_path.iterdir())


def test_a_failed_section_makes_the_exit_status_non_zero(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("forced failure of the speed section")

    monkeypatch.setattr(gpu_check, "speed", broken)
    assert gpu_check.main(["--smoke", "--skip", "tests,logits"]) == 1
    out = capsys.readouterr().out
    assert "section speed failed: RuntimeError: forced failure" in out and "1 failed:" in out and "commit " in out


def test_a_failed_cuda_test_or_a_timeout_is_a_failure(monkeypatch):
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda *a, **kw: subprocess.CompletedProcess(a, 1, "1 failed", ""))
    gpu_check.FAILURES.clear()
    gpu_check.cuda_tests(5)
    assert gpu_check.FAILURES == ["CUDA tests: pytest exit code 1"]

    def slow(*a, **kw):
        raise subprocess.TimeoutExpired(a, 5)

    monkeypatch.setattr(gpu_check.subprocess, "run", slow)
    gpu_check.FAILURES.clear()
    gpu_check.cuda_tests(5)
    assert gpu_check.FAILURES == ["CUDA tests: did not finish in 5 s"]
    gpu_check.FAILURES.clear()


def test_smoke_runs_every_section_on_the_cpu_and_names_its_commit(tmp_path):
    errors = tmp_path / "errors.txt"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--smoke", "--profile", "--errors",
                        str(errors)], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    out = r.stdout
    assert r.returncode == 0, out[-3000:] + r.stderr[-3000:]
    assert "commit " in out.splitlines()[0] and "every section passed" in out
    for part in ("## (b)", "## (c)", "one layer compiled whole", "one decoding step's attention",
                 "whole-model prefill", "profile of one prefill", "| selection |",
                 "against its sliding-window baseline"):
        assert part in out, part
    assert not errors.exists()

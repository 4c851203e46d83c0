"""Backends by name (``--backend`` on the LLM commands): the name chosen runs the device's layers; a name the device
cannot run, or no such name, is one line, exit 2, before anything is loaded or written."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from attnlab.errors import UserError
from attnlab.llm.execution.backend import backend_for, use_backend
from attnlab.llm.execution.backend_names import BACKENDS, check_backend
from attnlab.llm.execution.cpu_backend import CpuBackend
from attnlab.llm.execution.flex_backend import FlexBackend


def test_names_choose_the_backend_and_auto_gives_the_device_its_own():
    try:
        assert isinstance(use_backend("flex", "cpu"), FlexBackend) and isinstance(backend_for("cpu"), FlexBackend)
        assert isinstance(backend_for(torch.zeros(1).device), FlexBackend)
        assert type(use_backend("cpu", "cpu")) is CpuBackend and type(backend_for("cpu")) is CpuBackend
    finally:
        use_backend("auto", "cpu")
    assert type(backend_for("cpu")) is CpuBackend


def test_unknown_name_and_flex_without_a_compiler_are_refused(monkeypatch):
    assert set(BACKENDS) == {"auto", "cpu", "flex"}
    with pytest.raises(UserError, match=r"--backend triton: choose one of auto, cpu, flex"):
        check_backend("triton", "cpu")
    assert check_backend("FLEX", "cpu") == "flex"        # FlexAttention compiles on the CPU where a compiler is present
    import attnlab.llm.execution.backend_names as names

    monkeypatch.setattr(names.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match=r"--backend flex on cpu: .* C\+\+ compiler"):
        check_backend("flex", "cpu")


@pytest.mark.parametrize("command", [["plan-run", "--plan", "p.json", "--file", "t.txt"], ["eval", "--out", "runs/x"]])
def test_cli_refuses_a_bad_backend_in_one_line_writing_nothing(tmp_path, command):
    r = subprocess.run([sys.executable, "-m", "attnlab", *command, "--hf", "smollm2-135m", "--backend", "triton"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
    assert len(lines) == 1 and "--backend" in lines[0] and "auto, cpu, flex" in lines[0], lines
    assert not list(tmp_path.iterdir())

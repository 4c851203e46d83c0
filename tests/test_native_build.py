"""How attnlab's native kernels are built and loaded (attnlab/nn/mechanisms/native.py)."""

from __future__ import annotations


def test_loading_the_kernels_leaves_the_process_denormals_alone():
    """A library linked with -ffast-math carries crtfastmath, whose constructor sets flush-to-zero for the whole process:
    loading attnlab's kernels must not change how PyTorch and NumPy treat subnormal numbers (checked in a fresh process)."""
    import subprocess
    import sys

    code = ("import numpy as np, torch\n"
            "from attnlab.nn.mechanisms import native\n"
            "assert native.library() is not None and native.decode_library() is not None\n"
            "print(float(np.float64(1e-310) * 1.0), float(torch.tensor(1e-40) * 1.0))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    numpy_value, torch_value = map(float, out.stdout.split())
    assert numpy_value > 0 and torch_value > 0                       # subnormals kept: nothing flushed them to zero

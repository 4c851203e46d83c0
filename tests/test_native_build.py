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


def test_a_header_edit_rebuilds_the_kernels_that_include_it(tmp_path, monkeypatch):
    """The cached library is named by a hash of its sources and the headers beside them: editing vector_math.h (which
    band_kernel.c, band_backward.c and decode_kernel.c include) gives each a new library, not the stale one."""
    import shutil

    import pytest

    from attnlab.nn.mechanisms import native

    if native._compiler() is None:
        pytest.skip("no C compiler")
    src = tmp_path / "src"
    shutil.copytree(native.SOURCE.parent, src, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    built = lambda: sorted(p.name for p in (tmp_path / "cache" / "attnlab" / "native").glob("*.so"))
    reasons: list[str] = []
    band = [src / f.name for f in native.BAND_SOURCES]
    assert native.compiled(band, reasons) is not None and native.compiled(src / "decode_kernel.c", reasons) is not None, reasons
    before = built()
    assert len(before) == 2
    assert native.compiled(band, reasons) is not None and built() == before          # unchanged: the cached one
    header = src / "vector_math.h"
    header.write_text(header.read_text() + "/* edited */\n")
    assert native.compiled(band, reasons) is not None and native.compiled(src / "decode_kernel.c", reasons) is not None, reasons
    after = built()
    assert len(after) == 4 and set(before) < set(after)
    lib = native.compiled(band, reasons)
    assert lib.attnlab_band_backward is not None and lib.attnlab_block_topk is not None   # every source linked in

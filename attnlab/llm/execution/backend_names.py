"""The execution seam's backends by name (``--backend`` on the LLM commands), checked without loading a model.

    auto   the device's own: cpu on the CPU, flex on CUDA
    cpu    the native C kernel where it runs (CPU float32), else PyTorch's chunked band and SDPA (any device)
    flex   FlexAttention: a layer's prefill in one BlockMask call, decoding by index (CUDA; on the CPU it compiles
           forward only and runs slowly: the tests' path)

A name the device cannot run is refused on one line before anything is loaded or written (``check_backend``); torch
is imported only for flex, to look for FlexAttention.  ``backend.use_backend`` makes the choice.
"""

from __future__ import annotations

import shutil

from attnlab.errors import UserError

__all__ = ["BACKENDS", "check_backend"]

BACKENDS = {"auto": "the device's own: cpu on the CPU, flex on CUDA",
            "cpu": "the native C kernel where it runs (CPU float32), PyTorch's chunked band and SDPA elsewhere",
            "flex": "FlexAttention, one BlockMask a layer, decoding by index (on the CPU: forward only, slow)"}


def check_backend(name: str, device, flag: str = "--backend") -> str:
    """``--backend NAME`` on ``device`` (a name: "cpu", "cuda:0", or a torch.device): the name, lower-cased, if this
    device can run it, else a one-line ``UserError``.  flex needs FlexAttention (torch ≥ 2.5) and, off CUDA, a C++
    compiler for the CPU code FlexAttention generates."""
    key = str(name).strip().lower()
    if key not in BACKENDS:
        raise UserError(f"{flag} {name}: choose one of {', '.join(BACKENDS)}")
    if key == "flex":
        import torch

        try:
            from torch.nn.attention import flex_attention  # noqa: F401
        except ImportError:
            why = f"this PyTorch ({torch.__version__}) has no FlexAttention"
            raise UserError(f"{flag} flex: {why}; use {flag} cpu") from None
        if torch.device(device).type != "cuda" and not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
            raise UserError(f"{flag} flex on {device}: FlexAttention compiles its CPU kernel with a C++ compiler "
                            f"and none is on PATH; use {flag} cpu")
    return key

"""Where an LLM command runs: ``--device cpu|cuda|auto``, the model's dtype there, and the memory check before a run.

    cpu   float32 (the native kernel's prefill; every figure of the README so far)
    cuda  bfloat16 weights and activations, FlexAttention's prefill (``execution.flex_backend``; softmax in fp32)
    auto  cuda when PyTorch sees a CUDA device, else cpu     (under torchrun: the GPU of LOCAL_RANK)

``--device cuda`` on a machine without one is refused on one line before anything is loaded or written; a plan
whose caches and masks will not fit the device's free memory is refused before the run, with the bytes needed and
free (``check_fits``).  The model's inputs are moved to its device by a forward pre-hook (``place_model``), so the
commands' token tensors, built on the host, need not know where the model lies.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from attnlab.errors import UserError

if TYPE_CHECKING:   # the annotations only: torch is imported inside the functions that need it
    import torch

__all__ = ["DEVICES", "DEVICE_HELP", "check_device", "check_fits", "device_dtype", "place_model", "plan_bytes",
           "resolve_device"]

DEVICES = ("cpu", "cuda", "auto")
DEVICE_HELP = "cpu (float32), cuda (bfloat16, FlexAttention) or auto (cuda when one is visible, else cpu)"


def check_device(option: str, flag: str = "--device") -> str:
    """``--device`` checked as ``resolve_device`` checks it, as the device's name ("cpu", "cuda:0"); torch is imported
    only to look for CUDA (cuda, auto), so that a CPU run's option errors and first progress line come before it loads.
    The name is what ``place_model`` and ``check_fits`` take."""
    name = str(option).strip().lower()
    if name not in DEVICES:
        raise UserError(f"{flag} {option}: choose one of {', '.join(DEVICES)}")
    return name if name == "cpu" else str(resolve_device(option, flag))


def resolve_device(option: str, flag: str = "--device") -> torch.device:
    """The device of ``--device`` (``DEVICES``); a CUDA request on a machine without CUDA is a one-line
    ``UserError``."""
    import torch

    name = str(option).strip().lower()
    if name not in DEVICES:
        raise UserError(f"{flag} {option}: choose one of {', '.join(DEVICES)}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        why = "this PyTorch is built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
        raise UserError(f"{flag} cuda: {why} (torch {torch.__version__}); use {flag} cpu or auto")
    if name == "cuda" and "LOCAL_RANK" in os.environ:   # torchrun: each local rank its own GPU
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    return torch.device(name)


def device_dtype(device) -> torch.dtype:
    """The model's dtype on ``device``: bfloat16 on CUDA, float32 elsewhere."""
    import torch

    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def _to_device(device):
    import torch

    def hook(module, args, kwargs):
        move = lambda x: x.to(device) if isinstance(x, torch.Tensor) and x.device != device else x   # noqa: E731
        return tuple(move(a) for a in args), {k: move(v) for k, v in kwargs.items()}

    return hook


def place_model(model, device):
    """``model`` on ``device`` in its dtype there (``device_dtype``); its inputs (ids,
    labels) moved there on each call."""
    import torch

    device = torch.device(device)
    if device.type == "cpu" and next(model.parameters()).device.type == "cpu":
        return model
    model.to(device=device, dtype=device_dtype(device))
    for mod in {id(m): m for m in (model, getattr(model, "base_model", model))}.values():
        mod.register_forward_pre_hook(_to_device(device), with_kwargs=True)
    return model


def plan_bytes(shape: dict, n: int, batch: int = 1, dtype_bytes: int = 2, model_bytes: int = 0) -> int:
    """Device bytes a run at length n needs beyond what is loaded: the full KV cache of every layer (the plan's cache
    holds at most that), one layer's BlockMask and its tables (``block_masks.block_mask_bytes``), the layer's
    q, k, v and output, and ``model_bytes`` if the model is not on the device yet."""
    from attnlab.llm.execution.block_masks import block_mask_bytes

    L, H, H_kv, d = shape["num_layers"], shape["num_heads"], shape["num_kv_heads"], shape.get("head_dim") or 64
    kv = 2 * L * batch * H_kv * n * d * dtype_bytes
    activations = batch * n * (2 * H + 2 * H_kv) * d * dtype_bytes
    return kv + block_mask_bytes(batch, H, n) + activations + model_bytes


def check_fits(need: int, device, what: str) -> None:
    """Refuse (``UserError``, one line) a run whose ``need`` bytes exceed the device's free memory (CUDA only)."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return
    free, total = torch.cuda.mem_get_info(device)
    if need > free:
        raise UserError(f"{what}: needs {need / 2**30:.2f} GiB on {torch.cuda.get_device_name(device)}, "
                        f"{free / 2**30:.2f} GiB free of {total / 2**30:.2f} GiB")

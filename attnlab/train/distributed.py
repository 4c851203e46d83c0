"""The one-process or torchrun/DDP context of a training run.

Under ``torchrun --nproc_per_node N`` the environment gives RANK, WORLD_SIZE
and LOCAL_RANK; the process group uses gloo on CPU and nccl on GPU.  Every
rank sees the same global batches and takes every N-th sentence of each; the
loss of a rank is its sum of token losses divided by the *global* token count,
times N (DDP averages gradients over ranks), so the gradient equals the
single-process gradient of the same global batch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Context:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def all_sum(self, x: torch.Tensor) -> torch.Tensor:
        """Σ over ranks (identity in one process)."""
        if self.distributed:
            x = x.clone()
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
        return x

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def device_of(device: str) -> torch.device:
    """``torch.device(device)``, refused (``UserError``) when it is not a device this machine has."""
    from attnlab.errors import UserError

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise UserError(f"--device {device!r}: not a device name (cpu, cuda, cuda:1, mps ...)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {device}: no CUDA GPU is available on this machine (use --device cpu)")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UserError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"--device {device}: MPS is not available on this machine")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"--device {device}: attnlab trains on cpu, cuda or mps")
    return dev


def setup(device: str | None = None) -> Context:
    """Read torchrun's environment; start the process group when N > 1."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device is None:
        device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    dev = device_of(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    return Context(rank=rank, world_size=world_size, device=dev)


def teardown(ctx: Context) -> None:
    if ctx.distributed and dist.is_initialized():
        dist.destroy_process_group()

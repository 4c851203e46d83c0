"""A DuoAttention gate file (``duo_training.save_gates``, ``benchmarks/duo_attention_train.py``), format
``attnlab-gates/1``: one gate α_{l,g} ∈ [0, 1] per KV head, and how it was trained.

    tensor "gates": (L, H_kv) float32, every α finite and in [0, 1]
    metadata (safetensors: text values): {"format": "attnlab-gates/1", "model": NAME, "steps": "20", "tokens": "1024",
               "passkeys": "4", "passkey_words": "4", "sinks": "16", "recent": "64", "lr": "0.02", "reg": "0.05",
               "seed": "0"}   (``duo_training.GateTraining``)

The rules, each checked here once (``load``): the one tensor ``gates``, two-dimensional, float32, finite, in [0, 1];
every metadata key above present, no other; the numbers whole where they count (steps ≥ 1, tokens ≥ 2, ...), the
rates positive.  Safetensors metadata holds text only: the numbers are read from their text (``"20"`` → 20; ``"x"``
refused).  Whether the gates fit a model (L layers × H_kv KV heads) is checked by ``duo_training.load_gates``.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import ConfigDict, Field

from attnlab.errors import UserError
from attnlab.schemas.schema_file import Strict, parse, where

__all__ = ["FORMAT", "GateFile", "GateMeta", "load"]

FORMAT = "attnlab-gates/1"


class GateMeta(Strict):
    """How the gates were trained (``GateTraining``) and for which model; text values read as numbers."""

    model_config = ConfigDict(extra="forbid", strict=False, allow_inf_nan=False, frozen=True)  # text → number

    format: Literal["attnlab-gates/1"]
    model: str = Field(min_length=1)
    steps: int = Field(ge=1)
    tokens: int = Field(ge=2)
    passkeys: int = Field(ge=1)
    passkey_words: int = Field(ge=1)
    sinks: int = Field(ge=0)
    recent: int = Field(ge=1)
    lr: float = Field(gt=0)
    reg: float = Field(ge=0)
    seed: int = Field(ge=0)


class GateFile:
    """A loaded gate file: ``meta`` and ``gates`` (L, H_kv) as a float32 torch tensor."""

    def __init__(self, meta: GateMeta, gates):
        self.meta, self.gates = meta, gates


def load(path: str | os.PathLike, option: str | None = "--option gates") -> GateFile:
    """The gate file at ``path``, or one UserError line naming the file, the field and the rule."""
    import torch
    from safetensors import SafetensorError, safe_open

    name = where(path, option)
    if not os.path.exists(path):
        raise UserError(f"{name}: no such file")
    if not os.path.isfile(path):
        raise UserError(f"{name}: not a regular file (a folder, FIFO or device), not a gate file")
    try:
        with safe_open(str(path), "pt") as f:
            meta, keys = dict(f.metadata() or {}), list(f.keys())
            tensors = {k: f.get_tensor(k) for k in keys}
    except (SafetensorError, OSError, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{name}: not a gate file ({first})") from None
    if "format" not in meta:
        raise UserError(f"{name}: not a gate file (no format 'attnlab-gates/1' in its metadata; train it again)")
    header = parse(meta, GateMeta, name)
    if keys != ["gates"]:
        extra = sorted(set(keys) - {"gates"})
        raise UserError(f"{name}: field {extra[0] if extra else 'gates'}: "
                        + ("unknown tensor (not in the schema)" if extra else "required tensor missing"))
    g = tensors["gates"]
    if g.dim() != 2 or g.dtype != torch.float32:
        raise UserError(f"{name}: field gates: must be a (layers, KV heads) float32 tensor, "
                        f"got {tuple(g.shape)} {g.dtype}")
    if not bool(torch.isfinite(g).all()) or (g.numel() and (float(g.min()) < 0 or float(g.max()) > 1)):
        raise UserError(f"{name}: field gates: gates must be finite and in [0, 1]")
    return GateFile(header, g)

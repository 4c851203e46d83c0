"""Checkpoints: safetensors for every tensor, TOML/JSON for everything else.

A run folder (DESIGN.md principle 6)::

    runs/NAME/config.toml                      model + training configuration
    runs/NAME/tokenizer.json                   the tokenizer (HF tokenizers format inside)
    runs/NAME/checkpoints/step_000500.safetensors         model weights
    runs/NAME/checkpoints/step_000500.state.safetensors   optimiser moments, RNG, position
    runs/NAME/checkpoints/best.safetensors                weights of the lowest dev loss (text LMs)
    runs/NAME/metrics.jsonl                    one JSON object per logged step

Every file is written to a temporary name and renamed, the state file last, so
a checkpoint exists only once it is complete and a run killed at any moment
resumes from its last complete checkpoint.  The model file records its
``ModelConfig`` in the safetensors metadata; loading it into another
configuration, or loading a truncated file, is a one-line ``UserError``.
Both files carry ``attnlab.sha256``, a SHA-256 of their tensors (names,
dtypes, shapes, bytes), checked on load: flipped bytes are a one-line
``UserError`` naming the file, never NaN parameters.  Files written before
the checksum existed still load, after a check that every value is finite.
No pickle anywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file, save_model

from attnlab.atomic import write_atomic
from attnlab.config import ModelConfig, load_config
from attnlab.errors import UserError

STEP_FILE = re.compile(r"^step_(\d+)\.state\.safetensors$")
KEEP_LAST = 2


CHECKSUM = "attnlab.sha256"


def model_config_json(cfg: ModelConfig) -> str:
    return json.dumps(dataclasses.asdict(cfg), sort_keys=True)


def tensors_sha256(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor, in name order: its name, dtype, shape and bytes."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def check_tensors(path: Path, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """The checksum of ``meta`` matches the tensors; without one (older files), every value is finite."""
    saved = meta.get(CHECKSUM)
    if saved is not None:
        if tensors_sha256(tensors) != saved:
            raise UserError(f"{path}: corrupted checkpoint (the SHA-256 of its tensors does not match the one it was "
                            "written with)")
        return
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise UserError(f"{path}: corrupted checkpoint (tensor {name} holds NaN or infinite values)")


def save_weights(path: Path, model: torch.nn.Module, cfg: ModelConfig) -> None:
    """Model weights (shared tensors such as tied embeddings stored once), with the checksum of all of them."""
    meta = {"attnlab.model_config": model_config_json(cfg), CHECKSUM: tensors_sha256(model.state_dict())}
    write_atomic(path, lambda p: save_model(model, p, metadata=meta))


def load_weights(path: Path, model: torch.nn.Module, cfg: ModelConfig) -> None:
    """Load weights written by ``save_weights`` into ``model`` built from ``cfg``."""
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        state = load_file(str(path))
    except FileNotFoundError:
        raise UserError(f"{path}: no such checkpoint") from None
    except (SafetensorError, OSError, ValueError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: not a readable checkpoint (corrupted or truncated: {err})") from None
    saved = meta.get("attnlab.model_config")
    if saved is not None:
        theirs, ours = json.loads(saved), dataclasses.asdict(cfg)
        diff = [f"{k}={theirs.get(k)!r} (expected {ours[k]!r})" for k in ours if k in theirs and theirs[k] != ours[k]]
        if diff:
            raise UserError(f"{path}: checkpoint of another configuration: {', '.join(diff[:4])}")
    # tied weights are stored once under one of their names: fill in the aliases
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    for k in missing:
        for alias, t in expected.items():
            if alias in state and t.data_ptr() == expected[k].data_ptr():
                state[k] = state[alias]
                break
    check_tensors(path, {k: state[k] for k in expected if k in state}, meta)  # the names save_weights summed
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()
        raise UserError(f"{path}: checkpoint does not fit this model ({' '.join(first[:2])[:300]})") from None


@dataclass
class TrainState:
    """Where a run is: what the next step needs to continue exactly."""

    step: int = 0  # optimiser steps done
    epoch: int = 0  # current epoch (0-based)
    batch_in_epoch: int = 0  # global batches of this epoch already consumed
    tokens: int = 0  # target tokens seen
    elapsed: float = 0.0  # seconds of training so far
    best_dev: float | None = None  # lowest dev loss so far (language models on text; checkpoints/best.safetensors)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))


def save_checkpoint(run_dir: Path, model: torch.nn.Module, cfg: ModelConfig, optimizer: torch.optim.Optimizer,
                    state: TrainState) -> Path:
    """Write step_N.safetensors then step_N.state.safetensors; keep the last two."""
    ckpt = Path(run_dir) / "checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    stem = f"step_{state.step:07d}"
    save_weights(ckpt / f"{stem}.safetensors", model, cfg)
    tensors: dict[str, torch.Tensor] = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    opt = optimizer.state_dict()
    for i, s in opt["state"].items():
        for name, value in s.items():
            tensors[f"optim.{i}.{name}"] = value if torch.is_tensor(value) else torch.tensor(value)
    tensors = {k: v.contiguous().cpu() for k, v in tensors.items()}
    meta = {"attnlab.train_state": state.to_json(), "attnlab.param_groups": json.dumps(opt["param_groups"]),
            CHECKSUM: tensors_sha256(tensors)}
    write_atomic(ckpt / f"{stem}.state.safetensors", lambda p: save_file(tensors, p, metadata=meta))
    for old in sorted(list_checkpoints(run_dir))[:-KEEP_LAST]:
        for suffix in (".safetensors", ".state.safetensors"):
            (ckpt / f"step_{old:07d}{suffix}").unlink(missing_ok=True)
    return ckpt / f"{stem}.safetensors"


def list_checkpoints(run_dir: Path) -> list[int]:
    """Steps of the complete checkpoints (those whose state file exists)."""
    ckpt = Path(run_dir) / "checkpoints"
    if not ckpt.is_dir():
        return []
    return sorted(int(m.group(1)) for f in ckpt.iterdir() if (m := STEP_FILE.match(f.name)))


def latest_weights(run_dir: Path) -> Path:
    steps = list_checkpoints(run_dir)
    if not steps:
        raise UserError(f"{run_dir}: no checkpoint in {Path(run_dir) / 'checkpoints'} "
                        "(is this a run folder of attnlab train?)")
    return Path(run_dir) / "checkpoints" / f"step_{steps[-1]:07d}.safetensors"


def load_checkpoint(run_dir: Path, model: torch.nn.Module, cfg: ModelConfig,
                    optimizer: torch.optim.Optimizer | None) -> TrainState:
    """Restore weights, optimiser moments and RNG of the last complete checkpoint."""
    weights = latest_weights(run_dir)
    load_weights(weights, model, cfg)
    state_path = weights.with_name(weights.name.replace(".safetensors", ".state.safetensors"))
    try:
        with safe_open(str(state_path), framework="pt") as f:
            meta = f.metadata() or {}
        tensors = load_file(str(state_path))
        state = TrainState(**json.loads(meta["attnlab.train_state"]))
        groups = json.loads(meta["attnlab.param_groups"])
    except (SafetensorError, OSError, KeyError, ValueError, TypeError) as err:
        raise UserError(f"{state_path}: not a readable training state (corrupted or truncated: {err})") from None
    check_tensors(state_path, tensors, meta)
    torch.set_rng_state(tensors["rng.torch"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    if optimizer is not None:
        opt_state: dict[int, dict[str, Any]] = {}
        for key, value in tensors.items():
            if key.startswith("optim."):
                _, i, name = key.split(".", 2)
                opt_state.setdefault(int(i), {})[name] = value
        for group in groups:
            if "betas" in group:
                group["betas"] = tuple(group["betas"])
        optimizer.load_state_dict({"state": opt_state, "param_groups": groups})
    return state


@dataclass
class Run:
    """A trained run, ready for translation and analysis."""

    path: Path
    model: torch.nn.Module
    tokenizer: Any
    cfg: ModelConfig
    train_cfg: Any


BEST_WEIGHTS = "best.safetensors"  # the weights of the lowest dev loss, kept beside the step checkpoints


def load_run(run_dir: str | os.PathLike, device: str = "cpu", best: bool = False) -> Run:
    """Model (eval mode) + tokenizer + configuration of a run folder.

    ``best=True`` loads ``checkpoints/best.safetensors`` (lowest dev loss) when the run has it.
    """
    from attnlab.data import Tokenizer
    from attnlab.nn import build_model

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run folder")
    cfg, train_cfg = load_config(run_dir / "config.toml")
    model = build_model(cfg)
    best_path = run_dir / "checkpoints" / BEST_WEIGHTS
    load_weights(best_path if best and best_path.is_file() else latest_weights(run_dir), model, cfg)
    tokenizer = Tokenizer.load(run_dir / "tokenizer.json")
    return Run(path=run_dir, model=model.to(device).eval(), tokenizer=tokenizer, cfg=cfg, train_cfg=train_cfg)

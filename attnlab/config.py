"""Configurations as dataclasses, read from and written to TOML.

A run folder holds ``config.toml`` with two tables, ``[model]`` and
``[train]``; ``ModelConfig`` alone is enough to rebuild a model, so a
checkpoint can be checked against the configuration it is loaded into.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import tomli_w

from attnlab.atomic import write_text_atomic
from attnlab.errors import UserError

MODEL_KINDS = ("transformer", "lm", "gru")
NORM_PLACEMENTS = ("post", "pre")
SCORINGS = ("dot", "additive", "gaussian")
ATTENTION_SITES = ("encoder", "decoder", "cross")  # the attentions ``attention_on`` may name


@dataclass
class ModelConfig:
    """Every number that fixes a model's parameters and its forward pass.

    ``d_model`` is d (the width), ``heads`` is H, so d_k = d / H.
    ``pos_base`` is N in ω_k = 1 / N^{2k/d}.  ``norm`` is "post" (Vaswani et
    al. 2017: x ← LN(x + Sublayer(x))) or "pre" (nanoGPT: x ← x +
    Sublayer(LN(x))).  ``value_rank`` r > 0 factors W_V = V_u V_d.
    ``attention`` names the mechanism (``attnlab.nn.mechanisms``); ``w``,
    ``num_pos``, ``sparse``, ``dilation``, ``num_random`` and ``proj_len``
    are its options, and ``attention_on`` says which attentions use it
    ("all", or a comma list of "encoder", "decoder", "cross").
    """

    model: str = "transformer"
    vocab_size: int = 0
    d_model: int = 256
    heads: int = 4
    layers: int = 3  # encoder layers (and decoder layers unless dec_layers is set)
    dec_layers: int = 0  # 0 = same as layers
    ff: int = 1024
    dropout: float = 0.1
    max_len: int = 128
    pos_base: float = 10000.0
    norm: str = "post"
    scoring: str = "dot"
    sigma: float = 1.0  # Gaussian kernel width
    value_rank: int = 0  # 0 = full-rank W_V
    tie_embeddings: bool = True
    pad_id: int = 0
    attention: str = "full"
    attention_on: str = "all"
    w: int = 8
    num_pos: int = 0
    sparse: int = 0
    dilation: int = 1
    num_random: int = 0
    proj_len: int = 64
    seed: int = 0  # seeds the random parts of mechanisms (BigBird's random keys)

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads

    @property
    def n_dec_layers(self) -> int:
        return self.dec_layers or self.layers

    def validate(self) -> "ModelConfig":
        """Raise ``UserError`` naming the field (the CLI shows it as its option) when a value makes no sense."""
        checks = [
            (self.model in MODEL_KINDS, f"model: must be one of {', '.join(MODEL_KINDS)}, got {self.model!r}"),
            (self.norm in NORM_PLACEMENTS, f"norm: must be one of {', '.join(NORM_PLACEMENTS)}, got {self.norm!r}"),
            (self.scoring in SCORINGS, f"scoring: must be one of {', '.join(SCORINGS)}, got {self.scoring!r}"),
            (self.vocab_size > 0, f"vocab_size: must be positive, got {self.vocab_size}"),
            (self.d_model > 0 and self.heads > 0, "d_model, heads: must be positive"),
            (self.heads > 0 and (self.model == "gru" or self.d_model % self.heads == 0),
             f"d_model: {self.d_model} must be divisible by heads ({self.heads})"),
            (self.model == "gru" or self.d_model % 2 == 0,
             f"d_model: must be even for the sinusoidal encoding, got {self.d_model}"),
            (self.layers > 0 and self.dec_layers >= 0, "layers: must be positive"),
            (self.ff > 0, f"ff: must be positive, got {self.ff}"),
            (0.0 <= self.dropout < 1.0, f"dropout: must be in [0, 1), got {self.dropout}"),
            (self.max_len > 1, f"max_len: must be > 1, got {self.max_len}"),
            (0 <= self.value_rank <= self.d_model,
             f"value_rank: must be in [0, d_model = {self.d_model}], got {self.value_rank}"),
            (self.sigma > 0, f"sigma: must be positive, got {self.sigma}"),
            (self.attention_on == "all"
             or (bool(self.attention_on.strip())
                 and set(map(str.strip, self.attention_on.split(","))) <= set(ATTENTION_SITES)),
             f"attention_on: must be all or a comma list of {', '.join(ATTENTION_SITES)}, got {self.attention_on!r}"),
        ]
        if (self.model == "lm" and self.attention_on != "all"
                and "decoder" not in map(str.strip, self.attention_on.split(","))):
            checks.append((False,
                           f"attention_on: got {self.attention_on!r}, but a language model has decoder self-attention "
                           "only (give decoder or all)"))
        # a mechanism's widths are counts of keys: none can exceed the sequence (w = max_len already spans it all)
        if self.attention != "full":
            for name in ("w", "num_pos", "num_random", "sparse"):
                value = getattr(self, name)
                checks.append((value <= self.max_len, f"{name}: must be <= max_len ({self.max_len}) "
                                                      f"with attention {self.attention}, got {value}"))
        for ok, message in checks:
            if not ok:
                raise UserError(message)
        from attnlab.support import check_num_pos, check_w

        try:  # the one check of w and num_pos (attnlab.support)
            check_w(self.w), check_num_pos(self.num_pos)
        except ValueError as err:
            raise UserError(str(err)) from None
        return self


@dataclass
class TrainConfig:
    """How a model is trained: data, tokenizer, optimiser, schedule, stopping."""

    data: str = "synthetic"
    tokenizer: str = "bpe"  # bpe | word | char
    vocab_size: int = 8000
    max_tokens: int = 4096  # tokens per batch (source + target), summed over processes
    lr: float = 7e-4  # AdamW's peak rate (with --optimizer muon: for embeddings, head, biases and gains)
    optimizer: str = "adamw"  # adamw | muon (attnlab.train.optimizers)
    muon_lr: float = 0.02  # Muon's peak rate for the hidden matrices (--optimizer muon)
    warmup: int = 1000
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.01
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    epochs: int = 0
    max_steps: int = 0
    minutes: float = 0.0
    seed: int = 0
    log_every: int = 50
    checkpoint_every: int = 500  # steps
    eval_every: int = 0  # steps; 0 = at checkpoints
    synthetic_pairs: int = 20000
    dev_limit: int = 500  # distinct dev sources scored (greedy) at the end of training; 0 = none
    precision: str = "fp32"  # fp32 | bf16 (autocast of the forward pass; weights and optimiser stay fp32)
    schedule: str = "inverse_sqrt"  # inverse_sqrt | cosine (linear warm-up, then cosine decay to lr/10)
    # language models on contiguous text (--data a .txt[.gz] file or folder; attnlab.data.text)
    context: int = 0  # tokens per training window n (0 = the model's max_len)
    batch_size: int = 0  # windows per global batch (0 = max_tokens // context)
    eval_tokens: int = 0  # dev tokens scored every eval_every steps (0 = the whole dev text)

    def validate(self) -> "TrainConfig":
        """Raise ``ValueError`` naming the parameter when a value makes no sense (the CLI checks its flags first)."""
        import math

        checks = [
            (self.vocab_size > 0, "vocab_size", "> 0"), (self.max_tokens > 0, "max_tokens", "> 0"),
            (math.isfinite(self.lr) and self.lr > 0, "lr", "finite and > 0"), (self.warmup >= 0, "warmup", ">= 0"),
            (0.0 <= self.label_smoothing < 1.0, "label_smoothing", "in [0, 1)"),
            (min(self.epochs, self.max_steps) >= 0 and math.isfinite(self.minutes) and self.minutes >= 0,
             "epochs, max_steps, minutes", ">= 0 (and finite)"),
            (self.log_every > 0, "log_every", "> 0"), (self.checkpoint_every > 0, "checkpoint_every", "> 0"),
            (self.synthetic_pairs > 0, "synthetic_pairs", "> 0"), (self.dev_limit >= 0, "dev_limit", ">= 0"),
            (self.precision in ("fp32", "bf16"), "precision", "fp32 or bf16"),
            (self.optimizer in ("adamw", "muon"), "optimizer", "adamw or muon"),
            (math.isfinite(self.muon_lr) and self.muon_lr > 0, "muon_lr", "finite and > 0"),
        ]
        for ok, name, want in checks:
            if not ok:
                raise ValueError(f"TrainConfig.{name} must be {want}, got "
                                 f"{', '.join(str(getattr(self, n.strip())) for n in name.split(','))}")
        return self


# Keys that earlier attnlab versions wrote and that no longer mean anything:
# read (and dropped) so that older run folders still load.
RETIRED_KEYS = {"TrainConfig": {"extra"}}


def _from_table(cls, table: dict[str, Any], where: str):
    known = {f.name: f for f in fields(cls)}
    table = {k: v for k, v in table.items() if k not in RETIRED_KEYS.get(cls.__name__, ())}
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items()}
    return cls(**values)


def load_config(path: str | os.PathLike) -> tuple[ModelConfig, TrainConfig]:
    """Read ``config.toml`` → (ModelConfig, TrainConfig); one-line errors."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not a valid TOML file ({err})") from None
    model = _from_table(ModelConfig, raw.get("model", {}), f"{path} [model]")
    train = _from_table(TrainConfig, raw.get("train", {}), f"{path} [train]")
    return model, train


def save_config(path: str | os.PathLike, model: ModelConfig, train: TrainConfig | None = None) -> None:
    """Write ``config.toml`` atomically (temporary file, then rename)."""
    path = Path(path)
    doc = {"model": dataclasses.asdict(model)}
    if train is not None:
        doc["train"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(train).items()}
    write_text_atomic(path, tomli_w.dumps(doc))

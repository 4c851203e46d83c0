"""Attention mechanisms: one attention module, many ways to compute A V.

``build_mechanism(cfg, kind, d_k)`` returns the mechanism a model config asks
for at one attention (``kind`` is "encoder", "decoder" or "cross").  Register
a new mechanism by adding it to ``MECHANISMS``.
"""

from __future__ import annotations

from typing import Callable

from attnlab.errors import UserError
from attnlab.nn.mechanisms.base import Mechanism
from attnlab.nn.mechanisms.band import Band
from attnlab.nn.mechanisms.bigbird import BigBird
from attnlab.nn.mechanisms.full import Full
from attnlab.nn.mechanisms.global_ import Global
from attnlab.nn.mechanisms.linear import Linear
from attnlab.nn.mechanisms.linformer import Linformer
from attnlab.nn.mechanisms.structured import Structured
from attnlab.nn.mechanisms.taylor import Taylor
from attnlab.nn.scoring import build_scoring


def _full(cfg, kind: str, d_k: int) -> Mechanism:
    return Full(build_scoring(cfg.scoring, cfg.heads, d_k, cfg.sigma))


def _global_count(cfg) -> int:
    # g = --num-pos global tokens / key columns; more than --max-len can never fit
    if cfg.num_pos > cfg.max_len:
        raise UserError(f"--num-pos ({cfg.num_pos}) must be <= --max-len ({cfg.max_len}): more global tokens than positions")
    return cfg.num_pos


def _linformer(cfg, kind: str, d_k: int) -> Mechanism:
    if kind == "decoder":
        raise UserError(
            "--attention linformer cannot be used with a causal mask (decoder self-attention); "
            "use --attention-on encoder,cross"
        )
    if cfg.proj_len < 1:
        raise UserError(f"--proj-len must be >= 1 for --attention linformer, got {cfg.proj_len}")
    return Linformer(cfg.max_len, cfg.proj_len)


def _bigbird(cfg, kind: str, d_k: int) -> Mechanism:
    if cfg.num_random < 0:
        raise UserError(f"--num-random must be >= 0, got {cfg.num_random}")
    return BigBird(cfg.w, _global_count(cfg), cfg.num_random, cfg.seed)


def _structured(columns: str):
    def factory(cfg, kind: str, d_k: int) -> Mechanism:
        if cfg.sparse < 0:
            raise UserError(f"--sparse must be >= 0, got {cfg.sparse}")
        return Structured(cfg.w, _global_count(cfg), cfg.sparse, columns, cfg.heads, d_k)

    return factory


# name -> factory(cfg, kind, d_k); kind in {"encoder", "decoder", "cross"}
MECHANISMS: dict[str, Callable[..., Mechanism]] = {
    "full": _full,
    "band": lambda cfg, kind, d_k: Band(cfg.w, cfg.dilation),
    "global": lambda cfg, kind, d_k: Global(cfg.w, _global_count(cfg)),
    "bigbird": _bigbird,
    "linear": lambda cfg, kind, d_k: Linear(),
    "taylor": lambda cfg, kind, d_k: Taylor(),
    "linformer": _linformer,
    "structured": _structured("fixed"),
    "structured-learned": _structured("learned"),
}


def uses_mechanism(cfg, kind: str) -> bool:
    """Does the attention ``kind`` use cfg.attention (else full)?"""
    on = {s.strip() for s in cfg.attention_on.split(",")}
    return "all" in on or kind in on


def build_mechanism(cfg, kind: str, d_k: int) -> Mechanism:
    name = cfg.attention if uses_mechanism(cfg, kind) else "full"
    if name not in MECHANISMS:
        raise UserError(f"--attention must be one of {', '.join(sorted(MECHANISMS))}, got {name!r}")
    if name != "full" and cfg.scoring != "dot":
        raise UserError(f"--attention {name} works with the dot-product scoring only, got --scoring {cfg.scoring}")
    if cfg.w < 0:
        raise UserError(f"--w must be >= 0, got {cfg.w}")
    if cfg.num_pos < 0:
        raise UserError(f"--num-pos must be >= 0, got {cfg.num_pos}")
    if cfg.dilation < 1:
        raise UserError(f"--dilation must be >= 1, got {cfg.dilation}")
    if cfg.dilation != 1 and cfg.attention != "band":  # cfg.attention: the attentions not in --attention-on fall back to full
        raise UserError(f"--dilation applies to --attention band only, got --attention {cfg.attention}")
    return MECHANISMS[name](cfg, kind, d_k)


__all__ = [
    "Mechanism", "Full", "Band", "Global", "BigBird", "Linear", "Taylor", "Linformer", "Structured",
    "MECHANISMS", "build_mechanism", "uses_mechanism",
]

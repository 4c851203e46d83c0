"""Attention mechanisms: one attention module, many ways to compute A V.

``build_mechanism(cfg, kind, d_k)`` returns the mechanism a model config asks
for at one attention (``kind`` is "encoder", "decoder" or "cross").  Register
a new mechanism by adding it to ``MECHANISMS``.
"""

from __future__ import annotations

from typing import Callable

from attnlab.errors import UserError
from attnlab.nn.mechanisms.base import Mechanism
from attnlab.nn.mechanisms.full import Full
from attnlab.nn.scoring import build_scoring


def _full(cfg, kind: str, d_k: int) -> Mechanism:
    return Full(build_scoring(cfg.scoring, cfg.heads, d_k, cfg.sigma))


# name -> factory(cfg, kind, d_k); kind in {"encoder", "decoder", "cross"}
MECHANISMS: dict[str, Callable[..., Mechanism]] = {"full": _full}


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
    return MECHANISMS[name](cfg, kind, d_k)


__all__ = ["Mechanism", "Full", "MECHANISMS", "build_mechanism", "uses_mechanism"]

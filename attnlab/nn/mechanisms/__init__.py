"""Attention mechanisms: one attention module, many ways to compute A V.

``build_mechanism(cfg, kind, d_k)`` returns the mechanism a model config asks
for at one attention (``kind`` is "encoder", "decoder" or "cross").  Register
a new mechanism by adding it to ``MECHANISMS``: the registry carries each
mechanism's builder, the config options it reads, its cost (keys per query)
and whether it supports a causal mask; the CLI help, the experiment and the
benchmarks read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from attnlab.errors import UserError

if TYPE_CHECKING:
    from attnlab.nn.mechanisms.base import Mechanism

# The classes load on first use (PEP 562): the registry (names, options, costs) is read by the
# command line's help without importing torch.
_CLASSES = {"Mechanism": "base", "Full": "full", "Band": "band", "Global": "global_", "BigBird": "bigbird",
            "Linear": "linear", "Taylor": "taylor", "Linformer": "linformer", "Structured": "structured"}


def __getattr__(name: str):
    if name in _CLASSES:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_CLASSES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class MechanismSpec:
    """One registered mechanism: how a model config builds it, what it reads, what it costs.

    build:   ``build(cfg, kind, d_k)`` → the mechanism (``kind``: "encoder", "decoder", "cross");
    class_name: its class (``cls.supports_causal``: may it run under a causal mask?);
    options: the ``ModelConfig`` fields it reads (the CLI's ``--w``, ``--num-pos``, …);
    cost:    keys per query (multiply-adds of one row of A V over d_v),
             ``cost(n, w=, g=, r=, s=, d_k=, proj_len=, causal=)`` (causal: the average over rows of a causal mask);
    summary: one line for the help.
    """

    build: Callable[..., "Mechanism"]
    class_name: str
    options: tuple[str, ...]
    cost: Callable[..., float]
    summary: str

    @property
    def cls(self) -> type:
        return __getattr__(self.class_name)

    @property
    def causal(self) -> bool:
        return bool(self.cls.supports_causal)

    def __call__(self, cfg, kind: str, d_k: int) -> "Mechanism":
        return self.build(cfg, kind, d_k)


def _global_count(cfg) -> int:
    # g = num_pos global tokens / key columns; more than max_len can never fit
    if cfg.num_pos > cfg.max_len:
        raise UserError(f"num_pos: must be <= max_len = {cfg.max_len} (more global tokens than positions), "
                        f"got {cfg.num_pos}")
    return cfg.num_pos


def _full(cfg, kind: str, d_k: int) -> "Mechanism":
    from attnlab.nn.scoring import build_scoring

    return __getattr__("Full")(build_scoring(cfg.scoring, cfg.heads, d_k, cfg.sigma))


def _linformer(cfg, kind: str, d_k: int) -> "Mechanism":
    if cfg.proj_len < 1:
        raise UserError(f"proj_len: must be >= 1 for attention linformer, got {cfg.proj_len}")
    return __getattr__("Linformer")(cfg.max_len, cfg.proj_len)


def _bigbird(cfg, kind: str, d_k: int) -> "Mechanism":
    if cfg.num_random < 0:
        raise UserError(f"num_random: must be >= 0, got {cfg.num_random}")
    return __getattr__("BigBird")(cfg.w, _global_count(cfg), cfg.num_random, cfg.seed)


def _structured(columns: str):
    def factory(cfg, kind: str, d_k: int) -> "Mechanism":
        if cfg.sparse < 0:
            raise UserError(f"sparse: must be >= 0, got {cfg.sparse}")
        return __getattr__("Structured")(cfg.w, _global_count(cfg), cfg.sparse, columns, cfg.heads, d_k)

    return factory


def _band_keys(n, w=0, g=0, r=0, s=0, causal=False, **_):
    """Keys per query of a band (2w + 1, or w + 1 under a causal mask) plus g columns, r random, s residual."""
    return min(n, (w + 1 if causal else 2 * w + 1) + g + r + s)


# name -> MechanismSpec; the order is the order of tables and help texts
MECHANISMS: dict[str, MechanismSpec] = {
    "full": MechanismSpec(_full, "Full",
                          ("scoring",), lambda n, causal=False, **_: (n + 1) / 2 if causal else n, "every key"),
    "band": MechanismSpec(lambda cfg, kind, d_k: __getattr__("Band")(cfg.w, cfg.dilation), "Band", ("w", "dilation"),
                          lambda n, w=0, causal=False, **_: _band_keys(n, w, causal=causal),
                          "|i − j| ≤ w, every δ-th key with dilation δ"),
    "global": MechanismSpec(lambda cfg, kind, d_k: __getattr__("Global")(cfg.w, _global_count(cfg)), "Global",
                            ("w", "num_pos"),
                            lambda n, **kw: _band_keys(n, **kw), "band + g global tokens, columns and rows"),
    "structured": MechanismSpec(_structured("fixed"), "Structured", ("w", "num_pos", "sparse"),
                                lambda n, **kw: _band_keys(n, **kw), "band + g key columns + top-s residual"),
    "structured-learned": MechanismSpec(_structured("learned"), "Structured", ("w", "num_pos", "sparse"),
                                        lambda n, **kw: _band_keys(n, **kw),
                                        "band + g learned key columns + top-s residual"),
    "bigbird": MechanismSpec(_bigbird, "BigBird", ("w", "num_pos", "num_random"),
                             lambda n, **kw: _band_keys(n, **kw), "band + g global + r random keys"),
    "linear": MechanismSpec(lambda cfg, kind, d_k: __getattr__("Linear")(), "Linear", (), lambda n, d_k=64, **_: d_k,
                            "φ(q)·φ(k), elu + 1"),
    "taylor": MechanismSpec(lambda cfg, kind, d_k: __getattr__("Taylor")(), "Taylor", (),
                            lambda n, d_k=64, **_: d_k + 1, "1 + q·k, first-order Taylor"),
    "linformer": MechanismSpec(_linformer, "Linformer", ("proj_len",), lambda n, proj_len=64, **_: 2 * min(proj_len, n),
                               "keys and values projected to k' rows, not causal"),
}


def mechanisms_reading(option: str) -> list[str]:
    """The registered mechanisms that read the config field ``option`` (e.g. "w")."""
    return [name for name, spec in MECHANISMS.items() if option in spec.options]


def keys_per_query(name: str, n: int, **options) -> float:
    """The registry's cost: keys each query of a length-n sequence touches (``MechanismSpec.cost``)."""
    return MECHANISMS[name].cost(n, **options)


def uses_mechanism(cfg, kind: str) -> bool:
    """Does the attention ``kind`` use cfg.attention (else full)?"""
    on = {s.strip() for s in cfg.attention_on.split(",")}
    return "all" in on or kind in on


def build_mechanism(cfg, kind: str, d_k: int) -> "Mechanism":
    """The mechanism ``cfg`` asks for at the attention ``kind``; ``UserError`` naming the config field otherwise."""
    from attnlab.support import check_num_pos, check_w

    name = cfg.attention if uses_mechanism(cfg, kind) else "full"
    if name not in MECHANISMS:
        raise UserError(f"attention: must be one of {', '.join(MECHANISMS)}, got {name!r}")
    spec = MECHANISMS[name]
    if name != "full" and cfg.scoring != "dot":
        raise UserError(f"scoring: attention {name} works with the dot-product scoring only, got {cfg.scoring}")
    try:
        check_w(cfg.w), check_num_pos(cfg.num_pos)
    except ValueError as err:
        raise UserError(str(err)) from None
    if cfg.dilation < 1:
        raise UserError(f"dilation: must be >= 1, got {cfg.dilation}")
    if cfg.dilation != 1 and "dilation" not in MECHANISMS.get(cfg.attention, spec).options:
        # cfg.attention: the attentions not in attention_on fall back to full
        raise UserError(f"dilation: applies to attention {', '.join(mechanisms_reading('dilation'))} only, "
                        f"got attention {cfg.attention}")
    if kind == "decoder" and not spec.causal:
        raise UserError(
            f"attention: {name} cannot be used with a causal mask (decoder self-attention); "
            "use attention_on = encoder,cross"
        )
    return spec.build(cfg, kind, d_k)


__all__ = [
    "Mechanism", "Full", "Band", "Global", "BigBird", "Linear", "Taylor", "Linformer", "Structured",
    "MECHANISMS", "MechanismSpec", "build_mechanism", "keys_per_query", "mechanisms_reading", "uses_mechanism",
]

"""The registry of methods: every file of this package defines one ``Method`` and registers it by name.

    methods.names()                      → ("attnlab", "duo-attention", "full", …)
    methods.plan_names()                 → the methods ``attnlab plan`` can write a plan file for
    methods.get("snapkv", budget=0.25)   → a configured Method (UserError for an unknown name)

Adding a method is one file here with a ``@register`` class; nothing else names it.
"""

from __future__ import annotations

import importlib
import pkgutil

from attnlab.errors import UserError
from attnlab.llm.methods.base import Method, PlanMethod

__all__ = ["Method", "PlanMethod", "REFERENCE", "REGISTRY", "default_names", "get", "names", "plan_names", "register"]

REGISTRY: dict[str, type[Method]] = {}
REFERENCE = "full"   # the method every other is measured against (full attention, ``full.py``)


def register(cls: type[Method]) -> type[Method]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if not cls.name or cls.name in REGISTRY:
        raise ValueError(f"method name {cls.name!r} is empty or taken")
    REGISTRY[cls.name] = cls
    return cls


def _discover() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name != "base":
            importlib.import_module(f"{__name__}.{info.name}")


def names() -> tuple[str, ...]:
    _discover()
    return tuple(sorted(REGISTRY))


def default_names() -> tuple[str, ...]:
    """The registered methods a benchmark runs when not told which (``Method.default_run``: no variants, no bounds)."""
    _discover()
    return tuple(sorted(name for name, cls in REGISTRY.items() if cls.default_run))


def plan_names() -> tuple[str, ...]:
    """The registered methods that have a plan file (``Method.writes_plan``): the choices of ``attnlab plan``."""
    _discover()
    return tuple(sorted(name for name, cls in REGISTRY.items() if cls.writes_plan()))


def get(name: str, budget: float = 1.0, **options) -> Method:
    """The method ``name`` at ``budget`` with its options; one-line UserError for an unknown name."""
    _discover()
    if name not in REGISTRY:
        raise UserError(f"--method: unknown method {name!r} (known: {', '.join(sorted(REGISTRY))})")
    return REGISTRY[name](budget, **options)

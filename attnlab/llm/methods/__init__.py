"""The registry of methods: every file of this package defines one ``Method`` and registers it by name.

    methods.names()                      → ("attnlab-band", "attnlab-retrieval", "duo-attention", "full", …)
    methods.preset_names()               → ("attnlab", "attnlab-key-blocks", …): named configurations
    methods.plan_names()                 → the methods and presets ``attnlab plan`` can write a plan file for
    methods.get("snapkv", budget=0.25)   → a configured Method (UserError for an unknown name)
    methods.get("attnlab", budget=0.1)   → the recommended default (``DEFAULT``), a preset
    methods.get("retrieval-tails+key-blocks", budget=0.1, blocks=8)   → parts composed (``parts``)

Adding a method is one file here with a ``@register`` class; nothing else names it.  A preset is a base
method with fixed option values and a one-line purpose (``register_preset``, in the base method's file);
``get(preset, **options)`` takes further options of the base, and refuses one that contradicts the preset.

A method file imports no torch at module level: ``attnlab methods`` and the CLI's option checks read the
registry before torch loads (tests/test_cli_imports.py).  What computes lives in functions, or in a
``NAME_runner.py`` beside it, which the registry does not import (the method imports it when it runs).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

from attnlab.errors import UserError
from attnlab.llm.methods.base import REFERENCE, Method, PlanMethod

__all__ = ["COMPOSE", "DEFAULT", "Method", "PLAN_FILE", "PlanMethod", "PRESETS", "Preset", "REFERENCE", "REGISTRY",
           "FILE_METHODS", "composed", "default_names", "get", "is_registered", "method_class", "names", "plan_names",
           "preset_names", "register", "register_file_method", "register_preset"]

REGISTRY: dict[str, type[Method]] = {}
COMPOSE = "+"   # parts joined: a composed method (``parts.compose``)
PLAN_FILE = "plan"   # the method of a plan file (``--plan FILE``; ``attnlab_plan.PlanFile``): its rows' name
DEFAULT = "attnlab"  # the configuration the project recommends (a preset, ``attnlab_retrieval.py``)


@dataclass(frozen=True)
class Preset:
    """A named configuration: the method ``base`` with ``values`` fixed, and what it is for."""

    name: str
    base: str
    values: dict
    purpose: str
    default_run: bool = False   # run by a benchmark not told which methods (the recommended default)


PRESETS: dict[str, Preset] = {}
FILE_METHODS: dict[str, type[Method]] = {}   # PLAN_FILE → the method that runs a plan file (``attnlab_plan.PlanFile``)


def register(cls: type[Method]) -> type[Method]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if not cls.name or cls.name in REGISTRY:
        raise ValueError(f"method name {cls.name!r} is empty or taken")
    REGISTRY[cls.name] = cls
    return cls


def register_file_method(cls: type[Method]) -> type[Method]:
    """Class decorator: ``cls`` runs a plan file under the name ``PLAN_FILE`` (not a method one configures)."""
    FILE_METHODS[PLAN_FILE] = cls
    return cls


def register_preset(name: str, base: str, purpose: str, default: bool = False, **values) -> Preset:
    """Register ``name`` = ``base`` with the option ``values`` fixed (checked against the base's declared options)."""
    if not name or name in REGISTRY or name in PRESETS or base not in REGISTRY:
        raise ValueError(f"preset name {name!r} is empty or taken, or its base {base!r} is not registered")
    cls = REGISTRY[base]
    fixed = {key: cls.options[key].parse(key, value) for key, value in values.items()}  # a key of no option: KeyError
    PRESETS[name] = Preset(name, base, fixed, purpose, default)
    return PRESETS[name]


def _discover() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        # not a method: the base, the parts, the listing; a runner is the torch half, imported when the method runs
        if info.name not in ("base", "parts", "overview") and not info.name.endswith("_runner"):
            importlib.import_module(f"{__name__}.{info.name}")


def names() -> tuple[str, ...]:
    _discover()
    return tuple(sorted(REGISTRY))


def preset_names() -> tuple[str, ...]:
    _discover()
    return tuple(sorted(PRESETS))


def method_class(name: str) -> type[Method]:
    """The class a method or preset name runs (a preset: its base's; parts joined by ``+``: their composition)."""
    _discover()
    if name not in PRESETS and name not in REGISTRY and composed(name):
        from attnlab.llm.methods.parts import composed_class

        return composed_class(name)
    return REGISTRY[PRESETS[name].base if name in PRESETS else name]


def is_registered(name: str) -> bool:
    """Whether ``name`` is a method or preset of the registry, or parts it composes (``retrieval-tails+key-blocks``):
    the test a plan file's or an eval folder's method names pass (``attnlab.schemas``, given by the caller)."""
    try:
        method_class(name)
    except (KeyError, UserError):
        return False
    return True


def composed(name: str) -> bool:
    """Whether ``name`` names parts: joined by ``+`` (``retrieval-tails+key-blocks``), or one part alone."""
    from attnlab.llm.methods.parts import PARTS

    return COMPOSE in name or name in PARTS


def default_names() -> tuple[str, ...]:
    """The methods and presets a benchmark runs when not told which (``Method.default_run``: no variants, no bounds;
    of the presets, the recommended default)."""
    _discover()
    return tuple(sorted([name for name, cls in REGISTRY.items() if cls.default_run]
                        + [name for name, p in PRESETS.items() if p.default_run]))


def plan_names() -> tuple[str, ...]:
    """The methods and presets that have a plan file (``Method.writes_plan``): the choices of ``attnlab plan``."""
    _discover()
    return tuple(sorted(name for name in (*REGISTRY, *PRESETS) if method_class(name).writes_plan()))


def get(name: str, budget: float = 1.0, plan_file=None, **options) -> Method:
    """The method or preset ``name`` at ``budget`` with its options; one-line UserError for an unknown name, an option
    the method has not, or an option that contradicts the preset's value.  ``PLAN_FILE``: the plan of ``plan_file``
    (its budget and length are the file's)."""
    _discover()
    if name == PLAN_FILE:
        if plan_file is None or options:
            raise UserError(f"--method {PLAN_FILE}: runs the plan file of --plan FILE, with no options")
        return FILE_METHODS[PLAN_FILE](plan_file)
    if name in PRESETS:
        p = PRESETS[name]
        cls = REGISTRY[p.base]
        unknown = sorted(set(options) - set(cls.options))
        if unknown:
            raise UserError(f"--option: method {name} ({p.base}) has no option {', '.join(unknown)} "
                            f"(it takes: {', '.join(cls.options)})")
        for key, value in options.items():
            if key in p.values and key in cls.options and cls.options[key].parse(key, value) != p.values[key]:
                raise UserError(f"--method {name}:{key}={value}: contradicts the preset {name} "
                                f"({key}={p.values[key]}); write {p.base}:… to run another value")
        method = cls(budget, **{**p.values, **options})
        method.name, method.preset = name, p
        return method
    if name not in REGISTRY and composed(name):   # parts composed on the command line: retrieval-tails+key-blocks
        return method_class(name)(budget, **options)
    if name not in REGISTRY:
        raise UserError(f"--method: unknown method {name!r} (known: {', '.join(sorted((*REGISTRY, *PRESETS)))}; "
                        "or parts joined by +, `attnlab methods --all`)")
    return REGISTRY[name](budget, **options)

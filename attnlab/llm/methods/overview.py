"""What ``attnlab methods`` prints: the default as its parts, the methods a user compares it against, and with
``every`` the parts' shares of β and sliding layers, the presets, the research variants and the experimental options.

Read from the registry alone (no torch): a method's fields, a part's fields, a preset's values.
"""

from __future__ import annotations

from attnlab.llm import methods as registry
from attnlab.llm.methods.base import Option


def default_text(value) -> str:
    return "derived" if value is None else "none" if value == "" else str(value)


def values_text(values: dict) -> str:
    return " ".join(f"{key}={value}" for key, value in values.items())


def option_lines(options: dict[str, Option], indent: str = "    ") -> list[str]:
    """One line an option: name = default, range, help; an experimental one with the measurement that set it aside."""
    lines = []
    for key, opt in options.items():
        mark = f"  [experimental: {opt.experimental}]" if opt.experimental else ""
        lines.append(f"{indent}{key} = {default_text(opt.default)}  {opt.range_text()}  {opt.help}{mark}")
    return lines


def default_lines() -> list[str]:
    """``attnlab``: its base's parts, each with the values the preset gives it (a part it leaves at 0 is off)."""
    preset = registry.PRESETS[registry.DEFAULT]
    base = registry.REGISTRY[preset.base]
    lines = [f"{registry.DEFAULT} — the recommended default: {preset.base} composed of these parts "
             f"(--method {registry.DEFAULT}[:key=value…]; calibrated)"]
    off = []
    for part, values in base.describe_parts(preset.values):
        if not values:
            off.append(part.name)
            continue
        shown = {key: values.get(key, opt.default) for key, opt in part.options.items() if not opt.experimental}
        lines.append(f"  {part.name:<16} {values_text(shown):<34} {part.purpose}")
    lines += [f"  (not in it: {', '.join(off)})"] if off else []
    return lines + [preset_line(registry.DEFAULT)]


def preset_line(name: str) -> str:
    """A preset as one spec: ``name  [default] = base:key=value:…``."""
    p = registry.PRESETS[name]
    mark = "  [default]" if name == registry.DEFAULT else ""
    return f"{name}{mark} = {p.base}:{':'.join(f'{k}={v}' for k, v in p.values.items())}"


def baseline_lines() -> list[str]:
    """The methods of the field (``Method.baseline``), full attention first: name, options, prefill and decoding."""
    names = sorted((name for name in registry.names() if registry.REGISTRY[name].baseline),
                   key=lambda name: (name != registry.REFERENCE, name))
    lines = ["methods to compare against (--method NAME[:key=value…], β from --budget; full: the reference):"]
    for name in names:
        cls = registry.REGISTRY[name]
        opts = values_text({key: default_text(opt.default) for key, opt in cls.options.items()})
        lines.append(f"  {name}{' (calibrated)' if cls.calibrated else ''}{'  ' + opts if opts else ''}")
        lines.append(f"    prefill: {cls.prefill}; decoding: {cls.decoding}")
    return lines


def part_lines() -> list[str]:
    from attnlab.llm.methods.parts import EVERY

    lines = ["parts (compose them: --method part+part[:key=value…], or parts.compose in Python; β share over "
             "L·H·n(n+1)/2, refused where the shares reach β):"]
    for part in EVERY:
        lines.append(f"  {part.name}: {part.purpose}")
        lines.append(f"    β share: {part.share_rule}; sliding layer: {part.sliding}")
        lines += [f"    {key} > 0 needs {need} > 0 ({why})" for key, need, why in part.requires]
        lines += option_lines(part.options)
    return lines


def preset_lines() -> list[str]:
    lines = ["presets (a method with fixed options; more options of the method may follow, name:key=value):"]
    for name in registry.preset_names():
        lines.append(f"  {preset_line(name)}")
        lines.append(f"    {registry.PRESETS[name].purpose}")
    return lines


def method_lines() -> list[str]:
    lines = ["every method (research variants and bounds included):"]
    for name in registry.names():
        cls = registry.REGISTRY[name]
        lines.append(f"  {name}{' (calibrated)' if cls.calibrated else ''}")
        lines.append(f"    prefill:  {cls.prefill}")
        lines.append(f"    decoding: {cls.decoding}")
        if not hasattr(cls, "describe_parts"):   # a composed method's options are its parts' (above)
            lines += option_lines(cls.options)
    return lines


def overview(every: bool = False) -> list[str]:
    """The lines of ``attnlab methods`` (``every``: ``--all``)."""
    registry.names()   # the registry discovered
    lines = default_lines() + [""] + baseline_lines()
    if not every:
        return lines + ["", "the parts and their shares of β, every option with its range, the presets, the research "
                        "variants and the experimental options: attnlab methods --all"]
    return lines + [""] + part_lines() + [""] + preset_lines() + [""] + method_lines()

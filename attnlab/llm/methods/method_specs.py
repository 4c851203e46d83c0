"""A method spec written once: ``name:key=value:…`` with every number read by the one parser and written back.

    method_spec("attnlab:decode_band=08")            → "attnlab:decode_band=8"
    method_list("streaming-llm,snapkv", "--method")  → ["streaming-llm", "snapkv"]

The options' types come from the registry (a method's declared ``Option``), so this lives beside it; the numbers and
lists themselves are ``attnlab.option_values``'s.
"""
from __future__ import annotations

from typing import Any

from attnlab.option_values import items, number, refuse_repeats, split_method, value_text


def method_spec(spec: str, option: str = "--method") -> str:
    """The canonical spec of one method: its name, then each option as ``key=value`` in the order given, the value
    written back from its parsed value (the method's declared type).  A name the registry lacks or an option it does
    not declare is left to the registry to refuse (``methods.get``)."""
    from attnlab.llm import methods as registry

    name, pairs = split_method(spec, option)
    if not pairs:
        return name
    try:
        declared = registry.method_class(name).options
    except KeyError:
        return spec
    parts = [name]
    for key, value in pairs:
        if key in declared and declared[key].type in (int, float):
            value = value_text(number(value, declared[key].type, f"{option} {spec}: option {key}"))
        parts.append(f"{key}={value}")
    return ":".join(parts)


def method_list(text: Any, option: str = "--method") -> list[str]:
    """The comma list of method specs, each canonical (``method_spec``); "" → [] (full attention alone); an empty item
    or a spec given twice once canonical (``snapkv:window=8,snapkv:window=08``) refused."""
    raw = items(text, option, allow_none=True)
    out = [method_spec(x, option) for x in raw]
    refuse_repeats(out, raw, option, text)
    return out

"""One parser for the values written in options: canonical numbers, comma lists, method specs.

    number("08", int, "--option decode_band")       → 8          ("８", "1_000", " 8", "nan", "1e309": refused)
    items("niah,vt", "--task")                       → ["niah", "vt"]   ("," "niah,," "niah,niah": refused)
    numbers("2048,4096", int, "--lengths")           → [2048, 4096]     ("2048,02048": 2048 given twice)
    (method specs and lists: ``attnlab.llm.methods.method_specs``, which reads the registry)

A number is written in ASCII only:

    int    [+-]?[0-9]+
    float  [+-]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+)?     and finite (NaN, inf, 1e309 refused)

Python's own ``int`` and ``float`` accept more (full-width and other Unicode digits, ``_`` between digits, spaces
around), so one setting could be written several ways and be kept verbatim under several labels.  Here the value is
parsed once and its label written back from the parsed value (``value_text``): ``decode_band=8`` and
``decode_band=08`` are the same row.  A list names its option when an item is empty or given twice (a row counted
twice, or a run of full attention alone where ``--method ,`` was meant as something).
"""

from __future__ import annotations

import math
import re
from typing import Any

from attnlab.errors import UserError

__all__ = ["arg_items", "arg_number", "arg_numbers", "items", "number", "numbers", "refuse_repeats", "split_method",
           "value_text"]

DIGITS_MAX = 400   # longer is no setting (and Python refuses to read an int of more than 4,300 digits)
INT = re.compile(r"[+-]?[0-9]+")
FLOAT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def number(text: Any, kind: type, option: str) -> int | float:
    """``text`` read as ``kind`` (int or float), written canonically; UserError naming ``option`` otherwise.

    A number already (not a bool) is taken as it is, once checked (an int for an int, a finite float)."""
    what = "int (an integer)" if kind is int else "float (a number)"
    if isinstance(text, bool):
        raise UserError(f"{option}: expected {what}, got {text!r}")
    if isinstance(text, (int, float)) and not isinstance(text, str):
        value = text
        if kind is int and isinstance(value, float):
            if not value.is_integer():
                raise UserError(f"{option}: expected int (an integer), got {value!r}")
            value = int(value)
    else:
        if kind is float and isinstance(text, str) and text.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise UserError(f"{option}: expected a finite number, got {text!r}")
        if isinstance(text, str) and len(text) > DIGITS_MAX:
            raise UserError(f"{option}: expected {what}, got {len(text)} characters")
        pattern = INT if kind is int else FLOAT
        if not isinstance(text, str) or not pattern.fullmatch(text):
            raise UserError(f"{option}: expected {what} in ASCII digits (no spaces, no '_'), got {text!r}")
        value = int(text) if kind is int else float(text)
    if kind is float and not math.isfinite(value):
        raise UserError(f"{option}: expected a finite number, got {text!r}")
    return kind(value)


def value_text(value: Any) -> str:
    """The canonical text of a parsed value: ``8``, ``0.25``, ``1e-05``, ``1`` for 1.0, a choice as it is."""
    if isinstance(value, float):
        text = repr(value)
        return text.removesuffix(".0")
    return str(value)


def items(text: Any, option: str, allow_none: bool = False) -> list[str]:
    """The comma list ``text`` as its items (spaces around an item dropped); an empty item, an item given twice, or
    (unless ``allow_none``) no item at all: one UserError line naming ``option``."""
    text = "" if text is None else str(text)
    if not text.strip():
        if allow_none:
            return []
        raise UserError(f"{option}: expected at least one value, got {text!r}")
    out = [x.strip() for x in text.split(",")]
    if "" in out:
        raise UserError(f"{option}: an empty item in the comma list {text!r}")
    refuse_repeats(out, out, option, text)
    return out


def numbers(text: Any, kind: type, option: str) -> list:
    """The comma list ``text`` of numbers of ``kind``; the same number twice (``2048,02048``) refused."""
    raw = items(text, option)
    out = [number(x, kind, option) for x in raw]
    refuse_repeats(out, raw, option, text)
    return out


def refuse_repeats(values: list, raw: list, option: str, text: Any) -> None:
    """UserError when a value of ``values`` repeats an earlier one (named as ``raw`` writes it)."""
    for i, v in enumerate(values):
        if v in values[:i]:
            raise UserError(f"{option}: {raw[i]!r} given twice, got {text!r}")


def split_method(spec: str, option: str = "--method") -> tuple[str, list[tuple[str, str]]]:
    """``name:key=value:key=value`` → (name, [(key, value), …]), keys with ``_`` for ``-``; a key given twice or
    an item not ``key=value``: UserError naming ``option`` and the spec."""
    name, *rest = str(spec).split(":")
    pairs: list[tuple[str, str]] = []
    for item in rest:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{option} {spec}: options are written name:key=value, got {item!r}")
        key = key.replace("-", "_")
        if key in (k for k, _ in pairs):  # the last value would win without a word, the row labelled with both
            raise UserError(f"{option} {spec}: option {key} given twice")
        pairs.append((key, value))
    return name, pairs


def arg_number(option: str, kind: type):
    """An argparse ``type=``: one canonical number of ``kind`` (``number``), the option named when it is not one."""
    return lambda text: number(text, kind, option)


def arg_numbers(option: str, kind: type):
    """An argparse ``type=``: a comma list of canonical numbers (``numbers``): no empty item, none twice."""
    return lambda text: numbers(text, kind, option)


def arg_items(option: str):
    """An argparse ``type=``: a comma list of names (``items``): no empty item, none twice."""
    return lambda text: items(text, option)

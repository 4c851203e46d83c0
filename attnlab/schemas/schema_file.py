"""A file read through its schema: one function, one line of error naming the file, the field and the rule.

    load_json(path, Model, option="--plan")  →  Model instance  |  UserError("--plan FILE: field heads.3.1.w: ...")

``Strict`` is the base of every schema: unknown keys refused (``extra="forbid"``), no silent coercion (``strict``:
``1.0`` is not an int, ``"8"`` is not a number), infinities and NaN refused where a float is declared.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from attnlab.errors import UserError

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """The base of every file schema: unknown keys and silent type changes refused, the model frozen once read."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


def where(path: str | os.PathLike, option: str | None) -> str:
    """How a message names a file: ``--plan runs/p.json`` when an option gave it, else the path alone."""
    return f"{option} {path}" if option else str(path)


def first_error(err: ValidationError) -> str:
    """The first rule a validation broke, as ``field a.b.3: rule`` (pydantic's location joined by dots)."""
    e = err.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in e["loc"])
    rule = e["msg"].removeprefix("Value error, ")       # a rule of the schema's own: its message as written
    if e["type"] == "missing":
        rule = "required field missing"
    elif e["type"] == "extra_forbidden":
        rule = "unknown key (not in the schema)"
    elif e["type"] in ("model_type", "dict_type", "model_attributes_type"):
        rule = f"a JSON object expected, got {type(e['input']).__name__}"
    more = f" (and {len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    if rule.startswith("field "):                       # a cross-field rule naming its field below ``loc``
        return f"field {loc + '.' if loc else ''}{rule.removeprefix('field ')}{more}"
    return f"field {loc}: {rule}{more}" if loc else f"{rule}{more}"


def read_text(path: str | os.PathLike, option: str | None = None, what: str = "file") -> str:
    """The UTF-8 text of a regular file, or one UserError line: missing, a folder, a FIFO/device, binary, empty."""
    path = Path(path)
    name = where(path, option)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UserError(f"{name}: no such {what}") from None
    except OSError as err:
        raise UserError(f"{name}: cannot read ({err.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{name}: a folder, not a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{name}: not a regular file (a FIFO, socket or device), not a {what}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{name}: not a {what} (not UTF-8 text)") from None
    except OSError as err:
        raise UserError(f"{name}: cannot read ({err.strerror})") from None
    if not text.strip():
        raise UserError(f"{name}: empty, not a {what}")
    return text


def parse(data, model: type[M] | TypeAdapter, name: str, context: dict | None = None) -> M:
    """``model`` (a schema, or a ``TypeAdapter``: a union of schemas) validated from a decoded document, or UserError
    ``NAME: field …: rule``."""
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_python(data, context=context)
        return model.model_validate(data, context=context)
    except ValidationError as err:
        raise UserError(f"{name}: {first_error(err)}") from None


def load_json(path: str | os.PathLike, model: type[M], option: str | None = None, what: str = "file",
              context: dict | None = None) -> M:
    """The JSON file ``path`` read through ``model``; one UserError line naming the file, the field and the rule
    (``context``: pydantic's validation context, what a rule needs from the caller's layer: the registry's names)."""
    name = where(path, option)
    text = read_text(path, option, what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{name}: not a {what} (JSON error at line {err.lineno}: {err.msg})") from None
    return parse(data, model, name, context)

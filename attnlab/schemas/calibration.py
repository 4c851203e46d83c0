"""A compact calibration archive (``attnlab calibrate``, the files shipped under ``attnlab/calibrations/``), format
``attnlab-calibration/1``: the tables the calibrated methods read, one safetensors file.

    metadata "attnlab" = {"format": "attnlab-calibration/1", "model": NAME, "n": n,
                          "num_layers": L, "num_heads": H, "num_kv_heads": H_kv, "windows": [W_l | null] | null,
                          "w_grid": [w, ...], "g_grid": [g, ...], "err_rows": R, "candidates": [[w, f, d], ...],
                          "pattern_keys": [K, ...], "text": NAME, "text_windows": c, "mix": SPEC | null,
                          "methods": [SPEC, ...],
                          "proved": [{"method": SPEC, "budget": β}, ...]}
    tensors             = some of the tables of ``calibration.Calibration``, each of the shape below, float16/32/64

with Gw = |w_grid|, Gg = |g_grid|, C = |candidates|, P = |pattern_keys|, S = ``plan.SINKS``:

    windows, resid, out_scale, gsq: (L,)      retrieval: (L, H)           sink: (L, H, Gw)
    fit, est: (L, H, Gw, Gg)                  fixed: (L, H, Gw, Gg, S)    cand_err, cand_mass: (L, H, C)
    err, mass_exec, delta: (L, H, 2, Gw, Gg)  page_ranking: (8,)          pattern_recall: (L, H, P, 3)

The rules, each checked here once (``load``):

* H is a multiple of H_kv; ``windows`` (the sliding window of each layer) has L entries;
* w_grid strictly increasing, 0 ≤ w < n − 1; g_grid strictly increasing, g ≥ 0; pattern_keys distinct, K ≥ 1;
* ``windows`` (the tensor) holds the counts of calibration windows per layer: whole numbers ≥ 0;
* every value finite and ≥ 0 (the tables are sums of masses, errors, squares, counts), except the page ranking's
  measured figures, NaN where not measured; ``fixed`` at most the window count;
* ``methods``: the specs the archive was made for (a registered method or preset each); ``proved``: the (spec, β)
  whose plan made from the archive was proved identical to the full calibration's (``attnlab calibrate``), β ∈ (0, 1],
  each spec one of ``methods``.

A hand-edited or corrupt file is refused in one line naming the file, the field and the rule.  The full statistics
(``Calibration.save``'s ``.npz``, an eval folder's ``calibration-n.npz``) hold every table: their tables are checked
by the same rules (``check_tables``).
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from attnlab.errors import UserError
from attnlab.schemas.schema_file import Strict, parse, where

__all__ = ["FORMAT", "TABLE_SHAPES", "CalibrationArchive", "CalibrationHeader", "check_tables", "load", "table_shape"]

FORMAT = "attnlab-calibration/1"
N_MAX = 1 << 24          # tokens a calibration may refer to (a sanity bound)
KEY = "attnlab"          # the safetensors metadata key that holds the header
DTYPES = ("float16", "float32", "float64")

# the dimensions of each table, by name (``table_shape`` turns them into sizes)
TABLE_SHAPES = {
    "windows": ("L",), "resid": ("L",), "out_scale": ("L",), "gsq": ("L",), "retrieval": ("L", "H"),
    "sink": ("L", "H", "Gw"), "fit": ("L", "H", "Gw", "Gg"), "est": ("L", "H", "Gw", "Gg"),
    "fixed": ("L", "H", "Gw", "Gg", "S"), "cand_err": ("L", "H", "C"), "cand_mass": ("L", "H", "C"),
    "err": ("L", "H", 2, "Gw", "Gg"), "mass_exec": ("L", "H", 2, "Gw", "Gg"), "delta": ("L", "H", 2, "Gw", "Gg"),
    "page_ranking": (8,), "pattern_recall": ("L", "H", "P", 3),
}


class Proved(Strict):
    """A (method, β) whose plan made from the archive equals the one made from the full calibration."""

    method: str
    budget: float = Field(gt=0, le=1)


class CalibrationHeader(Strict):
    """What the tables are of: the model's shape, the grids, the text, and the methods the archive serves."""

    format: Literal["attnlab-calibration/1"]
    model: str = Field(min_length=1)
    n: int = Field(ge=2, le=N_MAX)
    num_layers: int = Field(ge=1, le=10_000)
    num_heads: int = Field(ge=1, le=10_000)
    num_kv_heads: int = Field(ge=1, le=10_000)
    windows: list[int | None] | None          # each layer's sliding window W_l (None: a full layer)
    w_grid: list[int] = Field(min_length=1)
    g_grid: list[int] = Field(min_length=1)
    err_rows: int = Field(ge=0, le=N_MAX)
    candidates: list[Annotated[list[int], Field(min_length=3, max_length=3)]]   # MInference's [w, fixed, dynamic]
    pattern_keys: list[int]
    text: str = Field(min_length=1)           # the calibration text (its file name)
    text_windows: int = Field(ge=1)
    mix: str | None
    methods: list[str] = Field(min_length=1)
    proved: list[Proved] = Field(min_length=1)

    @field_validator("w_grid", "g_grid")
    @classmethod
    def _increasing(cls, v: list[int]) -> list[int]:
        if v[0] < 0 or any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError("must be strictly increasing and >= 0")
        return v

    @field_validator("pattern_keys")
    @classmethod
    def _keys(cls, v: list[int]) -> list[int]:
        if any(k < 1 for k in v) or len(set(v)) < len(v):
            raise ValueError("must be distinct and >= 1")
        return v

    @field_validator("methods")
    @classmethod
    def _methods(cls, v: list[str], info: ValidationInfo) -> list[str]:
        """Where the caller knows the registry (``known_method=methods.is_registered``), a name it lacks is refused;
        the calibration record imports no method."""
        known = (info.context or {}).get("known_method")
        bad = [m for m in v if known is not None and not known(m.partition(":")[0])]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a registered method or preset")
        return v

    @model_validator(mode="after")
    def _rules(self) -> "CalibrationHeader":
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.windows is not None and len(self.windows) != self.num_layers:
            raise ValueError(f"windows has {len(self.windows)} entries for {self.num_layers} layers")
        if any(p.method not in self.methods for p in self.proved):
            raise ValueError(f"proved names {next(p.method for p in self.proved if p.method not in self.methods)!r}, "
                             "not one of methods")
        if self.w_grid[-1] >= self.n - 1:
            raise ValueError(f"w_grid holds {self.w_grid[-1]}, not below n - 1 = {self.n - 1}")
        return self

    def sizes(self) -> dict:
        from attnlab.llm.plans.plan import SINKS

        return {"L": self.num_layers, "H": self.num_heads, "Gw": len(self.w_grid), "Gg": len(self.g_grid), "S": SINKS,
                "C": len(self.candidates), "P": len(self.pattern_keys)}


def table_shape(name: str, sizes: dict) -> tuple[int, ...]:
    """The shape the table ``name`` has in a calibration of ``sizes`` (``CalibrationHeader.sizes``: L, H, Gw, ...)."""
    return tuple(d if isinstance(d, int) else sizes[d] for d in TABLE_SHAPES[name])


class CalibrationArchive:
    """A loaded archive: its ``header`` and its ``tables`` (name → numpy array, as stored)."""

    def __init__(self, header: CalibrationHeader, tables: dict):
        self.header, self.tables = header, tables


def check_tables(tables: dict, sizes: dict, name: str) -> None:
    """Every table's rule (module docstring), the window counts first; one UserError ``NAME: field T: rule``."""
    unknown = sorted(set(tables) - set(TABLE_SHAPES))
    if unknown:
        raise UserError(f"{name}: field {unknown[0]}: unknown table (not in the schema)")
    if "windows" not in tables:
        raise UserError(f"{name}: field windows: required table missing")
    for key in sorted(tables, key=lambda k: k != "windows"):   # the window counts first: ``fixed`` is read against them
        rule = _check_table(key, tables[key], sizes, tables)
        if rule:
            raise UserError(f"{name}: field {key}: {rule}")


def _check_table(name: str, a, sizes: dict, tables: dict) -> str | None:
    """The rule table ``name`` breaks, or None."""
    import numpy as np

    if str(a.dtype) not in DTYPES:
        return f"dtype {a.dtype}, expected one of {', '.join(DTYPES)}"
    want = table_shape(name, sizes)
    if tuple(a.shape) != want:
        return f"shape {tuple(a.shape)}, the header's shape and grids give {want}"
    x = a.astype(np.float64)
    may_be_nan = np.zeros(x.shape, dtype=bool)
    if name == "page_ranking":
        may_be_nan[2:] = True                     # the measured figures: NaN where not measured (K and rows: never)
    if np.isinf(x).any() or (np.isnan(x) & ~may_be_nan).any():
        return "holds a non-finite value"
    if (x[~np.isnan(x)] < 0).any():
        return "holds a negative value (sums of masses, errors, squares and counts are >= 0)"
    if name == "windows" and (x != np.round(x)).any():
        return "must hold whole counts (the calibration windows of each layer)"
    if name == "fixed" and "windows" in tables:
        if (x > tables["windows"].astype(np.float64).reshape(-1, 1, 1, 1, 1)).any():
            return "counts more windows than the calibration has"
    return None


def load(path: str | os.PathLike, option: str | None = None, known_method=None) -> CalibrationArchive:
    """The archive at ``path``, or one UserError line naming the file, the field and the rule (``known_method``: the
    registry's test of a method name, given by a caller that knows it)."""
    from safetensors import SafetensorError, safe_open

    name = where(path, option)
    _regular(path, name)
    try:
        with safe_open(str(path), "np") as f:
            meta = f.metadata() or {}
            tables = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{name}: not a calibration archive (safetensors: {first})") from None
    if KEY not in meta:
        raise UserError(f"{name}: not a calibration archive (no '{KEY}' header in its metadata)")
    try:
        data = json.loads(meta[KEY])
    except json.JSONDecodeError as err:
        raise UserError(f"{name}: field header: not JSON ({err.msg} at column {err.colno})") from None
    header = parse(data, CalibrationHeader, name, {"known_method": known_method})
    check_tables(tables, header.sizes(), name)
    return CalibrationArchive(header, tables)


def _regular(path, name: str) -> None:
    """One UserError line unless ``path`` is a regular file: missing, a folder, a FIFO or device."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UserError(f"{name}: no such calibration archive") from None
    except OSError as err:
        raise UserError(f"{name}: cannot read ({err.strerror})") from None
    if stat.S_ISDIR(mode):
        raise UserError(f"{name}: a folder, not a calibration archive")
    if not stat.S_ISREG(mode):
        raise UserError(f"{name}: not a regular file (a FIFO, socket or device), not a calibration archive")

"""A calibration archive written and proved: only the tables the calibrated methods read, at a precision keeping
their plans.

    archive = write_compact(path, full, model, methods, meta)   # ``attnlab calibrate``: record, shrink, prove, write
    cal     = read_compact(path, option)                        # read back (``calibration.archive``)

A full calibration (``calibration.Calibration``, the eval folder's ``calibration-n.npz``) holds every statistic of
every grid point: 6.5 MB at 2K, 12 MB at 8K in float64.  A method's plan reads a few of them — ``attnlab`` the
executed options' errors ``err`` with ``resid`` and ``out_scale`` (``selection.choose_plan``'s err-rel), the retrieval
scores and the page ranking; MInference its pattern recall.  ``write_compact``

1. records the tables each method reads while it makes its plan from the full calibration, at every budget β of
   ``PROOF_BUDGETS`` (and the methods' own) where the full calibration can make one (``tables_read``);
2. keeps those tables, the per-option ones (a value per grid option: ``PER_OPTION``) at float16, else float32, else
   float64 — the first precision
   at which every plan made from the archive equals the plan made from the full calibration (``plan_of``: the plan's
   file without the objective's reported value, a float that rounds with the tables), proved by reading the written
   file back;
3. writes the archive (``attnlab.schemas.calibration``) with the (method, β) pairs it proved.

A table the archive does not hold is refused when a method reads it, in one line naming the file and the table.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from attnlab.errors import UserError
from attnlab.llm.calibration.archive import PER_OPTION, read_compact
from attnlab.llm.calibration.build import method_of
from attnlab.llm.calibration.statistics import Calibration
from attnlab.schemas.calibration import FORMAT, KEY, TABLE_SHAPES, CalibrationHeader

__all__ = ["PRECISIONS", "PROOF_BUDGETS", "plan_of", "tables_read", "write_compact"]

PROOF_BUDGETS = (0.05, 0.1, 0.2, 0.3, 0.5)      # the budgets every archived method's plan is proved at
PRECISIONS = ("float16", "float32", "float64")  # tried in this order for the per-option tables
OBJECTIVE = ("captured_mass", "mean_error")     # the plan's reported objective: rounds with the tables, not a choice


class _Recorded(Calibration):
    """A full calibration's tables seen through a recorder: every table read from it noted (``tables_read``)."""

    def __init__(self, full: Calibration):
        object.__setattr__(self, "_read", set())
        super().__init__(full.shape, full.n, full.candidates, full.err_rows)
        for name, value in vars(full).items():   # the record's tables and grids, each by name (a data record)
            setattr(self, name, value)

    def __getattribute__(self, name: str):
        if name in TABLE_SHAPES:
            object.__getattribute__(self, "_read").add(name)
        return object.__getattribute__(self, name)


def plan_of(method) -> str:
    """What a prepared method will run, as text: its plan's file (the objective's value left out) and its other state
    (MInference's per-head patterns, the state of the parts it is composed of)."""
    from attnlab.llm.plans.plan import Plan

    def plain(x):
        if isinstance(x, Plan):
            d = x.to_dict()
            return {**d, "meta": {k: v for k, v in d["meta"].items() if k not in OBJECTIVE}}
        if isinstance(x, np.ndarray):
            return x.tolist()
        if isinstance(x, np.generic):
            return x.item()
        if hasattr(x, "__dict__"):   # a part of a composed method, a preset: its state, not its address
            return {type(x).__name__: {k: v for k, v in vars(x).items() if not k.startswith("_")}}
        return repr(x)

    state = {k: v for k, v in vars(method).items() if not k.startswith("_")}
    return json.dumps(state, sort_keys=True, default=plain)


def _plans(cal, model, n: int, pairs) -> dict:
    """(spec, β) → ``plan_of`` the method prepared on ``cal``; a pair the calibration cannot plan is left out."""
    out = {}
    for spec, budget in pairs:
        m = method_of(spec, budget)
        try:
            m.prepare(model, n, cal)
        except UserError:   # a budget below the method's cheapest plan, a pattern search not measured at its keys
            continue
        out[(spec, budget)] = plan_of(m)
    return out


def tables_read(full: Calibration, model, methods: list[str], budgets) -> tuple[set, dict]:
    """(the tables the ``methods``' plans read at ``budgets``, their plans (spec, β) → ``plan_of``) from ``full``."""
    rec = _Recorded(full)
    plans = _plans(rec, model, full.n, [(m, b) for m in methods for b in budgets])
    return set(object.__getattribute__(rec, "_read")), plans


def _header(full: Calibration, meta: dict, proved) -> dict:
    shape = full.shape
    return {"format": FORMAT, "model": meta["model"], "n": int(full.n), "num_layers": int(shape["num_layers"]),
            "num_heads": int(shape["num_heads"]), "num_kv_heads": int(shape["num_kv_heads"]),
            "windows": shape.get("windows"), "w_grid": [int(w) for w in full.w_grid],
            "g_grid": [int(g) for g in full.g_grid], "err_rows": int(full.err_rows),
            "candidates": [[int(v) for v in c] for c in full.candidates],
            "pattern_keys": [int(k) for k in full.pattern_keys], "text": meta["text"],
            "text_windows": int(meta["text_windows"]), "mix": meta.get("mix"), "methods": list(meta["methods"]),
            "proved": [{"method": spec, "budget": float(b)} for spec, b in sorted(proved)]}


def _fits(full: Calibration, tables: set, dtype: str) -> bool:
    """Whether every per-option table of ``tables`` is finite as ``dtype``."""
    with np.errstate(over="ignore"):
        return all(np.isfinite(np.asarray(getattr(full, t)).astype(dtype)).all() for t in tables if t in PER_OPTION)


def _write(path: Path, full: Calibration, tables: set, header: dict, dtype: str) -> None:
    """The archive at ``path`` (atomically): ``tables`` of ``full``, those of ``PER_OPTION`` as ``dtype``."""
    from safetensors.numpy import save_file

    arrays = {}
    for name in sorted(tables | {"windows"}):
        a = np.asarray(getattr(full, name), dtype=np.float64)
        arrays[name] = np.ascontiguousarray(a.astype(dtype if name in PER_OPTION else "float64"))
    CalibrationHeader.model_validate(header)                 # what is written is what ``load`` accepts
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file(arrays, tmp, metadata={KEY: json.dumps(header, separators=(",", ":"))})
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)                          # mkstemp's 0600 is no file to ship
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_compact(path, full: Calibration, model, meta: dict, budgets=()) -> dict:
    """The archive of ``full`` for ``meta["methods"]`` (module docstring) at ``path``; returns what was done:
    {"tables", "dtype", "proved": [(spec, β)], "bytes"}.  ``meta``: model, text, text_windows, mix, methods."""
    path = Path(path)
    grid = sorted(set(PROOF_BUDGETS) | {float(b) for b in budgets})
    tables, want = tables_read(full, model, list(meta["methods"]), grid)
    if not want:
        raise UserError(f"--method {', '.join(meta['methods'])}: no plan can be made from this calibration at "
                        f"β = {', '.join(f'{b:g}' for b in grid)}")
    header = _header(full, meta, want)
    for dtype in PRECISIONS:
        if not _fits(full, tables, dtype):   # a value beyond the type's range (float16: 65504) would be inf
            continue
        _write(path, full, tables, header, dtype)
        got = _plans(read_compact(path), model, full.n, list(want))
        if got == want:
            return {"tables": sorted(tables), "dtype": dtype, "proved": sorted(want), "bytes": path.stat().st_size}
    path.unlink()
    raise RuntimeError("a float64 archive gave another plan than the full calibration it holds")   # a bug, not input

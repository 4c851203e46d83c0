"""The calibrations attnlab ships: one compact archive per known model and standard length, found by name.

    shipped("smollm2-135m", 2048)   → Path of attnlab/calibrations/smollm2-135m-2048.safetensors, or None
    catalogue()                     → [(model, n, path)] of every shipped archive
    calibration_for(model, n, methods) → ShippedCalibration(path, archive): read once, checked against the methods

As MInference ships its per-model pattern configurations and DuoAttention its gate files, ``attnlab eval`` reads the
archive of the model and length it runs when ``--calibrate`` is not given (``calibration_for``); the archives are made
by ``attnlab calibrate`` (``benchmarks/recipes/calibrations.sh``), each with the settings its header names.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from attnlab.llm.models.shipped_files import ShippedFiles

__all__ = ["FOLDER", "ShippedCalibration", "calibration_for", "catalogue", "shipped"]

FOLDER = Path(__file__).resolve().parents[2] / "calibrations"   # attnlab/calibrations (package data)
SUFFIX = ".safetensors"


def shipped(model: str, n: int) -> Path | None:
    """The shipped archive of the known model ``model`` at length n, or None."""
    return ShippedFiles(FOLDER, SUFFIX).path(model, int(n))


def catalogue() -> list[tuple[str, int, Path]]:
    """(model, n, path) of every shipped archive, by model then length."""
    out = []
    for stem, path in ShippedFiles(FOLDER, SUFFIX).stems():
        model, _, n = stem.rpartition("-")
        if model and n.isdigit():
            out.append((model, int(n), path))
    return sorted(out)


class ShippedCalibration(NamedTuple):
    """A shipped archive, read once through its schema (``attnlab.schemas.calibration``) before the model loads."""

    path: Path
    archive: object       # ``CalibrationArchive``: its header and tables (``calibration.archive.compact_of``)


def calibration_for(model: str, n: int, methods: list) -> ShippedCalibration:
    """The shipped archive that serves the calibrated ``methods`` (configured ``Method``s) of ``model`` at length n,
    read and checked before the model loads; a one-line UserError naming ``--calibrate`` when none is shipped or it
    lacks what a method measures (MInference's pattern search at its keys, the page ranking at its K, candidates,
    gradients)."""
    from attnlab.errors import UserError
    from attnlab.llm.methods import is_registered
    from attnlab.schemas.calibration import load

    path = shipped(model, n)
    if path is None:
        have = ", ".join(f"{m} at {k}" for m, k, _ in catalogue()) or "none"
        raise UserError(f"--calibrate: needed by --method {', '.join(sorted({m.name for m in methods}))} at n = {n}: "
                        f"attnlab ships no calibration of {model} at that length (shipped: {have}); give a text file")
    archive = load(path, known_method=is_registered)
    h, tables = archive.header, archive.tables
    for m in methods:
        lacks = _lacks(m, n, h, tables)
        if lacks:
            raise UserError(f"--calibrate: the shipped calibration {path.name} holds no {lacks}, which --method "
                            f"{m.name} at β = {m.budget:g} reads; give a calibration text (--calibrate FILE)")
    return ShippedCalibration(path, archive)


def _lacks(method, n: int, header, tables: dict) -> str | None:
    """What of the measurements ``method`` asks for the archive lacks (``calibration.build``'s four), or None."""
    keys = set(method.calibration_pattern_keys(n) or []) - set(header.pattern_keys)
    if keys:
        return f"pattern search at {min(keys)} keys per row"
    K = method.page_ranking_pages
    if K and ("page_ranking" not in tables or int(tables["page_ranking"][0]) != K):
        return f"page ranking at K = {K}"
    if method.needs_retrieval and "retrieval" not in tables:
        return "retrieval scores"
    shape = {"num_layers": header.num_layers, "num_heads": header.num_heads, "num_kv_heads": header.num_kv_heads,
             "windows": header.windows}
    cands = {tuple(c) for c in method.calibration_candidates(shape, n) or []} - {tuple(c) for c in header.candidates}
    if cands:
        return f"candidate supports {sorted(cands)[0]}"
    if method.calibration_grads and "gsq" not in tables:
        return "loss gradients"
    return None

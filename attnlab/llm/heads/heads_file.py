"""The head detectors' scores file (``heads.json``) as the long-input explorer reads it.

Schema (written by the head detectors, ``attnlab heads``):

    {"model": str, "n": int,
     "detectors": {"previous-token": [[score per head] per layer], "duplicate-token": ..., "induction": ...,
                   "sink": ..., "retrieval": ...},
     "thresholds": {detector: float}, "named": [{"layer", "head", "detector", "score"}]}

``read_detector_scores(path, num_layers, num_heads)`` checks it against the captured model's shape
and returns ``DetectorScores``; anything else is a one-line ``UserError`` naming ``--heads``.
A ``heads.json`` without ``detectors`` (the long capture's own table) is ``None`` for
``detector_scores_beside`` (the explorer then shows the capture's statistics only).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnlab.errors import UserError

__all__ = ["DetectorScores", "read_detector_scores", "detector_scores_beside"]


@dataclass(frozen=True)
class DetectorScores:
    """One (num_layers, num_heads) score array per detector, the thresholds and the named heads."""

    model: str
    n: int | None
    scores: dict[str, np.ndarray]                      # detector -> (L, H) float, NaN: not scored
    thresholds: dict[str, float] = field(default_factory=dict)
    named: list[dict] = field(default_factory=list)    # {"layer", "head", "detector", "score"}


def _number(x) -> float:
    if x is None:
        return math.nan
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(repr(x))
    return float(x)


def read_detector_scores(path: str | os.PathLike, num_layers: int, num_heads: int, option: str = "--heads") -> DetectorScores:
    """``DetectorScores`` of ``path`` for a model of ``num_layers`` × ``num_heads`` heads (UserError otherwise)."""
    path = Path(path)
    where = f"{option} {path}"
    if not path.is_file():
        raise UserError(f"{where}: no such file")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{where}: not a JSON file ({type(err).__name__})") from None
    if not isinstance(d, dict) or not isinstance(d.get("detectors"), dict) or not d["detectors"]:
        raise UserError(f"{where}: not a head detectors file (no 'detectors' table)")
    scores = {}
    for name, table in d["detectors"].items():
        try:
            a = np.array([[_number(x) for x in row] for row in table], dtype=np.float64)
        except (TypeError, ValueError):
            raise UserError(f"{where}: detector '{name}': expected [[score per head] per layer] of numbers") from None
        if a.shape != (num_layers, num_heads):
            raise UserError(f"{where}: detector '{name}' has {a.shape[0] if a.ndim else 0} layers × "
                            f"{a.shape[1] if a.ndim == 2 else 0} heads; the captured model "
                            f"has {num_layers} × {num_heads} (made for another model: {d.get('model')!r})")
        scores[str(name)] = a
    th = d.get("thresholds") or {}
    named = d.get("named") or []
    if not isinstance(th, dict) or not isinstance(named, list) or not all(isinstance(x, dict) for x in named):
        raise UserError(f"{where}: 'thresholds' must be a table and 'named' a list of heads")
    try:
        thresholds = {str(k): _number(v) for k, v in th.items()}
    except TypeError:
        raise UserError(f"{where}: 'thresholds' must hold numbers") from None
    n = d.get("n")
    return DetectorScores(str(d.get("model", "")), n if isinstance(n, int) else None, scores, thresholds, named)


def detector_scores_beside(maps_file: str | os.PathLike, num_layers: int, num_heads: int) -> DetectorScores | None:
    """The ``heads.json`` next to ``maps_file`` when it is a detectors file; None when absent or the capture's own table."""
    path = Path(maps_file).parent / "heads.json"
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(d, dict) or "detectors" not in d:
        return None
    return read_detector_scores(path, num_layers, num_heads, option="heads.json")

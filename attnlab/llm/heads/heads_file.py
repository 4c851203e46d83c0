"""``heads.json``: one file format for the heads of a model, written by ``attnlab heads`` and by the capture.

Schema (every key but ``model`` and ``n`` optional)::

    {"model": str, "n": int,                                   # the model; tokens per input
     "detectors": {"previous-token": [[score per head] per layer], "duplicate-token": ..., "induction": ...,
                   "sink": ..., "retrieval": ...},             # the head detectors (``attnlab heads``)
     "thresholds": {detector: float}, "named": [{"layer", "head", "detector", "score"}],
     "heads": [{"layer", "head", "role", "label", "named_by", ...}],  # the capture's per-head statistics
     "summary": {...}, "meta": {...}}

``attnlab heads`` writes the detector tables; ``attnlab attention --file`` writes ``heads`` and ``summary``
and, given ``--heads``, the detector tables copied in (``detector_tables``), so that its folder carries them
and ``--maps`` draws them again.  A head's *label* is the detector that names it (score ≥ threshold), of
several the first in ``PRECEDENCE`` — the most specific mechanism first: induction, retrieval,
duplicate-token, previous-token, then sink, the resting place of a head with nothing to do (104 of
SmolLM2-135M's 270 heads reach its threshold, among them every induction head) — else the capture's
role on the text (``head_label``).

``read_detector_scores(path, num_layers, num_heads)`` checks the detector tables against the captured
model's shape and returns ``DetectorScores``; anything else is a one-line ``UserError`` naming ``--heads``.
A ``heads.json`` without ``detectors`` (a capture made without ``--heads``) is ``None`` for
``detector_scores_beside`` (the explorer then shows the capture's roles only).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnlab.errors import UserError

PRECEDENCE = ("induction", "retrieval", "duplicate-token", "previous-token", "sink")  # a head's label: the first that names it

__all__ = ["PRECEDENCE", "DetectorScores", "read_detector_scores", "detector_scores_beside", "detector_tables", "named_by", "head_label"]


@dataclass(frozen=True)
class DetectorScores:
    """One (num_layers, num_heads) score array per detector, the thresholds and the named heads."""

    model: str
    n: int | None
    scores: dict[str, np.ndarray]                      # detector -> (L, H) float, NaN: not scored
    thresholds: dict[str, float] = field(default_factory=dict)
    named: list[dict] = field(default_factory=list)    # {"layer", "head", "detector", "score"}

    def named_by(self, layer: int, head: int) -> list[tuple[str, float, float]]:
        """[(detector, score, threshold)] of the detectors whose score reaches their threshold at (layer, head),
        in ``PRECEDENCE`` order (other detectors after, furthest above their threshold first)."""
        out = []
        for name, a in self.scores.items():
            th, v = self.thresholds.get(name), float(a[layer, head])
            if th is not None and th > 0 and math.isfinite(v) and v >= th:
                out.append((name, v, th))
        rank = {d: k for k, d in enumerate(PRECEDENCE)}
        return sorted(out, key=lambda x: (rank.get(x[0], len(rank)), -x[1] / x[2]))

    def label(self, layer: int, head: int, role: str) -> str:
        """The name a head is shown by: the first detector of ``named_by``, else the capture's ``role``."""
        named = self.named_by(layer, head)
        return named[0][0] if named else role


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


def detector_tables(det: DetectorScores | None) -> dict:
    """The detector keys of a ``heads.json`` for ``det`` (``{}`` for None); the detectors' own input length as ``detectors_n``."""
    if det is None:
        return {}
    return {"detectors": {k: [[None if not math.isfinite(x) else round(float(x), 6) for x in row] for row in a]
                          for k, a in det.scores.items()},
            "thresholds": dict(det.thresholds), "named": list(det.named), "detectors_n": det.n}


def named_by(det: DetectorScores | None, layer: int, head: int) -> list[tuple[str, float, float]]:
    """``det.named_by(layer, head)``; [] without detectors."""
    return [] if det is None else det.named_by(layer, head)


def head_label(det: DetectorScores | None, layer: int, head: int, role: str) -> str:
    """``det.label(layer, head, role)``; the capture's ``role`` without detectors."""
    return role if det is None else det.label(layer, head, role)

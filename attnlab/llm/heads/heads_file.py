"""``heads.json``: one file format for the heads of a model, written by ``attnlab heads`` and by the capture.

Its schema, versioned and checked in one place, is ``attnlab.schemas.heads_file`` (format ``attnlab-heads/1``)::

    {"format": "attnlab-heads/1", "model": str, "n": int,      # the model; tokens per input
     "detectors": {"previous-token": [[score per head] per layer], "duplicate-token": ..., "induction": ...,
                   "sink": ..., "retrieval": ...},             # the head detectors (``attnlab heads``)
     "thresholds": {detector: float}, "named": [{"layer", "head", "detector", "score"}],
     "heads": [{"layer", "head", "role", "label", "named_by", ...}],  # the capture's per-head statistics
     "summary": {...}, "meta": {...}}

``attnlab heads`` writes the detector tables; ``attnlab attention --file`` writes ``heads`` and ``summary``
and, given ``--heads`` (or for a known model without it, the file attnlab ships: ``shipped_heads``), the detector
tables copied in (``detector_tables``) with ``meta.detectors_file`` naming that file, so that its folder carries
them and ``--maps`` draws them again.  A head's *label* is the detector that names it (score ≥ threshold), of
several the first in ``PRECEDENCE`` — the most specific mechanism first: induction, retrieval,
duplicate-token, previous-token, then sink, the resting place of a head with nothing to do (104 of
SmolLM2-135M's 270 heads reach its threshold, among them every induction head) — else the capture's
role on the text (``head_label``).

``read_detector_scores(path, num_layers, num_heads)`` reads the file through its schema, checks the detector
tables against the captured model's shape and returns ``DetectorScores``; anything else is a one-line
``UserError`` naming ``--heads``.  A ``heads.json`` without ``detectors`` (a capture made without ``--heads``) is
``None`` for ``detector_scores_beside`` (the explorer then shows the capture's roles only).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnlab.errors import UserError

PRECEDENCE = ("induction", "retrieval", "duplicate-token", "previous-token", "sink")  # a label: the first naming it

__all__ = ["PRECEDENCE", "DetectorScores", "read_detector_scores", "detector_scores_beside", "detector_tables",
           "named_by", "head_label"]


@dataclass(frozen=True)
class DetectorScores:
    """One (num_layers, num_heads) score array per detector, the thresholds and the named heads."""

    model: str
    n: int | None
    scores: dict[str, np.ndarray]                      # detector -> (L, H) float, NaN: not scored
    thresholds: dict[str, float] = field(default_factory=dict)
    named: list[dict] = field(default_factory=list)    # {"layer", "head", "detector", "score"}
    source: str | None = None                          # which heads file: said by the explorer and summary.md

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


def read_detector_scores(path: str | os.PathLike, num_layers: int, num_heads: int,
                         option: str = "--heads", source: str | None = None) -> DetectorScores:
    """``DetectorScores`` of ``path`` for a model of ``num_layers`` × ``num_heads`` heads: the file read through its
    schema (``attnlab.schemas.heads_file``: every field, range and cross-field rule), then its tables against the
    captured model's shape; a one-line UserError naming ``option``, the file and the field otherwise.
    ``source``: which heads file to name (default: the one a capture's ``meta.detectors_file`` names, else ``path``)."""
    from attnlab.schemas import heads_file as schema

    d = schema.load(path, option, detectors=True)
    for name, table in d.detectors.items():
        L, H = len(table), len(table[0])
        if (L, H) != (num_layers, num_heads):
            raise UserError(f"{option} {path}: detector '{name}' has {L} layers × {H} heads; the captured model "
                            f"has {num_layers} × {num_heads} (made for another model: {d.model!r})")
    scores = {name: np.array([[math.nan if x is None else x for x in row] for row in table], dtype=np.float64)
              for name, table in d.detectors.items()}
    source = source or d.meta.get("detectors_file") or str(path)
    return DetectorScores(d.model, d.n, scores, dict(d.thresholds), [x.model_dump() for x in d.named], str(source))


def detector_scores_beside(maps_file: str | os.PathLike, num_layers: int, num_heads: int) -> DetectorScores | None:
    """The ``heads.json`` next to ``maps_file`` when it holds the detectors; None when absent or the capture's own
    table alone (a bad file: one UserError line, as for ``--heads``)."""
    from attnlab.schemas import heads_file as schema

    path = Path(maps_file).parent / "heads.json"
    if not path.is_file():
        return None
    if schema.load(path, "heads.json").detectors is None:
        return None
    return read_detector_scores(path, num_layers, num_heads, option="heads.json")


def detector_tables(det: DetectorScores | None) -> dict:
    """The detector keys of a ``heads.json`` for ``det`` (``{}`` for None); the detectors' own input length as
    ``detectors_n``."""
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

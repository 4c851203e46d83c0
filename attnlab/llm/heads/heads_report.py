"""``heads.json`` and ``summary.md``: the detector scores of every head of one model (``attnlab heads``).

heads.json, the detector part of the one format of ``attnlab.llm.heads.heads_file`` (which the capture's
``heads.json`` shares)::

    {"format": "attnlab-heads/1", "model": str, "n": int,
     "detectors": {name: [[score per head] per layer]},      # attnlab.analysis.head_detectors
     "thresholds": {name: float},
     "named": [{"layer": l, "head": h, "detector": name, "score": s}],
     "meta": {...}}                                          # inputs, options, copy accuracy, seconds
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from attnlab.analysis.head_detectors import named_heads
from attnlab.atomic import write_atomic
from attnlab.schemas.heads_file import FORMAT as HEADS_FORMAT

__all__ = ["heads_document", "write_heads", "top_heads"]


def heads_document(model: str, n: int, scores: dict[str, np.ndarray], thresholds: dict[str, float], meta: dict) -> dict:
    """The heads.json document (module docstring)."""
    return {
        "format": HEADS_FORMAT,
        "model": model,
        "n": int(n),
        "detectors": {d: [[None if not np.isfinite(x) else x for x in row]   # not scored (NaN): null, as JSON has it
                          for row in np.round(np.asarray(s, float), 6).tolist()] for d, s in scores.items()},
        "thresholds": {d: float(thresholds[d]) for d in scores},
        "named": named_heads(scores, thresholds),
        "meta": meta,
    }


def top_heads(scores: np.ndarray, k: int) -> list[tuple[int, int, float]]:
    """The k heads of highest score: [(layer, head, score)]."""
    s = np.asarray(scores)
    order = np.argsort(-s.ravel(), kind="stable")[:k]
    return [(int(i // s.shape[1]), int(i % s.shape[1]), float(s.ravel()[i])) for i in order]


def _summary(doc: dict, k: int = 5) -> str:
    lines = [f"# Heads of {doc['model']}", "",
             f"{doc['n']} tokens per input; {doc['meta'].get('command', '')}".rstrip("; "), "",
             "| detector | threshold | named heads | top heads (layer.head score) |", "|---|---|---|---|"]
    for d, s in doc["detectors"].items():
        named = [h for h in doc["named"] if h["detector"] == d]
        top = ", ".join(f"{l}.{h} {v:.3f}" for l, h, v in top_heads(np.array(s, dtype=float), k))
        lines.append(f"| {d} | {doc['thresholds'][d]} | {len(named)} | {top} |")
    lines += ["", "Scores: attention mass on the detector's pattern over the rows' mass "
              "(TransformerLens `detect_head`, `attnlab/analysis/head_detectors.py`)."]
    meta = doc["meta"]
    if "copy_accuracy" in meta:
        lines.append(f"Retrieval on {meta.get('prompts')} needle prompts; the model copied "
                     f"{meta['copy_accuracy']:.0%} of the answer tokens (argmax, teacher forcing).")
    return "\n".join(lines) + "\n"


def write_heads(doc: dict, out: str | Path) -> list[Path]:
    """Write ``out/heads.json`` and ``out/summary.md`` (atomic); returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    j = write_atomic(out / "heads.json", lambda tmp: Path(tmp).write_text(json.dumps(doc, indent=1), encoding="utf-8"))
    s = write_atomic(out / "summary.md", lambda tmp: Path(tmp).write_text(_summary(doc), encoding="utf-8"))
    return [j, s]

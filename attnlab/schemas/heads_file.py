"""``heads.json`` (``attnlab heads``, ``attnlab attention --file``), format ``attnlab-heads/1``: the heads of a model.

    {"format": "attnlab-heads/1", "model": str, "n": n,                       # the model; tokens per input
     "detectors": {name: [[s_lh | null] × H] × L},                            # the head detectors (``attnlab heads``)
     "thresholds": {name: θ}, "named": [{"layer", "head", "detector", "score"}], "detectors_n": n_d | null,
     "heads": [{"layer", "head", "role", "label", "columns": [[j, token, share]], "w", "far>D", ...}],  # the capture
     "summary": {...}, "meta": {...}}                                          # free form: what made it, run figures

The rules: ``detectors`` names from ``DETECTORS``, every table the same L × H (L, H ≥ 1), scores s ∈ [0, 1]
(a share of attention mass; null: not scored); with them ``thresholds`` θ ∈ (0, 1] (a detector without one names
no head) and ``named``: exactly the heads (l, h) whose score (the table's) reaches their detector's threshold.
A capture's head has exactly one far-mass key ``far>D`` (D ≥ 0), columns j < n, w ≥ −1 and num_pos ≥ −1 (−1: no grid
point holds the target).  A file holds the detectors, the capture's table, or both.
Version: a file without ``format`` was written before the tag, in the same layout; it is read as ``attnlab-heads/1``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import Field, model_validator

from attnlab.analysis.detector_names import DETECTORS
from attnlab.errors import UserError
from attnlab.schemas.plan import N_MAX
from attnlab.schemas.schema_file import Strict, parse, read_text, where

__all__ = ["FORMAT", "SLACK", "HeadRow", "HeadsFile", "NamedHead", "load"]

FORMAT = "attnlab-heads/1"
SLACK = 1e-4          # a share of mass may exceed 1 by float rounding, no more
FAR = re.compile(r"far>(\d+)")

Share = float


def _share(x: float | None, what: str) -> None:
    if x is not None and not 0.0 <= x <= 1.0 + SLACK:
        raise ValueError(f"{what}: a share of attention mass in [0, 1], got {x}")


class NamedHead(Strict):
    """A head a detector names: its score reaches the detector's threshold."""

    layer: int = Field(ge=0)
    head: int = Field(ge=0)
    detector: str
    score: float


class NamedBy(Strict):
    """In the capture's table: a detector that names the head, its score and threshold."""

    detector: str
    score: float
    threshold: float


class HeadRow(Strict):
    """One head of the capture: its role on the text, its top columns, the band and columns chosen for the target."""

    layer: int = Field(ge=0)
    head: int = Field(ge=0)
    layer_type: str
    role: str
    label: str
    named_by: list[NamedBy]
    entropy: float = Field(ge=0)
    far_distance: int = Field(ge=0)      # D of the file's key ``far>D``
    far_share: float                     # its value: the share of mass beyond distance D
    reach: int = Field(ge=0)
    columns: list[tuple[int, str, float]]   # [key position j, its token, the share of mass it holds]
    w: int = Field(ge=-1)
    num_pos: int = Field(ge=-1)          # w = num_pos = −1: no (w, num_pos) of the grid holds the target (streamed_fit)
    entries: float | None = Field(ge=0)
    positional: float
    offset: int
    sink: float
    sink_token: str

    @model_validator(mode="before")
    @classmethod
    def _far(cls, row: Any) -> Any:
        """The key ``far>D`` (its name holds the distance D) as ``far_distance`` = D, ``far_share`` = its value."""
        if not isinstance(row, dict):
            return row
        far = [k for k in row if FAR.fullmatch(k)]
        if len(far) != 1:
            raise ValueError(f"a head row holds one key far>D (the share of mass beyond distance D), got "
                             f"{far or 'none'}")
        row = dict(row)
        cols = row.get("columns")   # JSON has no tuples: each [j, token, share] read as one, its items still strict
        if isinstance(cols, list):
            row["columns"] = [tuple(c) if isinstance(c, list) else c for c in cols]
        share = row.pop(far[0])
        return {**row, "far_distance": int(FAR.fullmatch(far[0]).group(1)), "far_share": share}

    @model_validator(mode="after")
    def _shares(self) -> HeadRow:
        _share(self.far_share, "field far_share")
        for k, (j, _, share) in enumerate(self.columns):
            if j < 0:
                raise ValueError(f"field columns.{k}: a key position >= 0, got {j}")
            _share(share, f"field columns.{k}")
        return self


class HeadsFile(Strict):
    """A ``heads.json`` (module docstring)."""

    format: Literal["attnlab-heads/1"]
    model: str = Field(min_length=1)
    n: int = Field(ge=1, le=N_MAX)
    detectors: dict[str, list[list[Share | None]]] | None = None
    thresholds: dict[str, float] | None = None
    named: list[NamedHead] | None = None
    detectors_n: int | None = Field(None, ge=1, le=N_MAX)
    heads: list[HeadRow] | None = None
    summary: dict[str, Any] | None = None
    meta: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _version(cls, doc: Any) -> Any:
        """A file written before the ``format`` tag: the same layout, read as ``attnlab-heads/1``."""
        return {"format": FORMAT, **doc} if isinstance(doc, dict) and "format" not in doc else doc

    @model_validator(mode="after")
    def _tables(self) -> HeadsFile:
        if self.detectors is None and self.heads is None:
            raise ValueError("neither 'detectors' (attnlab heads) nor 'heads' (the capture's table): not a heads file")
        for key in ("thresholds", "named"):          # the detectors' parts: with them, and only with them
            if (getattr(self, key) is None) != (self.detectors is None):
                raise ValueError(f"field {key}: required with 'detectors'" if self.detectors is not None
                                 else f"field detectors: required with '{key}'")
        if self.detectors is not None:
            self._check_detectors()
        for k, row in enumerate(self.heads or []):
            beyond = [j for j, _, _ in row.columns if j >= self.n]
            if beyond:
                raise ValueError(f"field heads.{k}.columns: key {beyond[0]} beyond the n = {self.n} tokens")
        return self

    def _check_detectors(self) -> None:
        if not self.detectors:
            raise ValueError("field detectors: holds no detector")
        shape = None
        for name, table in self.detectors.items():
            if name not in DETECTORS:
                raise ValueError(f"field detectors.{name}: not a detector ({', '.join(DETECTORS)})")
            L, widths = len(table), {len(row) for row in table}
            if not L or len(widths) != 1 or 0 in widths:
                raise ValueError(f"field detectors.{name}: [[score per head] per layer], every layer the same "
                                 f"number of heads >= 1, got {L} layers of {sorted(widths)} heads")
            if shape is not None and (L, *widths) != shape:
                raise ValueError(f"field detectors.{name}: {L} × {widths.pop()} heads, the other detectors "
                                 f"{shape[0]} × {shape[1]}")
            shape = (L, *widths)
            for l, row in enumerate(table):
                for h, s in enumerate(row):
                    _share(s, f"field detectors.{name}.{l}.{h}")
        for name, th in self.thresholds.items():
            if name not in self.detectors:
                raise ValueError(f"field thresholds.{name}: a threshold of no detector of the file")
            if not 0 < th <= 1:
                raise ValueError(f"field thresholds.{name}: a share of attention mass in (0, 1], got {th}")
        for k, x in enumerate(self.named):
            if x.detector not in self.detectors:
                raise ValueError(f"field named.{k}.detector: {x.detector!r} is no detector of the file")
            for part, v, top in (("layer", x.layer, shape[0]), ("head", x.head, shape[1])):
                if v >= top:
                    raise ValueError(f"field named.{k}.{part}: {v} outside the {shape[0]} × {shape[1]} heads of the "
                                     "detectors")
            s, th = self.detectors[x.detector][x.layer][x.head], self.thresholds.get(x.detector)
            if s is None or abs(x.score - s) > 1e-6:
                raise ValueError(f"field named.{k}.score: {x.score}, the table's score of head ({x.layer}, {x.head}) "
                                 f"is {s}")
            if th is None or x.score < th:
                why = "it has no threshold" if th is None else f"its threshold {th} is above the score"
                raise ValueError(f"field named.{k}: {x.detector} does not name head ({x.layer}, {x.head}): {why}")
        reach = {(d, l, h) for d, th in self.thresholds.items() for l, row in enumerate(self.detectors[d])
                 for h, s in enumerate(row) if s is not None and s >= th}
        missing = sorted(reach - {(x.detector, x.layer, x.head) for x in self.named})
        if missing:
            d, l, h = missing[0]
            raise ValueError(f"field named: head ({l}, {h}) reaches the threshold of {d} and is not named "
                             f"(named: every head whose score reaches its detector's threshold)")


def load(path, option: str | None = None, detectors: bool = False) -> HeadsFile:
    """The ``heads.json`` ``path`` through ``HeadsFile``; with ``detectors``, one that holds the detector tables (what
    ``--heads`` draws).  One UserError line naming the file, the field and the rule otherwise."""
    name = where(path, option)
    text = read_text(path, option, "heads file")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{name}: not a heads file (JSON error at line {err.lineno}: {err.msg})") from None
    if detectors and isinstance(doc, dict) and "detectors" not in doc:
        raise UserError(f"{name}: not a head detectors file (no 'detectors' table; `attnlab heads` writes one)")
    return parse(doc, HeadsFile, name)

"""A plan file (``attnlab plan``, ``Plan.save``), format ``attnlab-plan/2``: one structured support per (layer, head).

    {"format": "attnlab-plan/2", "num_layers": L, "num_heads": H, "num_kv_heads": H_kv, "method": NAME,
     "budget": β, "n": n, "fraction": f, "full_heads": F, "meta": {...}, "windows": [W_l | null] | null,
     "pages": K, "page": p, "mean_pages": k, "decode_band": c, "group_vote": 0 | 1,
     "heads": [[{"w": w, "offset": 0, "columns": [t, ...], "residual": 0, "dynamic": D,
                 "tail": T, "slashes": s, "blocks": K_b, "kept": P, "vote_next": v} × H] × L]}

The rules, each checked here once (``Plan.load`` reads a file only through ``load``):

* H is a multiple of H_kv (a KV head serves H / H_kv query heads); the head table is L rows of H heads;
* β ∈ (0, 1]; n ≥ 1, the length the budget and the columns refer to; ``method`` a registered method or preset
  (or parts the registry composes);
* a head: w ≥ −1 (−1: full), offset 0 and residual 0 (the only band executed: causal, ending on the diagonal),
  distinct columns 0 ≤ t < n, |T| + D ≤ n, w + 1 ≤ n, tail, kept and slashes ≤ n; kept > 0 only with a tail,
  vote_next > 0 only with kept;
* a sliding layer (window W): its heads are bands 0 ≤ w ≤ W − 1 alone (``cap_to_window``: what a plan runs there);
* pages K ∈ [0, PAGES_MAX], page ∈ [1, PAGE_MAX], mean_pages ∈ [0, K], decode_band c ∈ [0, DECODE_BAND_MAX],
  group_vote 0 or 1 — every count a JSON integer (``1.0`` and ``true`` refused).

Every key is required: a key deleted is refused, never defaulted (a head's ``w`` or ``columns`` as much as its
``tail``).  ``fraction`` and ``full_heads`` are derived (what the plan keeps, for a reader of the file): typed and
ranged, not read.

Versions: ``attnlab-plan/1`` (the files written before this one) left out the parts that were 0 (a head's tail,
slashes, blocks, kept, vote_next; the plan's pages, mean_pages, decode_band, group_vote) and page when 16; such a file
is read through ``migrate_v1``, which writes them in as its writer meant them.  Its other keys were always written,
and are required as in version 2.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from attnlab.llm.plans.limits import BLOCKS_MAX, VOTE_NEXT_MAX
from attnlab.schemas.schema_file import Strict, load_json

__all__ = ["DECODE_BAND_MAX", "FORMAT", "FORMATS", "N_MAX", "PAGES_MAX", "PAGE_MAX", "SLASHES_MAX", "HeadFile",
           "PlanFile", "load", "migrate_v1"]

FORMAT = "attnlab-plan/2"
FORMATS = ("attnlab-plan/1", FORMAT)   # every version read (the older through ``migrate_v1``)
V1_HEAD = {"tail": 0, "slashes": 0, "blocks": 0, "kept": 0, "vote_next": 0}            # what version 1 left out
V1_PLAN = {"pages": 0, "page": 16, "mean_pages": 0, "decode_band": 0, "group_vote": 0}
N_MAX = 1 << 24             # tokens a plan may refer to (a sanity bound: 16 M)
PAGES_MAX = 10**6           # pages read back per decoding query (a sanity bound: 16·10⁶ tokens)
PAGE_MAX = 1024             # tokens per page
SLASHES_MAX = 10**4         # slash lines per head (a sanity bound)
DECODE_BAND_MAX = 10**7     # keys a planned head's band keeps at decoding

Count = int   # a JSON integer ≥ 0 (the bounds are the fields')


class HeadFile(Strict):
    """One head: S = B_{w,0} ∪ (rows × T) plus the parts chosen per input (``HeadPlan``)."""

    w: int = Field(ge=-1)                   # band half-width; −1: the full head
    offset: int                             # the band's diagonal offset: 0 only
    columns: list[Count]                    # T: fixed key columns (sinks), distinct, < n
    residual: int                           # R: 0 only
    dynamic: Count = Field(ge=0)            # columns chosen per input
    tail: Count = Field(ge=0)               # last rows reading every key
    slashes: Count = Field(ge=0, le=SLASHES_MAX)
    blocks: Count = Field(ge=0, le=BLOCKS_MAX)
    kept: Count = Field(ge=0)               # keys voted by the tail rows, kept at decoding
    vote_next: Count = Field(ge=0, le=VOTE_NEXT_MAX)   # blocks after a voted block counted in its vote

    @field_validator("offset", "residual")
    @classmethod
    def _zero(cls, x: int) -> int:
        if x != 0:
            raise ValueError(f"must be 0 (only a causal band ending on the diagonal is executed), got {x}")
        return x

    @field_validator("columns")
    @classmethod
    def _distinct(cls, cols: list[int]) -> list[int]:
        if any(c < 0 for c in cols) or len(set(cols)) != len(cols):
            raise ValueError(f"must be distinct key positions >= 0, got {cols}")
        return cols

    @model_validator(mode="after")
    def _parts(self) -> HeadFile:
        if self.kept and not self.tail:
            raise ValueError(f"kept {self.kept} > 0 only with a tail (the tail rows vote the kept keys)")
        if self.vote_next and not self.kept:
            raise ValueError(f"vote_next {self.vote_next} > 0 only with kept (it counts in the vote of kept keys)")
        return self


class PlanFile(Strict):
    """A plan file (module docstring)."""

    format: Literal["attnlab-plan/2"]
    num_layers: int = Field(ge=1)
    num_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    method: str
    budget: float = Field(gt=0, le=1)
    n: int = Field(ge=1, le=N_MAX)
    fraction: float | None = Field(ge=0)    # derived: entries kept / causal entries at n
    full_heads: int = Field(ge=0)           # derived: heads left full
    meta: dict[str, Any]                    # how the plan was made (free form)
    windows: list[int | None] | None        # per layer: the sliding window (null: a full layer)
    pages: int = Field(ge=0, le=PAGES_MAX)
    page: int = Field(ge=1, le=PAGE_MAX)
    mean_pages: int = Field(ge=0)
    decode_band: int = Field(ge=0, le=DECODE_BAND_MAX)
    group_vote: int = Field(ge=0, le=1)     # 0 or 1 (an int: ``1.0`` and ``true`` refused)
    heads: list[list[HeadFile]]

    @model_validator(mode="before")
    @classmethod
    def _version(cls, doc: Any) -> Any:
        """A version-1 file through ``migrate_v1``; every other document as it is."""
        return migrate_v1(doc) if isinstance(doc, dict) and doc.get("format") == FORMATS[0] else doc

    @field_validator("method")
    @classmethod
    def _registered(cls, name: str, info: ValidationInfo) -> str:
        """Where the caller knows the registry (``load(..., known_method=methods.is_registered)``), a name it lacks
        is refused; the plan record itself does not import the methods that make plans."""
        known = (info.context or {}).get("known_method")
        if known is not None and not known(name):
            raise ValueError(f"{name!r} is not a registered method, preset or composition of parts "
                             "(`attnlab methods --all` lists them)")
        return name

    @field_validator("windows")
    @classmethod
    def _windows(cls, windows: list[int | None] | None) -> list[int | None] | None:
        bad = [w for w in windows or [] if w is not None and w < 1]
        if bad:
            raise ValueError(f"a sliding window holds >= 1 key, got {bad[0]}")
        return windows

    @model_validator(mode="after")
    def _shape(self) -> PlanFile:
        L, H, n = self.num_layers, self.num_heads, self.n
        if H % self.num_kv_heads:
            raise ValueError(f"field num_kv_heads: num_heads {H} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.mean_pages > self.pages:
            raise ValueError(f"field mean_pages: must be in [0, pages = {self.pages}], got {self.mean_pages}")
        if len(self.heads) != L:
            raise ValueError(f"field heads: {len(self.heads)} layers, num_layers is {L}")
        if self.windows is not None and len(self.windows) != L:
            raise ValueError(f"field windows: {len(self.windows)} entries for num_layers {L}")
        for l, row in enumerate(self.heads):
            if len(row) != H:
                raise ValueError(f"field heads.{l}: {len(row)} heads, num_heads is {H}")
            window = None if self.windows is None else self.windows[l]
            for h, head in enumerate(row):
                _fits(head, f"heads.{l}.{h}", n, window)
        return self


def _fits(head: HeadFile, where: str, n: int, window: int | None) -> None:
    """A head's parts against the plan's length n and its layer's sliding window (ValueError naming the field)."""
    beyond = [c for c in head.columns if c >= n]
    if beyond:
        raise ValueError(f"field {where}.columns: column {beyond[0]} beyond the {n} keys of a window of n = {n}")
    if len(head.columns) + head.dynamic > n:
        raise ValueError(f"field {where}.dynamic: {len(head.columns)} + {head.dynamic} dynamic columns beyond the "
                         f"{n} keys of a window of n = {n}")
    for name, x in (("w", head.w), ("tail", head.tail), ("kept", head.kept), ("slashes", head.slashes)):
        if x + (name == "w") > n:   # the band's w + 1 keys, the tail rows, the kept keys, the slash lines: at most n
            raise ValueError(f"field {where}.{name}: {name} {x} beyond the {n} tokens of a window of n = {n}")
    if window is not None:
        extra = [k for k in ("columns", "dynamic", "tail", "slashes", "blocks", "kept") if getattr(head, k)]
        if not 0 <= head.w <= window - 1 or extra:
            raise ValueError(f"field {where}: a head of a sliding layer (window {window}) is a band 0 <= w <= "
                             f"{window - 1} alone, got w {head.w}" + (f" with {', '.join(extra)}" if extra else ""))


def migrate_v1(doc: dict) -> dict:
    """An ``attnlab-plan/1`` document as version 2: the parts its writer left out when 0 (``V1_PLAN``, ``V1_HEAD``:
    page 16) written in; nothing else changed (a key it always wrote and the file lacks stays missing: refused)."""
    heads = doc.get("heads")
    if isinstance(heads, list) and all(isinstance(row, list) for row in heads):
        heads = [[{**V1_HEAD, **h} if isinstance(h, dict) else h for h in row] for row in heads]
    return {**V1_PLAN, **doc, "format": FORMAT, **({"heads": heads} if "heads" in doc else {})}


def load(path, option: str | None = None, known_method=None) -> PlanFile:
    """The plan file ``path`` through ``PlanFile``; one UserError line naming the file, the field and the rule
    (``known_method``: the registry's test of a method name, ``attnlab.llm.methods.is_registered``)."""
    return load_json(path, PlanFile, option, what="plan file", context={"known_method": known_method})

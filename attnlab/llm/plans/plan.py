"""A per-head plan of a real LLM: one structured support per (layer, head), its data and its JSON.

    plan[l][h] = FULL                                   (the head keeps every causal entry)
               | S_lh = B_{w,0} ∪ (rows × (T_fixed ∪ T_dyn(x))) ∪ D(x)     (D(x): prefill only)

* B_{w,0}: the causal band j ∈ [i − w, i] (offset 0: a causal LM's band ends on the diagonal);
* T_fixed: key positions that are columns in most calibration windows — the attention sinks
  (positions < ``SINKS``), stored in the plan;
* T_dyn(x): ``dynamic`` further columns chosen *per input* as MInference does: the keys with the
  largest attention mass from the last ``LAST_Q`` queries (``attention.estimate_columns``);
* D(x) = {(i, j) : j − i ∈ Δ(x)}: ``slashes`` diagonals δ < −w (beyond the band) chosen *per input* at the
  prefill as MInference's slash lines: the offsets of largest mass Σ_r â_{r, p_r + δ} from the same last
  queries, over the keys the head's columns do not hold (``attention.LayerRunner.choose_slashes``,
  ``attnlab.llm.plans.slash_lines``).  Prefill only: decoding reads band + columns (+ tail) as before.

A plan's cost is its entries: |B_w ∩ causal| = n(w+1) − w(w+1)/2 plus ≤ n − w − 1 per column and per slash
line (``entries_of``); its budget β is a fraction of the causal entries L·H·n(n+1)/2 of all heads.
Where a plan comes from: ``attnlab.llm.calibration.statistics`` (statistics of the exact attention on text),
``attnlab.llm.plans.selection`` (``choose_plan``: the knapsack under the budget), the baselines
(``attnlab.llm.plans.baselines``); how it runs: ``attnlab.llm.execution.attention`` (prefill) and
``attnlab.llm.execution.kv_cache`` (decoding).

Read-back (``Plan.pages`` = K > 0, pages of ``Plan.page`` tokens): at decoding, every planned head (not
full, no tail, not in a sliding layer) also reads the K pages of largest Quest bound U_P(q) (``mean_pages`` of them
by the mean key's score) among the pages
holding keys its band and columns do not reach; the keys its cache evicts go to a store (on the cache's device)
(``attnlab.llm.execution.pages``, ``attnlab.llm.execution.kv_cache``).  The prefill is unchanged; K = 0 (old plan
files): none.

A plan is saved as JSON (``Plan.save``), normally next to the model; ``Plan.check(model)``
refuses a plan made for another model.
"""

from __future__ import annotations

import json
from dataclasses import KW_ONLY, dataclass, field, replace
from pathlib import Path

import numpy as np

from attnlab.atomic import write_text_atomic
from attnlab.errors import UserError
from attnlab.llm.plans.key_blocks import BLOCK
from attnlab.llm.plans.limits import check_budget  # β ∈ (0, 1], checked before torch loads
from attnlab.schemas.plan import DECODE_BAND_MAX, PAGE_MAX, PAGES_MAX, SLASHES_MAX  # the plan file's ranges
from attnlab.schemas.plan import FORMAT as PLAN_FORMAT
from attnlab.support import FULL, Support

__all__ = ["FULL", "LAST_Q", "SINKS", "SLASHES_MAX", "HeadPlan", "Plan", "cap_to_window", "check_budget", "check_pages",
           "entries_of", "head_entries", "layer_windows", "model_shape", "slash_fraction", "with_slashes"]

SINKS = 4          # key positions 0..SINKS−1 may be fixed columns (attention sinks)
LAST_Q = 64        # queries that estimate an input's columns (MInference's last_q)



def check_pages(pages, page) -> tuple[int, int]:
    """(K, page): K ∈ [0, PAGES_MAX] pages read back per decoding query, page ∈ [1, PAGE_MAX] tokens each."""
    for name, x, lo, hi in (("pages", pages, 0, PAGES_MAX), ("page", page, 1, PAGE_MAX)):
        if isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi:
            raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {x!r}")
    return pages, page


def model_shape(model) -> dict:
    """(layers, query heads, KV heads, d_k, per-layer sliding windows) of a transformers causal LM, from its config."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    H = int(cfg.num_attention_heads)
    return {
        "num_layers": int(cfg.num_hidden_layers),
        "num_heads": H,
        "num_kv_heads": int(getattr(cfg, "num_key_value_heads", None) or H),
        "head_dim": int(getattr(cfg, "head_dim", None) or cfg.hidden_size // H),
        "windows": layer_windows(cfg),
    }


def layer_windows(cfg) -> list[int | None] | None:
    """Each layer's sliding window (keys j with i − j < window; None: a full layer), or None if no layer slides.

    From ``config.layer_types`` ("sliding_attention") and ``config.sliding_window`` (Gemma-3: 512 on 5 of 6 layers).
    """
    types = getattr(cfg, "layer_types", None)
    window = getattr(cfg, "sliding_window", None)
    if not types or not window or "sliding_attention" not in types:
        return None
    return [int(window) if t == "sliding_attention" else None for t in types]


def entries_of(w: int, columns: int, dynamic: int, n: int, slashes: int = 0, blocks: int = 0) -> int:
    """Causal entries of band B_w plus columns, slash lines and key blocks at length n (counted off the band, an
    upper bound).

        |B_w ∩ causal| = Σ_i (min(i, w) + 1) = n(w+1) − w(w+1)/2   (w < n),
        a column adds ≤ n − w − 1 rows, a diagonal δ < −w adds n − |δ| ≤ n − w − 1 entries,
        K key blocks per query block add ≤ K·b keys to each of the n − w − 1 rows that have keys off the band.
    """
    if w == FULL or w >= n - 1:
        return n * (n + 1) // 2
    band = n * (w + 1) - w * (w + 1) // 2
    return min(n * (n + 1) // 2, band + (columns + dynamic + slashes + blocks * BLOCK) * max(0, n - w - 1))


def tail_entries(w: int, tail: int, n: int) -> int:
    """Entries the last ``tail`` rows add beyond the band: Σ_{i = n−T}^{n−1} ((i + 1) − min(i + 1, w + 1))."""
    if w == FULL or tail <= 0:
        return 0
    i = np.arange(max(0, n - tail), n)
    return int(((i + 1) - np.minimum(i + 1, w + 1)).sum())


def head_entries(w: int, columns: int, dynamic: int, n: int, window: int | None = None, slashes: int = 0,
                 blocks: int = 0) -> int:
    """Entries a head runs at length n: ``entries_of``, or in a sliding layer (window W) the band
    B_{min(w, W−1)} alone (FULL → W − 1; the model masks every key with i − j ≥ W, columns and slashes
    included)."""
    if window is None:
        return entries_of(w, columns, dynamic, n, slashes, blocks)
    return entries_of(window - 1 if w == FULL else min(w, window - 1), 0, 0, n)


def cap_to_window(head: "HeadPlan", window: int | None) -> "HeadPlan":
    """A sliding layer's head: its band capped at the window, no columns nor slashes (they would fall outside it)."""
    if window is None:
        return head
    w = window - 1 if head.is_full else min(head.w, window - 1)
    if w == head.w and not head.columns and not head.dynamic and not head.tail and not head.slashes and not head.blocks:
        return head
    return HeadPlan(support=Support(w=int(w), columns=np.zeros(0, dtype=np.int64)))


def slash_fraction(windows: list | None, num_layers: int, num_heads: int, slashes: int, n: int) -> float:
    """What ``slashes`` lines on every head of the layers without a sliding window may cost, as a fraction of the
    causal entries L·H·n(n+1)/2: s·(n − 1) per head (a line δ < −w holds ≤ n − w − 1 ≤ n − 1 entries;
    the bound the methods take from β before the knapsack, since they do not yet know each head's w)."""
    free = sum(1 for w in (windows or [None] * num_layers) if w is None)
    return free * num_heads * slashes * max(0, n - 1) / (num_layers * num_heads * n * (n + 1) / 2)


def with_slashes(plan: "Plan", slashes: int) -> "Plan":
    """``plan`` with ``slashes`` lines on every planned head (not full, not in a sliding layer, no key blocks: those
    read far keys per query block already); in place, returned."""
    for l, row in enumerate(plan.heads):
        if plan.window(l) is None:
            plan.heads[l] = [h if h.is_full or h.blocks else replace(h, slashes=int(slashes)) for h in row]
    return plan


@dataclass(frozen=True)
class HeadPlan:
    """One head: its support (band w, fixed columns), ``dynamic`` columns chosen per input, ``tail`` and ``slashes``.

    ``slashes`` = s > 0: at the prefill the head also reads the s diagonals δ < −w of largest mass from the last
    ``LAST_Q`` queries, chosen per input (``attnlab.llm.plans.slash_lines``); decoding does not read them (prefill
    only).
    ``tail`` = T > 0: the last T query rows of a prefill read every causal key, and at decoding the head
    reads its whole cache — a retrieval head's support: the rows that ask (the question, the answer) see
    the whole context, the others their band (``tail_entries``).
    ``blocks`` = K > 0: at the prefill each block of ``BLOCK`` queries also reads the K blocks of ``BLOCK`` keys of
    largest pooled score, chosen per input (``attnlab.llm.plans.key_blocks``) — a head whose every row may need a
    far key (multi-key needles), not only the rows that ask.  Prefill only, as slash lines: at decoding the head
    reads its whole cache if it has a tail (a retrieval head), else what its band and columns hold (its cache stays
    compressed).
    ``kept`` = P > 0 (with a tail): the vote's size (the option ``tail_keep``; ``LayerPlan.vote_size``, not the cache's
    eviction decision ``keep``): at decoding the head reads, instead of its whole cache, its band, its columns and
    the P keys of largest attention mass Σ_{i in the tail} a_ij from its tail rows (the voted keys: SnapKV's vote,
    cast by the rows that ask; ``LayerRunner.prefill``), so its KV head's cache stays compressed too.
    ``vote_next`` = s > 0 (with ``kept``): a block's vote also counts the mass of the s blocks before it,
    V_J = Σ_{u=0…s} m_{J−u} — a needle's value follows the words the question finds, and the block after them
    keeps it where the value starts a new block.
    """

    support: Support
    _: KW_ONLY               # the rest by name: HeadPlan(support=…, dynamic=D, tail=T, slashes=s, blocks=K, …)
    dynamic: int = 0
    tail: int = 0
    slashes: int = 0
    blocks: int = 0
    kept: int = 0
    vote_next: int = 0

    @classmethod
    def full(cls) -> "HeadPlan":
        return cls(support=Support.full())

    @property
    def is_full(self) -> bool:
        return int(self.support.w) == FULL

    @property
    def w(self) -> int:
        return int(self.support.w)

    @property
    def columns(self) -> list[int]:
        return [int(c) for c in np.asarray(self.support.columns).reshape(-1) if c >= 0]

    def entries(self, n: int) -> int:
        return (entries_of(self.w, len(self.columns), self.dynamic, n, self.slashes, self.blocks)
                + tail_entries(self.w, self.tail, n))

    def to_dict(self) -> dict:
        """The head in a plan file (``attnlab.schemas.plan.HeadFile``): every part, 0 included."""
        parts = {"dynamic": self.dynamic, "tail": self.tail, "slashes": self.slashes, "blocks": self.blocks,
                 "kept": self.kept, "vote_next": self.vote_next}
        return {**self.support.to_dict(), **{k: int(x) for k, x in parts.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "HeadPlan":
        """One head of a plan file, read through its schema (``attnlab.schemas.plan.HeadFile``); ValueError naming
        the field and the rule otherwise."""
        from pydantic import ValidationError

        from attnlab.schemas.plan import HeadFile
        from attnlab.schemas.schema_file import first_error

        try:
            return cls.from_file(HeadFile.model_validate(d))
        except ValidationError as err:
            raise ValueError(f"head plan: {first_error(err)}") from None

    @classmethod
    def from_file(cls, head) -> "HeadPlan":
        """A head of a plan file, as its schema read it (``attnlab.schemas.plan.HeadFile``: every rule checked)."""
        support = Support(w=head.w, columns=np.asarray(head.columns, dtype=np.int64).reshape(-1))
        return cls(support=support, dynamic=head.dynamic, tail=head.tail, slashes=head.slashes, blocks=head.blocks,
                   kept=head.kept, vote_next=head.vote_next)


@dataclass
class Plan:
    """A table of head plans ``heads[layer][head]`` for one model shape, with how it was made."""

    heads: list[list[HeadPlan]]
    num_kv_heads: int
    method: str = "attnlab"
    budget: float = 1.0
    n: int = 0                       # the length the budget refers to
    meta: dict = field(default_factory=dict)
    windows: list | None = None      # per layer: the model's sliding window (None: full layer); None: no layer slides
    pages: int = 0                   # K: pages a planned head reads back per decoding query (0: none)
    page: int = 16                   # tokens per page (``attnlab.llm.execution.pages.PAGE``)
    mean_pages: int = 0              # k ≤ K of them chosen by the mean key's score (``pages.choose_pages``)
    decode_band: int = 0             # c: at decoding a planned head's band reads (its cache keeps) ≤ c keys (0: w)
    group_vote: int = 0              # 1: the voting heads of a KV group cast one vote, P keys a group (0: a head)

    def __post_init__(self):
        check_pages(self.pages, self.page)
        c = self.decode_band
        if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= DECODE_BAND_MAX:
            raise ValueError(f"decode_band must be an integer in [0, {DECODE_BAND_MAX}], got {c!r}")
        if self.group_vote not in (0, 1) or isinstance(self.group_vote, bool):
            raise ValueError(f"group_vote must be 0 or 1, got {self.group_vote!r}")
        k = self.mean_pages
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= self.pages:
            raise ValueError(f"mean_pages must be an integer in [0, pages = {self.pages}], got {self.mean_pages!r}")
        # a sliding layer never gets more than its window: its heads are capped here, for every way of making a plan
        if self.windows is not None:
            if len(self.windows) != len(self.heads):
                raise ValueError(f"windows: {len(self.windows)} entries for {len(self.heads)} layers")
            self.windows = [None if w is None else int(w) for w in self.windows]
            self.heads = [[cap_to_window(h, win) for h in row] for row, win in zip(self.heads, self.windows)]

    def window(self, layer: int) -> int | None:
        return None if self.windows is None else self.windows[layer]

    @property
    def num_layers(self) -> int:
        return len(self.heads)

    @property
    def num_heads(self) -> int:
        return len(self.heads[0]) if self.heads else 0

    @classmethod
    def full(cls, shape: dict, n: int = 0) -> "Plan":
        heads = [[HeadPlan.full() for _ in range(shape["num_heads"])] for _ in range(shape["num_layers"])]
        return cls(heads, shape["num_kv_heads"], "full", 1.0, n, windows=shape.get("windows"))

    @classmethod
    def uniform(cls, shape: dict, head: HeadPlan, method: str, budget: float = 1.0, n: int = 0) -> "Plan":
        """Every head the same plan (StreamingLLM's sinks + window)."""
        heads = [[head for _ in range(shape["num_heads"])] for _ in range(shape["num_layers"])]
        return cls(heads, shape["num_kv_heads"], method, budget, n, windows=shape.get("windows"))

    def fraction(self, n: int | None = None) -> float:
        """Entries kept / causal entries of all heads at length n (an upper bound for dynamic columns).

        A sliding layer's head counts the band it runs (≤ its window, ``head_entries``); the denominator
        is every head's n(n+1)/2, so the model's own attention (``Plan.full``) is below 1 when layers slide.
        """
        n = n or self.n
        total = self.num_layers * self.num_heads * n * (n + 1) // 2
        return sum(head_entries(h.w, len(h.columns), h.dynamic, n, self.window(l), h.slashes, h.blocks)
                   + tail_entries(h.w, h.tail, n)
                   for l, row in enumerate(self.heads) for h in row) / total

    def full_heads(self) -> int:
        return sum(h.is_full for row in self.heads for h in row)

    def block_heads(self) -> int:
        """Heads that read key blocks chosen per query block at the prefill (planned; a sliding layer's heads hold none,
        ``cap_to_window``)."""
        return sum(bool(h.blocks) and not h.is_full for row in self.heads for h in row)

    def slash_heads(self) -> int:
        """Heads that read slash lines at the prefill (planned, not in a sliding layer)."""
        return sum(bool(h.slashes) and not h.is_full for row in self.heads for h in row)

    def shape(self) -> dict:
        return {"num_layers": self.num_layers, "num_heads": self.num_heads, "num_kv_heads": self.num_kv_heads}

    def check(self, model=None, name: str = "plan", n: int | None = None) -> "Plan":
        """UserError unless the plan has the model's layer, head and KV-head counts and sliding windows, and
        (``n``: the length it is run at, ``check_length``) was made for that length."""
        if n is not None:
            self.check_length(n, name)
        if model is None:
            return self
        got = model_shape(model)
        mine = self.shape()
        diff = [f"{k} {mine[k]} vs {got[k]}" for k in mine if mine[k] != got[k]]
        if diff:
            raise UserError(f"{name}: made for another model ({', '.join(diff)} in the model)")
        if self.windows != got["windows"]:   # a plan without windows for a model whose layers slide too
            raise UserError(f"{name}: made for another model (sliding windows {self.windows} vs {got['windows']} "
                            "in the model)")
        return self

    def check_length(self, n: int, name: str = "plan") -> "Plan":
        """UserError unless the plan runs at its own length n (its budget and columns refer to it) and every
        head's columns (fixed + dynamic) fit in n keys."""
        if self.n and self.n != n:
            raise UserError(f"{name}: made for n = {self.n} tokens, run at --n {n} "
                            f"({100 * self.fraction(self.n):.1f} % of the entries at n = {self.n}, "
                            f"{100 * self.fraction(n):.1f} % at n = {n}); "
                            f"make a plan with --n {n} or run at --n {self.n}")
        for l, row in enumerate(self.heads):
            for h, head in enumerate(row):
                beyond = [c for c in head.columns if c >= n]
                if beyond or len(head.columns) + head.dynamic > n:
                    what = f"column {beyond[0]}" if beyond else f"{len(head.columns)} + {head.dynamic} dynamic columns"
                    raise UserError(f"{name}: layer {l} head {h}: {what} beyond the {n} keys of a window of n = {n}")
                parts = (("tail", head.tail), ("kept", head.kept), ("slashes", head.slashes), ("w", head.w + 1))
                for what, rows in parts:
                    if rows > n:   # tail rows, kept keys, slash lines, the band's w + 1 keys: each at most n
                        raise UserError(f"{name}: layer {l} head {h}: {what} {rows - (what == 'w')} beyond the "
                                        f"{n} tokens of a window of n = {n}")
        return self

    def to_dict(self) -> dict:
        """The plan file (``attnlab.schemas.plan``, its ``FORMAT``): every key written, 0 included."""
        return {
            "format": PLAN_FORMAT, **self.shape(), "method": self.method, "budget": self.budget, "n": self.n,
            "fraction": self.fraction() if self.n else None, "full_heads": self.full_heads(), "meta": self.meta,
            "windows": self.windows, "pages": self.pages, "page": self.page, "mean_pages": self.mean_pages,
            "decode_band": self.decode_band, "group_vote": self.group_vote,
            "heads": [[h.to_dict() for h in row] for row in self.heads],
        }

    def save(self, path) -> Path:
        return write_text_atomic(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path, option: str | None = None, known_method=None) -> "Plan":
        """The plan file ``path`` (``option``: the option that named it), read through its schema
        (``attnlab.schemas.plan``: every field, range and cross-field rule); one UserError line naming the file,
        the field and the rule otherwise."""
        from attnlab.schemas import plan as schema

        f = schema.load(path, option, known_method)
        heads = [[HeadPlan.from_file(h) for h in row] for row in f.heads]
        return cls(heads, f.num_kv_heads, f.method, float(f.budget), f.n, dict(f.meta),
                   None if f.windows is None else list(f.windows), f.pages, f.page, f.mean_pages, f.decode_band,
                   f.group_vote)

"""Per-head plans for a real LLM: one structured support per (layer, head), chosen by the exact fit under a budget.

    plan[l][h] = FULL                                   (the head keeps every causal entry)
               | S_lh = B_{w,0} ∪ (rows × (T_fixed ∪ T_dyn(x)))

* B_{w,0}: the causal band j ∈ [i − w, i] (offset 0: a causal LM's band ends on the diagonal);
* T_fixed: key positions that are columns in most calibration windows — the attention sinks
  (positions < ``SINKS``), stored in the plan;
* T_dyn(x): ``dynamic`` further columns chosen *per input* as MInference does: the keys with the
  largest attention mass from the last ``LAST_Q`` queries (``attention.estimate_columns``).

How a plan is chosen (``choose_plan``).  Calibration (``Calibration``) runs the model on text
with exact attention, in blocks of rows (never n×n), and records per head, for a grid of band
half-widths w and column counts g, the mass the exact fit captures:

    μ_h(w, g) = (1/n) Σ_i Σ_{j ∈ B_w ∪ T_g(w)} a_ij,     T_g(w) = top_columns(c(w), g),
    c_t(w) = Σ_{i : i − t > w} a_it                       (off-band column mass; attnlab.support)

i.e. the band first, then the g columns with the most off-band mass — the fit of
``attnlab.support.top_columns``.  The budget is a fraction β of the causal entries of all
heads at length n; each head picks one option (w, g) or full, maximising the total captured
mass Σ_h μ_h under Σ_h entries_h ≤ β·L·H·n(n+1)/2 (a multiple-choice knapsack, solved by
its Lagrangian: each head maximises μ_h − λ·entries_h, λ by bisection).

The captured mass is a proxy: dropping a sink of mass 0.3 renormalises the rest by 1/0.7, dropping
0.3 of distant keys whose values resemble the band's changes little.  ``choose_plan(table="err")``
therefore scores each option as it is *executed* — s ∈ {0, SINKS} fixed sink columns, band w, g
columns estimated per input — by the change of the head's contribution to the residual stream,

    ε_h(s, w, g) = mean_i ‖W_h (o_S,i − o_i)‖²     (W_h: the head's columns of o_proj; ``plan_error``)

on rows spread over the calibration windows, and solves the same knapsack minimising Σ_h ε_h.

A plan is saved as JSON (``Plan.save``), normally next to the model; ``Plan.check(model)``
refuses a plan made for another model.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from attnlab.atomic import write_text_atomic
from attnlab.errors import UserError
from attnlab.support import FULL, Support, top_columns

__all__ = [
    "ERR_ROWS", "FULL", "G_GRID", "LAST_Q", "SINKS", "W_GRID", "HeadPlan", "Plan", "Calibration", "choose_plan",
    "model_shape", "check_budget", "entries_of", "head_entries", "knapsack", "layer_windows",
]

SINKS = 4          # key positions 0..SINKS−1 may be fixed columns (attention sinks)
LAST_Q = 64        # queries that estimate an input's columns (MInference's last_q)
ROW_BLOCK = 256    # rows of exact attention held at once during calibration
ERR_ROWS = 128     # rows per window on which the options' output errors are measured (dev-chosen, see choose_plan)
W_GRID = (0, 8, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
          1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
G_GRID = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)


def check_budget(budget: float) -> float:
    """β ∈ (0, 1]: the fraction of causal attention entries a plan may keep."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget) or not 0 < budget <= 1:
        raise ValueError(f"budget: must be a fraction in (0, 1], got {budget!r}")
    return float(budget)


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


def entries_of(w: int, columns: int, dynamic: int, n: int) -> int:
    """Causal entries of band B_w plus columns at length n (columns counted off the band, as an upper bound).

        |B_w ∩ causal| = Σ_i (min(i, w) + 1) = n(w+1) − w(w+1)/2   (w < n),  a column adds ≤ n − w − 1 rows.
    """
    if w == FULL or w >= n - 1:
        return n * (n + 1) // 2
    band = n * (w + 1) - w * (w + 1) // 2
    return band + (columns + dynamic) * max(0, n - w - 1)


def head_entries(w: int, columns: int, dynamic: int, n: int, window: int | None = None) -> int:
    """Entries a head runs at length n: ``entries_of``, or in a sliding layer (window W) the band
    B_{min(w, W−1)} alone (FULL → W − 1; the model masks every key with i − j ≥ W, columns included)."""
    if window is None:
        return entries_of(w, columns, dynamic, n)
    return entries_of(window - 1 if w == FULL else min(w, window - 1), 0, 0, n)


def cap_to_window(head: "HeadPlan", window: int | None) -> "HeadPlan":
    """A sliding layer's head: its band capped at the window, no columns (they would fall outside it)."""
    if window is None:
        return head
    w = window - 1 if head.is_full else min(head.w, window - 1)
    if w == head.w and not head.columns and not head.dynamic:
        return head
    return HeadPlan(Support(w=int(w), columns=np.zeros(0, dtype=np.int64)), 0)


@dataclass(frozen=True)
class HeadPlan:
    """One head: its support (band w, fixed columns) and ``dynamic`` columns chosen per input."""

    support: Support
    dynamic: int = 0

    @classmethod
    def full(cls) -> "HeadPlan":
        return cls(Support.full(), 0)

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
        return entries_of(self.w, len(self.columns), self.dynamic, n)

    def to_dict(self) -> dict:
        return {**self.support.to_dict(), "dynamic": int(self.dynamic)}

    @classmethod
    def from_dict(cls, d: dict) -> "HeadPlan":
        d = dict(d)
        dynamic = d.pop("dynamic", 0)
        support = Support.from_dict(d)
        if not isinstance(support.w, int) or not isinstance(dynamic, int) or dynamic < 0 or support.w < FULL:
            raise ValueError(f"head plan: w must be an integer >= -1 and dynamic >= 0, got {d}")
        cols = np.asarray(support.columns).reshape(-1)
        if (cols < 0).any() or len(set(cols.tolist())) != cols.size:
            raise ValueError(f"head plan: columns must be distinct key positions >= 0, got {cols.tolist()}")
        if int(support.offset) != 0 or support.residual:
            raise ValueError("head plan: only offset 0 and residual 0 are executed (causal band ending on the diagonal)")
        return cls(support, dynamic)


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

    def __post_init__(self):
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
        return sum(head_entries(h.w, len(h.columns), h.dynamic, n, self.window(l)) for l, row in enumerate(self.heads) for h in row) / total

    def full_heads(self) -> int:
        return sum(h.is_full for row in self.heads for h in row)

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
        if self.windows is not None and self.windows != got["windows"]:
            raise UserError(f"{name}: made for another model (sliding windows {self.windows} vs {got['windows']} in the model)")
        return self

    def check_length(self, n: int, name: str = "plan") -> "Plan":
        """UserError unless the plan runs at its own length n (its budget and columns refer to it) and every
        head's columns (fixed + dynamic) fit in n keys."""
        if self.n and self.n != n:
            raise UserError(f"{name}: made for n = {self.n} tokens, run at --n {n} ({100 * self.fraction(self.n):.1f} % of "
                            f"the entries at n = {self.n}, {100 * self.fraction(n):.1f} % at n = {n}); "
                            f"make a plan with --n {n} or run at --n {self.n}")
        for l, row in enumerate(self.heads):
            for h, head in enumerate(row):
                beyond = [c for c in head.columns if c >= n]
                if beyond or len(head.columns) + head.dynamic > n:
                    what = f"column {beyond[0]}" if beyond else f"{len(head.columns)} + {head.dynamic} dynamic columns"
                    raise UserError(f"{name}: layer {l} head {h}: {what} beyond the {n} keys of a window of n = {n}")
        return self

    def to_dict(self) -> dict:
        return {
            "format": "attnlab-plan/1", **self.shape(), "method": self.method, "budget": self.budget, "n": self.n,
            "fraction": self.fraction() if self.n else None, "full_heads": self.full_heads(), "meta": self.meta,
            "windows": self.windows, "heads": [[h.to_dict() for h in row] for row in self.heads],
        }

    def save(self, path) -> Path:
        return write_text_atomic(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path) -> "Plan":
        path = Path(path)
        if not path.is_file():
            raise UserError(f"{path}: {'a folder, not a plan file' if path.is_dir() else 'no such plan file'}")
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise UserError(f"{path}: not a plan file (JSON error at line {err.lineno}: {err.msg})") from None
        except UnicodeDecodeError:
            raise UserError(f"{path}: not a plan file (not UTF-8 text)") from None
        if not isinstance(d, dict) or d.get("format") != "attnlab-plan/1":
            raise UserError(f"{path}: not an attnlab plan file (no format 'attnlab-plan/1')")
        try:
            heads = [[HeadPlan.from_dict(h) for h in row] for row in d["heads"]]
            plan = cls(heads, int(d["num_kv_heads"]), d.get("method", "attnlab"), float(d.get("budget", 1.0)), int(d.get("n", 0)), d.get("meta", {}),
                       d.get("windows"))
            n = d.get("n", 0)
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"n must be an integer >= 0, got {n!r}")
            check_budget(d.get("budget", 1.0))
        except (KeyError, TypeError, ValueError, OverflowError) as err:
            raise UserError(f"{path}: malformed plan ({err})") from None
        if plan.n:
            plan.check_length(plan.n, str(path))  # columns beyond the length it was made for
        if plan.num_layers != int(d.get("num_layers", -1)) or any(len(r) != plan.num_heads for r in heads) or plan.num_heads != int(d.get("num_heads", -1)):
            raise UserError(f"{path}: malformed plan (its head table does not match num_layers/num_heads)")
        return plan


# ---------------------------------------------------------------------------------------------
# Calibration: exact attention in row blocks, streamed per-head statistics
# ---------------------------------------------------------------------------------------------


class Calibration:
    """Per-head statistics of the exact attention on calibration windows (``observe`` runs inside the model).

    For every layer l, head h, window and grid point (w, g) it accumulates

        fit[l, h, w, g]  = μ(w, g) with the exact fit's columns T_g(w) = top_columns(c(w), g)
        est[l, h, w, g]  = μ(w, g) with the columns an input would get at run time (last-query estimate)
        sink[l, h, w]    = μ of B_w ∪ {0..SINKS−1}            (StreamingLLM / DuoAttention supports)
        fixed[l, h, w, g, t] = windows in which sink position t is among T_g(w)

    and, for ``candidates`` (a list of (w, fixed, dynamic) supports), the relative output error
    ‖o_S − o‖ / ‖o‖ on the last ``LAST_Q`` queries (MInference's search by output error).

    With ``err_rows`` > 0 it also records, for every executed option (s, w, g) — s ∈ {0, SINKS}
    fixed sink columns, band w, g columns chosen per input as at run time — on ``err_rows`` rows
    spread over the window (``attnlab.llm.plan_error``):

        err[l, h, s, w, g]       = mean_i ‖W_h (o_S,i − o_i)‖²   (the head's change of the residual stream)
        mass_exec[l, h, s, w, g] = mean_i Σ_{j ∈ S(i)} a_ij
        resid[l]                 = mean_i ‖x_i‖², x the residual stream entering layer l (set by ``calibrate``)
        out_scale[l]             = mean_i 1 / rms(y_i)², y = o_proj's output, when the layer normalises it before
                                   adding it to the stream (Gemma-2/3: x + γ ⊙ y / rms(y), so a change δ of y
                                   reaches the stream as ≈ γ ⊙ δ / rms(y); W_h is then diag(γ) W_h); 0: no such norm
        delta[l, h, s, w, g]     = mean_i (g_i · W_h (o_S,i − o_i))²   (g_i = ∂L/∂x_i where layer l adds its output)
        gsq[l]                   = mean_i ‖g_i‖²

    (the last two need the gradients ``row_grads``, set per window by ``calibrate``).
    A sliding-window layer (window W) is measured under its own mask, i − j < W, exact output included.
    """

    def __init__(self, shape: dict, n: int, candidates: list[tuple[int, int, int]] | None = None, err_rows: int = 0):
        L, H = shape["num_layers"], shape["num_heads"]
        self.shape, self.n = shape, n
        self.candidates = list(candidates or [])
        self.w_grid = sorted({w for w in W_GRID if w < n - 1} | {w for w, _, _ in self.candidates if w < n - 1})
        self.g_grid = list(G_GRID)
        Gw, Gg = len(self.w_grid), len(self.g_grid)
        self.fit = np.zeros((L, H, Gw, Gg))
        self.est = np.zeros((L, H, Gw, Gg))
        self.sink = np.zeros((L, H, Gw))
        self.fixed = np.zeros((L, H, Gw, Gg, SINKS))
        self.cand_err = np.zeros((L, H, len(self.candidates)))
        self.cand_mass = np.zeros((L, H, len(self.candidates)))
        self.windows = np.zeros(L)
        self.err_rows = int(err_rows)
        self.err = np.zeros((L, H, 2, Gw, Gg))
        self.mass_exec = np.zeros((L, H, 2, Gw, Gg))
        self.resid = np.zeros(L)
        self.out_scale = np.zeros(L)
        self.delta = np.zeros((L, H, 2, Gw, Gg))
        self.gsq = np.zeros(L)
        self.retrieval = np.zeros((L, H))  # retrieval score per head (head_scan.retrieval_scores), set by the caller; 0: not measured
        self.row_grads = [None] * L     # (R, hidden) ∂L/∂x at the sampled rows of the current window, per layer
        self.out_proj = [None] * L      # o_proj weights (hidden, H·d) per layer, set by ``calibrate``

    @torch.no_grad()
    def observe(self, layer: int, q, k, v, scaling: float, sliding: int | None = None):
        """Exact causal attention of one layer, block by block of rows, recording the statistics; returns its output.

        q: (B, H, n, d_k), k, v: (B, H, n, d) (GQA already expanded).  Returns (B, H, n, d).
        """
        B, H, n, _ = q.shape
        out = torch.empty_like(q[..., : v.shape[-1]])
        w_grid = self.w_grid
        Gw = len(w_grid)
        j = torch.arange(n)
        for b in range(B):
            c = torch.zeros(H, Gw, n, dtype=torch.float64)          # c_t(w) = Σ_{i − t > w} a_it: off-band column mass
            for i0 in range(0, n, ROW_BLOCK):
                i1 = min(n, i0 + ROW_BLOCK)
                k0 = 0 if sliding is None else max(0, i0 - sliding + 1)               # a sliding layer's rows read keys ≥ k0 only
                i = torch.arange(i0, i1)[:, None]
                jj = j[None, k0:i1]
                s = (q[b, :, i0:i1] @ k[b, :, k0:i1].transpose(-1, -2)) * scaling  # (H, r, i1 − k0)
                far = (jj > i) if sliding is None else (jj > i) | (i - jj >= sliding)
                a = torch.softmax(s.masked_fill(far, float("-inf")), dim=-1)  # (H, r, i1 − k0), the model's own mask
                out[b, :, i0:i1] = a @ v[b, :, k0:i1]
                colsum = a.sum(-2, dtype=torch.float64)                            # (H, i1 − k0): key t at colsum[:, t − k0]
                for x, w in enumerate(w_grid):
                    # rows i0..i1−1 are all off-band for t ≤ i0 − w − 1, some for i0 − w − 1 < t < i1 − w − 1
                    full_to = max(0, min(i1, i0 - w))
                    if full_to > k0:
                        c[:, x, k0:full_to] += colsum[:, : full_to - k0]
                    t0, t1 = max(full_to, k0), max(full_to, min(i1, i1 - w - 1))
                    if t1 > t0:
                        off = (i - j[None, t0:t1]) > w                                # (r, t1 − t0)
                        c[:, x, t0:t1] += (a[:, :, t0 - k0 : t1 - k0] * off).sum(-2, dtype=torch.float64)
            band = n - c.sum(-1)                                                   # rows sum to 1: band = n − off-band
            est_scores = self._estimate(q[b], k[b], scaling)                       # (H, n)
            self._reduce(layer, band, c, est_scores, n)
            if self.err_rows:
                self._option_errors(layer, q[b], k[b], v[b], scaling, est_scores, sliding)
            if self.candidates:
                self._output_errors(layer, q[b], k[b], v[b], scaling, est_scores, sliding)
        self.windows[layer] += B
        return out

    @staticmethod
    def _estimate(q, k, scaling):
        """Column scores of the last LAST_Q queries: Σ_{i > n−LAST_Q} a_it  (MInference's vertical estimate)."""
        from attnlab.llm.attention import estimate_columns

        return estimate_columns(q[None], k[None], scaling)[0]  # (H, n)

    def _reduce(self, layer, band, c, est_scores, n):
        # band: (H, Gw), c: (H, Gw, n) → per-window μ tables
        H, Gw, _ = c.shape
        gmax = max(self.g_grid)
        top = top_columns(c, gmax)                                              # (H, Gw, gmax) exact-fit columns, −1 empty
        mass_top = torch.where(top >= 0, torch.gather(c, -1, top.clamp_min(0)), torch.zeros((), dtype=c.dtype))
        cum = torch.cat([torch.zeros(H, Gw, 1, dtype=c.dtype), mass_top.cumsum(-1)], -1)  # Σ of the first g
        est_order = torch.argsort(-est_scores, dim=-1, stable=True)[:, :gmax]    # (H, gmax) run-time columns
        est_mass = torch.gather(c, -1, est_order[:, None, :].expand(H, Gw, -1))
        cum_est = torch.cat([torch.zeros(H, Gw, 1, dtype=c.dtype), est_mass.cumsum(-1)], -1)
        for y, g in enumerate(self.g_grid):
            g_ = min(g, cum.shape[-1] - 1)
            self.fit[layer, :, :, y] += ((band + cum[..., g_]) / n).numpy()
            self.est[layer, :, :, y] += ((band + cum_est[..., min(g, cum_est.shape[-1] - 1)]) / n).numpy()
            for t in range(SINKS):
                self.fixed[layer, :, :, y, t] += ((top[..., :g_] == t).any(-1)).numpy()
        self.sink[layer] += ((band + c[..., :SINKS].sum(-1)) / n).numpy()
        for z, (w, fixed, dyn) in enumerate(self.candidates):  # μ of each candidate with its run-time columns
            x = self.w_grid.index(min(w, self.w_grid[-1]))
            cols = candidate_columns(est_scores, fixed, dyn)
            self.cand_mass[layer, :, z] += ((band[:, x] + (c[:, x] * cols).sum(-1)) / n).numpy()

    def rows(self) -> torch.Tensor:
        """The query positions the option errors are measured on (``plan_error.sample_rows``)."""
        from attnlab.llm.plan_error import sample_rows

        return sample_rows(self.n, self.err_rows)

    def _option_errors(self, layer, q, k, v, scaling, est_scores, sliding=None):
        from attnlab.llm.plan_error import head_gradients, option_errors, projection_factor

        H, _, d = v.shape
        U = projection_factor(self.out_proj[layer], H, d)
        u = head_gradients(self.out_proj[layer], self.row_grads[layer], H, d)
        err, mass, delta = option_errors(q, k, v, scaling, est_scores, self.rows(), self.w_grid, self.g_grid, SINKS, U, u, sliding)
        self.err[layer] += err.numpy()
        self.mass_exec[layer] += mass.numpy()
        self.delta[layer] += delta.numpy()

    def _output_errors(self, layer, q, k, v, scaling, est_scores, sliding=None):
        # the last LAST_Q queries: exact output (the model's own mask, sliding window included) vs each candidate's output
        H, n, _ = q.shape
        i0 = max(0, n - LAST_Q)
        i = torch.arange(i0, n)[:, None]
        j = torch.arange(n)[None, :]
        s = (q[:, i0:] @ k.transpose(-1, -2)) * scaling
        s = s.masked_fill((j > i) if sliding is None else (j > i) | (i - j >= sliding), float("-inf"))
        o = torch.softmax(s, -1) @ v
        for x, (w, fixed, dyn) in enumerate(self.candidates):
            keep = ((i - j) <= w).expand(H, -1, -1).clone()
            cols = candidate_columns(est_scores, fixed, dyn)
            keep |= cols[:, None, :]
            o_s = torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ v
            err = (o_s - o).norm(dim=(-2, -1)) / o.norm(dim=(-2, -1)).clamp_min(1e-30)
            self.cand_err[layer, :, x] += err.numpy()

    TABLES = ("fit", "est", "sink", "fixed", "cand_err", "cand_mass", "windows", "err", "mass_exec", "resid", "out_scale", "delta", "gsq",
              "retrieval")
    OPTIONAL = ("err", "mass_exec", "resid", "out_scale", "delta", "gsq", "retrieval")   # absent from calibrations made before them

    def save(self, path) -> Path:
        """The statistics as ``.npz`` (arrays only), with the grid, shape and candidates."""
        def write(tmp):
            with open(tmp, "wb") as f:
                np.savez(f, **{t: getattr(self, t) for t in self.TABLES}, w_grid=np.asarray(self.w_grid), n=self.n, err_rows=self.err_rows,
                         sliding=np.asarray([w or 0 for w in (self.shape.get("windows") or [])], dtype=np.int64),
                         candidates=np.asarray(self.candidates, dtype=np.int64).reshape(-1, 3),
                         shape=np.asarray([self.shape["num_layers"], self.shape["num_heads"], self.shape["num_kv_heads"]]))
        from attnlab.atomic import write_atomic

        return write_atomic(path, write)

    @classmethod
    def load(cls, path) -> "Calibration":
        z = np.load(path, allow_pickle=False)
        L, H, H_kv = (int(x) for x in z["shape"])
        sliding = [int(w) or None for w in z["sliding"]] if "sliding" in z.files and len(z["sliding"]) else None
        shape = {"num_layers": L, "num_heads": H, "num_kv_heads": H_kv, "windows": sliding}
        cal = cls(shape, int(z["n"]), [tuple(int(v) for v in c) for c in z["candidates"]],
                  int(z["err_rows"]) if "err_rows" in z.files else 0)
        cal.w_grid = [int(w) for w in z["w_grid"]]
        for t in cls.TABLES:
            if t in z.files:
                setattr(cal, t, z[t])
            elif t in cls.OPTIONAL:
                Gw = len(cal.w_grid)
                setattr(cal, t, np.zeros((L,) if t in ("resid", "out_scale", "gsq") else (L, H) if t == "retrieval" else (L, H, 2, Gw, len(cal.g_grid))))
            else:
                raise KeyError(t)
        return cal

    def mean(self, table: str) -> np.ndarray:
        x = getattr(self, table)
        return x / np.maximum(self.windows, 1).reshape((-1,) + (1,) * (x.ndim - 1))

    def fixed_columns(self, layer: int, head: int, x: int, y: int) -> list[int]:
        """Sink positions that are among the exact fit's columns in most windows (at grid point (w_x, g_y))."""
        share = self.fixed[layer, head, x, y] / max(self.windows[layer], 1)
        return [t for t in range(SINKS) if share[t] > 0.5]


TABLES = ("fit", "est", "err", "err-rel", "err-grad", "delta")


def knapsack(gain: np.ndarray, cost: np.ndarray, limit: float) -> np.ndarray:
    """One option per head maximising Σ gain under Σ cost ≤ limit: choice (L, H) into the last axis of gain (L, H, O).

    cost: (O,) or per head (L, H, O) (a sliding layer's options cost their capped band); an option of
    gain −∞ is never taken.  The Lagrangian relaxation max Σ_h (gain_h − λ·cost), λ by bisection, then a
    greedy fill of what the discrete options leave (best gain per extra entry, one head at a time).
    ``None`` if even the cheapest option of every head exceeds the limit.
    """
    L, H, _ = gain.shape
    cost = np.broadcast_to(np.asarray(cost, dtype=np.float64), gain.shape)

    def pick(lam):
        choice = np.argmax(gain - lam * cost, axis=-1)        # ties: the first (options come cheapest first)
        return choice, np.take_along_axis(cost, choice[..., None], -1).sum()

    gaps = np.diff(np.unique(cost))
    finite = gain[np.isfinite(gain)]
    span = float(finite.max() - finite.min()) or 1.0
    lo, hi = 0.0, span / (gaps.min() if len(gaps) else cost.min()) * 2   # λ = hi: every head takes a cheapest option
    choice, spent = pick(hi)
    if spent > limit:
        return None
    for _ in range(60):
        mid = (lo + hi) / 2
        c_mid, s_mid = pick(mid)
        if s_mid <= limit:
            hi, choice, spent = mid, c_mid, s_mid
        else:
            lo = mid
    while True:
        best = None
        for l in range(L):
            for h in range(H):
                cur = choice[l, h]
                extra = cost[l, h] - cost[l, h, cur]
                ok = (extra > 0) & (spent + extra <= limit) & (gain[l, h] > gain[l, h, cur])
                if ok.any():
                    ratio = np.where(ok, (np.where(ok, gain[l, h], 0) - gain[l, h, cur]) / np.where(extra > 0, extra, 1), -1)
                    o = int(np.argmax(ratio))
                    if best is None or ratio[o] > best[0]:
                        best = (ratio[o], l, h, o)
        if best is None:
            break
        _, l, h, o = best
        spent += cost[l, h, o] - cost[l, h, choice[l, h]]
        choice[l, h] = o
    return choice


def choose_plan(cal: Calibration, budget: float, n: int | None = None, table: str | None = None, method: str = "attnlab",
                keep_full: np.ndarray | None = None) -> Plan:
    """The plan of best total objective with Σ entries ≤ β · L·H·n(n+1)/2 (module docstring), by ``table``
    (default: ``err-rel`` when the calibration holds option errors, else ``fit``):

    * ``fit`` / ``est``: maximise the captured mass Σ μ_h over (w, g) on the calibration grid, with the
      exact fit's or the run-time estimate's columns; the sink positions that are columns in most
      windows become fixed columns, the rest are chosen per input (``dynamic``);
    * ``err``: minimise Σ_h ε_h, the executed options' output errors (``Calibration.err``: the change of
      each head's contribution to the residual stream, on sampled rows), over (s, w, g) with s ∈ {0, SINKS}
      fixed sinks — each option exactly as ``LayerRunner`` runs it;
    * ``err-rel``: the same with layer l's errors divided by mean ‖x‖² of its residual stream;
    * ``err-grad``: the same with layer l's errors times mean ‖∂L/∂x‖² (the loss's sensitivity there);
    * ``delta``: minimise Σ_h δ_h, the squared first-order change of the loss (``Calibration.delta``);

    Full heads are an option of every head (gain: mass 1, error 0); ``keep_full`` (L, H) bool: heads that
    must stay full (retrieval heads) — their other options are not offered, the knapsack spends the rest.
    (Maximising Σ log μ_h instead was tried: SmolLM2 at 8K, dev text, β = 5 % / 10 %: perplexity
    32.94 / 28.43 vs 33.02 / 28.43 — no gain, not kept.  Same setting, one 8K calibration window:
    fit 33.03 / 28.43, err-rel 30.39 / 27.98 (128 rows; 31.43 / 28.49 with 64, 30.81 / 27.77 with 256),
    err 33.44 / 29.24, err-grad 31.30 / 28.54 and delta 32.01 / 28.88 (64 rows), the executed mass
    35.11 / 28.41 (dropped); StreamingLLM 32.50 / 29.28, full 26.55.)
    """
    budget = check_budget(budget)
    if table is None:
        table = "err-rel" if cal.err_rows and cal.err.any() else "fit"
    if table not in TABLES:
        raise ValueError(f"table: expected one of {', '.join(TABLES)}, got {table!r}")
    n = n or cal.n
    if budget == 1.0:  # every entry is affordable: the plan is full attention (exactly)
        return Plan.full(cal.shape, n)
    L, H = cal.shape["num_layers"], cal.shape["num_heads"]
    Gw, Gg = len(cal.w_grid), len(cal.g_grid)
    if table in ("fit", "est"):
        options = [(0, x, y) for x in range(Gw) for y in range(Gg)]
        gain = cal.mean(table).reshape(L, H, -1)                       # (L, H, Gw·Gg)
    else:
        if not cal.err_rows or not cal.windows.any():
            raise UserError(f"table {table}: the calibration has no option errors (calibrate with err_rows > 0)")
        options = [(z, x, y) for z in range(2) for x in range(Gw) for y in range(Gg)]
        if table in ("err-grad", "delta") and not cal.gsq.any():
            raise UserError(f"table {table}: the calibration has no loss gradients (calibrate with grads=True)")
        err = cal.mean("delta" if table == "delta" else "err").reshape(L, H, -1)   # (L, H, 2·Gw·Gg)
        post = cal.mean("out_scale")  # a layer that normalises its attention output: the change as it reaches the stream
        err = err * np.where(post > 0, post, 1.0)[:, None, None]
        if table == "err-rel":
            err = err / np.maximum(cal.mean("resid"), 1e-30)[:, None, None]
        if table == "err-grad":
            err = err * cal.mean("gsq")[:, None, None]
        gain = -err
    if not np.isfinite(gain).all():
        raise UserError(f"table {table}: the calibration holds non-finite values ({int((~np.isfinite(gain)).sum())}); recalibrate")
    full_gain = 1.0 if table in ("fit", "est") else 0.0
    sinks = (0, SINKS)
    windows = cal.shape.get("windows") or [None] * L
    # cost[l, o]: entries a head of layer l runs with option o (a sliding layer's band capped at its window)
    cost = np.array([[head_entries(cal.w_grid[x], sinks[z], cal.g_grid[y], n, win) for z, x, y in options]
                     + [head_entries(FULL, 0, 0, n, win)] for win in windows], dtype=np.float64)    # (L, options + full)
    gain = np.concatenate([gain, np.full((L, H, 1), full_gain)], -1)   # (L, H, options + full)
    columned = np.array([z > 0 or y > 0 for z, _, y in options] + [False])
    for l, win in enumerate(windows):
        if win is not None:  # a sliding layer runs its band alone: options with columns are not offered
            gain[l][:, columned] = -np.inf
    if keep_full is not None:
        gain[np.asarray(keep_full, dtype=bool), :-1] = -np.inf
    order = np.argsort(cost, axis=-1, kind="stable")[:, None, :].repeat(H, 1)   # (L, H, O) cheapest first: ties go to the cheaper
    cost = np.take_along_axis(cost[:, None, :].repeat(H, 1), order, -1)
    choice = knapsack(np.take_along_axis(gain, order, -1), cost, budget * L * H * n * (n + 1) / 2)
    if choice is None:
        cheapest = np.where(np.isfinite(np.take_along_axis(gain, order, -1)), cost, np.inf).min(-1).sum() / (L * H * n * (n + 1) / 2)
        kept = f" with {int(np.sum(keep_full))} heads kept full" if keep_full is not None and np.any(keep_full) else ""
        raise UserError(f"budget {budget}: below the cheapest plan{kept} ({cheapest:.4f} of the entries at n = {n})")
    choice = np.take_along_axis(order, choice[..., None], -1)[..., 0]
    heads = []
    for l in range(L):
        row = []
        for h in range(H):
            o = int(choice[l, h])
            if o == len(options):
                row.append(HeadPlan.full())
                continue
            z, x, y = options[o]
            w, g = cal.w_grid[x], cal.g_grid[y]
            if table in ("fit", "est"):
                fixed = cal.fixed_columns(l, h, x, y)[:g]
                row.append(HeadPlan(Support(w=int(w), columns=np.asarray(fixed, dtype=np.int64)), g - len(fixed)))
            else:
                row.append(HeadPlan(Support(w=int(w), columns=np.arange(sinks[z], dtype=np.int64)), int(g)))
        heads.append(row)
    value = float(np.take_along_axis(gain, choice[..., None], -1).mean())
    key = "captured_mass" if full_gain == 1.0 else "mean_error"
    return Plan(heads, cal.shape["num_kv_heads"], method, budget, n, {key: value if full_gain else -value, "table": table},
                cal.shape.get("windows"))


def candidate_columns(est_scores: torch.Tensor, fixed: int, dyn: int) -> torch.Tensor:
    """1[j ∈ T] of a candidate: the first ``fixed`` keys (sinks) and the ``dyn`` others with the highest
    estimated scores (MInference's vertical lines from the last queries); est_scores: (H, n) → (H, n) bool."""
    H, n = est_scores.shape
    cols = torch.zeros(H, n, dtype=torch.bool)
    cols[:, :fixed] = True
    if dyn:
        sc = est_scores.clone()
        sc[:, :fixed] = -1
        cols.scatter_(1, torch.argsort(-sc, dim=-1, stable=True)[:, :dyn], True)
    return cols


def token_windows(tokenizer, path, n: int, count: int, start: int = 0) -> list[torch.Tensor]:
    """``count`` consecutive windows of n tokens of a text file (plain or gzip), from token ``start``: ``[(1, n)]``.

    UserError if the file holds fewer than ``start + n`` tokens (one window at least is needed).
    """
    from attnlab.llm.long_capture import read_text

    text = "\n".join(read_text(path).splitlines())  # lines joined by one newline each
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids[0]
    available = (len(ids) - start) // n
    if available < 1:
        raise UserError(f"{path}: {len(ids)} tokens, shorter than the window of {n} tokens (from token {start})")
    return [ids[start + x * n : start + (x + 1) * n][None] for x in range(min(count, available))]


def row_gradients(model, ids, rows, mods) -> list[torch.Tensor]:
    """g (R, hidden) per layer: ∂L/∂x at ``rows``, x the residual stream where the layer's attention output is added.

    L = the window's summed next-token NLL (the mean × n − 1), one forward + backward with the plan in place
    (full heads while calibrating: SDPA); the gradient reaches the attention output unchanged (x = h + attn(h)).
    """
    caught = {}

    def hook(mod, args, out):
        caught[int(mod.layer_idx)] = out[0]

    handles = [mod.register_forward_hook(hook) for mod in mods]
    recorders = [getattr(getattr(mod, "attnlab_layer", None), "recorder", None) for mod in mods]
    for mod in mods:  # the plan's own attention runs (a recorder would observe this pass too)
        if getattr(mod, "attnlab_layer", None) is not None:
            mod.attnlab_layer.recorder = None
    try:
        with torch.enable_grad():
            emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
            loss = model(inputs_embeds=emb, labels=ids, use_cache=False).loss * (ids.shape[-1] - 1)
            outs = [caught[l] for l in range(len(mods))]
            grads = torch.autograd.grad(loss, outs)
    finally:
        for hd in handles:
            hd.remove()
        for mod, rec in zip(mods, recorders):
            if rec is not None:
                mod.attnlab_layer.recorder = rec
    return [g[0, rows].detach().double().cpu() for g in grads]


def output_norms(model) -> list:
    """Per layer, the norm a decoder layer applies to its attention output before adding it to the stream, or None.

    Gemma-2/3 layers hold ``post_attention_layernorm`` (on the attention output) and ``pre_feedforward_layernorm``
    (before the MLP); in Llama-like layers ``post_attention_layernorm`` is the pre-MLP norm and nothing follows o_proj.
    """
    layers = {}
    for mod in model.modules():
        attn = getattr(mod, "self_attn", None)
        if attn is not None and hasattr(attn, "layer_idx"):
            post = getattr(mod, "post_attention_layernorm", None)
            layers[int(attn.layer_idx)] = post if hasattr(mod, "pre_feedforward_layernorm") else None
    return [layers[i] for i in sorted(layers)]


@torch.no_grad()
def output_gain(norm) -> torch.Tensor:
    """γ (hidden,): an RMS norm applied to a row of ones (rms 1), i.e. its per-channel gain (weight or 1 + weight)."""
    w = next(norm.parameters())
    return norm(torch.ones(1, w.shape[-1], dtype=w.dtype, device=w.device))[0].detach().double().cpu()


def _record_out_scale(cal: "Calibration", layer: int):
    def hook(mod, args, out):
        if torch.is_grad_enabled():  # the gradient pass (``row_gradients``) runs the window a second time
            return
        y = out[0, cal.rows()].detach().double()                                    # (R, hidden) o_proj's output
        cal.out_scale[layer] += float((1.0 / (y ** 2).mean(-1).clamp_min(1e-30)).mean())
    return hook


@torch.no_grad()
def calibrate(model, windows, candidates=None, progress=None, err_rows: int = ERR_ROWS, grads: bool = False) -> Calibration:
    """Run ``model`` on each window ``(1, n)`` with exact attention and stream the per-head statistics.

    ``err_rows`` > 0: also the executed options' output errors on that many rows (``Calibration``),
    measured through each layer's ``o_proj``; ``grads``: also their first-order loss change (``delta``,
    ``gsq``), from one backward pass per window (SmolLM2 at 8K: +110 s, peak RSS 21 GB instead of ~9).
    """
    from attnlab.llm.attention import apply_plan, attention_modules

    shape = model_shape(model)
    n = int(windows[0].shape[-1])
    cal = Calibration(shape, n, candidates, err_rows)
    previous = getattr(model, "attnlab_plan", None)
    implementation = model.config._attn_implementation
    apply_plan(model, Plan.full(shape))
    mods = attention_modules(model)
    norms = output_norms(model) if err_rows else [None] * len(mods)
    hooks = []
    if err_rows:
        # W_h as the stream sees it: diag(γ) W_h behind an output norm (γ = the norm applied to a row of ones)
        cal.out_proj = [mod.o_proj.weight.detach().cpu() * (1.0 if nm is None else output_gain(nm)[:, None])
                        for mod, nm in zip(mods, norms)]
        for l, (mod, nm) in enumerate(zip(mods, norms)):
            if nm is not None:
                hooks.append(mod.o_proj.register_forward_hook(_record_out_scale(cal, l)))
    try:
        for mod in mods:
            mod.attnlab_layer.recorder = cal
        for x, ids in enumerate(windows):
            if err_rows and grads:
                for l, g in enumerate(row_gradients(model, ids.to(model.device), cal.rows(), mods)):
                    cal.row_grads[l] = g
                    cal.gsq[l] += float((g ** 2).sum(-1).mean())
            o = model(ids.to(model.device), use_cache=False, output_hidden_states=bool(err_rows), logits_to_keep=1)  # not n × vocabulary logits
            if err_rows:  # hidden_states[l]: the residual stream entering layer l, (1, n, hidden)
                rows = cal.rows()
                for l in range(shape["num_layers"]):
                    cal.resid[l] += float((o.hidden_states[l][0, rows].double() ** 2).sum(-1).mean())
            if progress:
                progress(x + 1, len(windows))
    finally:
        for hk in hooks:
            hk.remove()
        for mod in mods:
            mod.attnlab_layer.recorder = None
        if previous is not None:
            apply_plan(model, previous)
        else:
            model.set_attn_implementation(implementation)
    return cal

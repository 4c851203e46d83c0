"""The published ways of sparsifying an LLM's heads, as plans of the same kind and at the same budget.

All four read the same ``Calibration`` and return a ``Plan`` whose entries at length n are at most
β · L·H·n(n+1)/2 (β the budget), so they run through the same attention function and compare at
equal entries:

* ``streaming_llm`` (Xiao et al. 2023): every head keeps 4 sink tokens + a window, the largest
  window the budget allows;
* ``minference`` (Jiang et al. 2024): each head picks one of 6 candidate patterns by mass captured
  (``by="mass"``) or by output error on the last queries (``by="error"``).  The candidates are
  MInference's (columns v, diagonals s) pairs — Λ-shape (100, 800); vertical-slash (30, 800),
  (100, 750), (500, 700), (3500, 100); block-sparse mapped to (1000, 6096) — scaled to the budget,
  v' + s' = β(n+1)/2 keys per row; Λ-shape keeps the first v' tokens, the others v' columns
  chosen per input from the last 64 queries.  The s' slash lines are run as the contiguous band
  of the s' nearest diagonals (our kernel executes bands; MInference picks the s' diagonals of
  largest estimated mass anywhere);
* ``duo_attention`` (Xiao et al. 2024): the fraction of heads with the largest error of the
  sink + window fit stay full, the rest keep 4 sinks + a window; window and fraction are the pair
  of largest captured mass at the budget (DuoAttention learns its gates, the ``duo-attention``
  method; here, the ``duo-fit-error`` method, heads are ranked by the fit's error).
Full attention is ``Plan.full`` (the ``full`` method, ``methods.full``).

Sliding layers (Gemma-3: window W = 512 on 15 of 18 layers).  Every head of a sliding layer runs
the band B_{min(w, W−1)} alone and is counted so (``plan.head_entries``), the denominator staying
L·H·n(n+1)/2.  StreamingLLM's uniform window is then the largest w whose capped plan fits; MInference's
sliding heads keep the band min(W − 1, k − 1) of its k = β(n+1)/2 keys per row and its candidates for
the full layers are scaled to what that leaves (``minference_budget``); DuoAttention's full and
streaming heads are costed per layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from attnlab.errors import UserError
from attnlab.llm.plans.plan import FULL, SINKS, HeadPlan, Plan, check_budget, entries_of, head_entries
from attnlab.support import Support

if TYPE_CHECKING:   # the record a plan is chosen from; the calibration measures it and imports plans/
    from attnlab.llm.calibration.statistics import Calibration

__all__ = ["MINFERENCE_PATTERNS", "minference_candidates", "streaming_llm", "minference", "duo_attention"]

MINFERENCE_PATTERNS = (("lambda", 100, 800), ("vertical-slash", 30, 800), ("vertical-slash", 100, 750),
                       ("vertical-slash", 500, 700), ("vertical-slash", 3500, 100), ("block-sparse", 1000, 6096))


def _sinks(k: int) -> np.ndarray:
    return np.arange(k, dtype=np.int64)


def streaming_window(budget: float, n: int, sinks: int = SINKS) -> int:
    """The largest w with entries(B_w ∪ sinks) ≤ β · n(n+1)/2."""
    limit = check_budget(budget) * n * (n + 1) / 2
    w = 0
    if entries_of(0, sinks, 0, n) > limit:
        raise UserError(f"budget {budget}: below StreamingLLM's cheapest plan (4 sinks + the diagonal) at n = {n}")
    lo, hi = 0, n - 1
    while lo < hi:  # largest w with cost ≤ limit
        mid = (lo + hi + 1) // 2
        if entries_of(mid, sinks, 0, n) <= limit:
            lo = mid
        else:
            hi = mid - 1
    w = lo
    return w


def streaming_llm(shape: dict, budget: float, n: int) -> Plan:
    """4 sinks + the largest window w such that the plan (sliding layers capped at their window) keeps ≤ β of the
    entries."""
    w = streaming_window(budget, n)
    if shape.get("windows"):  # sliding layers cost less than w: the largest uniform w whose capped plan fits
        lo, hi = w, n - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            capped = HeadPlan(support=Support(w=mid, columns=_sinks(SINKS)))
            if Plan.uniform(shape, capped, "streaming-llm", budget, n).fraction(n) <= budget:
                lo = mid
            else:
                hi = mid - 1
        w = lo
    return Plan.uniform(shape, HeadPlan(support=Support(w=w, columns=_sinks(SINKS))), "streaming-llm", budget, n)


def minference_budget(budget: float, n: int, shape: dict | None = None) -> tuple[float, int | None]:
    """(β' of the full layers' heads, band of the sliding heads): β and None when no layer slides.

        k = β(n+1)/2 keys per row;  sliding head: B_{min(W−1, k−1)};
        β' = (β·L·H·n(n+1)/2 − Σ_sliding entries) / (H·L_full·n(n+1)/2)      (capped at 1)
    """
    budget = check_budget(budget)
    windows = (shape or {}).get("windows")
    if not windows or all(w is None for w in windows):
        return budget, None
    H = shape["num_heads"]
    k = max(1, int(round(budget * (n + 1) / 2)))
    total = n * (n + 1) / 2
    band = min(min(w for w in windows if w is not None) - 1, k - 1)
    sliding = sum(H * head_entries(band, 0, 0, n, win) for win in windows if win is not None)
    full_layers = sum(win is None for win in windows)
    if not full_layers:
        return budget, band
    rest = (budget * len(windows) * H * total - sliding) / (full_layers * H * total)
    return min(1.0, max(rest, 1e-9)), band


def minference_candidates(budget: float, n: int, shape: dict | None = None) -> list[tuple[int, int, int]]:
    """The 6 patterns scaled to the budget: ``(w, fixed columns, dynamic columns)`` with v' + s' = β(n+1)/2
    (β' of ``minference_budget`` when layers slide: the candidates are for the full layers)."""
    budget = minference_budget(budget, n, shape)[0]
    keys = check_budget(budget) * (n + 1) / 2
    out = []
    for kind, v, s in MINFERENCE_PATTERNS:
        v_, s_ = int(round(v * keys / (v + s))), max(1, int(round(s * keys / (v + s))))
        w = min(s_ - 1, n - 2)
        out.append((w, v_, 0) if kind == "lambda" else (w, 0, v_))
    # keep every candidate within budget (columns counted as entries_of does)
    fixed = []
    for w, f, d in out:
        while (f or d) and entries_of(w, f, d, n) > budget * n * (n + 1) / 2:
            f, d = (f - 1, d) if f else (f, d - 1)
        fixed.append((w, f, d))
    return fixed


def minference(cal: Calibration, budget: float, by: str = "mass") -> Plan:
    """Per head the best of the 6 candidates (all of the same size) by captured mass or by output error."""
    n = cal.n
    cands = minference_candidates(budget, n, cal.shape)
    _, band = minference_budget(budget, n, cal.shape)
    windows = cal.shape.get("windows") or [None] * cal.shape["num_layers"]
    missing = [c for c in cands if c not in cal.candidates]
    if missing:
        raise ValueError(f"cal: calibrated without MInference's candidates at budget {budget} ({missing}); "
                         "pass them to calibrate")
    z = [cal.candidates.index(c) for c in cands]
    if by == "mass":
        best = np.argmax(cal.mean("cand_mass")[..., z], -1)
    elif by == "error":
        best = np.argmin(cal.mean("cand_err")[..., z], -1)
    else:
        raise ValueError(f"by: expected 'mass' or 'error', got {by!r}")
    heads = [[None] * cal.shape["num_heads"] for _ in range(cal.shape["num_layers"])]
    for l in range(len(heads)):
        for h in range(len(heads[l])):
            if windows[l] is not None:  # a sliding head: its band (the candidates are for the full layers)
                heads[l][h] = HeadPlan(support=Support(w=int(band), columns=_sinks(0)))
                continue
            w, f, d = cands[int(best[l, h])]
            heads[l][h] = HeadPlan(support=Support(w=int(w), columns=_sinks(f)), dynamic=int(d))
    return Plan(heads, cal.shape["num_kv_heads"], f"minference-{by}", budget, n,
                {"candidates": cands, "sliding_band": band}, cal.shape.get("windows"))


def duo_attention(cal: Calibration, budget: float) -> Plan:
    """Top heads by the sink + window fit's error full, the rest 4 sinks + window, at the budget."""
    budget = check_budget(budget)
    n = cal.n
    L, H = cal.shape["num_layers"], cal.shape["num_heads"]
    sink = cal.mean("sink")                                        # (L, H, Gw) μ of B_w ∪ sinks
    windows = cal.shape.get("windows") or [None] * L
    total = n * (n + 1) / 2
    limit = budget * L * H * total
    full_cost = np.repeat([head_entries(FULL, 0, 0, n, win) for win in windows], H)        # (L·H,)
    best = None
    for x, w in enumerate(cal.w_grid):
        base = np.repeat([head_entries(w, SINKS, 0, n, win) for win in windows], H)         # (L·H,) streaming heads
        if base.sum() > limit:
            continue
        order = np.argsort(sink[..., x].reshape(-1), kind="stable")  # largest error first
        spent, chosen = base.sum(), []
        for o in order:  # full heads the budget pays for,
                         # in order of error (a sliding head at its window gains nothing)
            extra = full_cost[o] - base[o]
            if extra <= 0:
                continue
            if spent + extra > limit:
                break
            spent += extra
            chosen.append(int(o))
        captured = sink[..., x].reshape(-1).copy()
        captured[chosen] = 1.0
        if best is None or captured.sum() > best[0]:
            best = (captured.sum(), w, set(chosen))
    if best is None:
        raise UserError(f"budget {budget}: below DuoAttention's cheapest plan at n = {n}")
    _, w, full_set = best
    heads = [[HeadPlan.full() if l * H + h in full_set else HeadPlan(support=Support(w=int(w), columns=_sinks(SINKS)))
              for h in range(H)] for l in range(L)]
    return Plan(heads, cal.shape["num_kv_heads"], "duo-attention", budget, n,
                {"window": int(w), "full_heads": len(full_set)}, cal.shape.get("windows"))


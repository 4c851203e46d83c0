"""Automatic choice of (w, num_pos): the error–budget curve and the smallest budget.

For a grid of half-widths w and column counts num_pos (and a fixed sparse
budget s), ``structured_fit`` gives for every head a budget (stored entries)
and an error.  The curve is that table; the choice per head is

    (w*, num_pos*) = argmin { budget(w, num_pos) : error(w, num_pos) ≤ target }

(ties: smaller error, then smaller w), with ``error`` one of

    "mean_error"   ‖A − X‖₁ / (n·m)
    "lost_mass"    1 − mass captured  (= ‖A − X‖₁ / Σ a_ij)

Per model, one (w, num_pos) serves every head: the smallest total budget
whose error reduced over heads (``reduce="max"``: every head reaches the
target; ``"mean"``: the heads on average) is ≤ target.
The loop runs over the small grid, never over heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.analysis.inputs import as_batch
from attnlab.analysis.structured_fit import structured_fit

__all__ = ["BudgetChoice", "ErrorBudgetCurve", "choose_budget", "choose_model_budget", "error_budget_curve"]

METRICS = ("mean_error", "lost_mass")


@dataclass(frozen=True)
class ErrorBudgetCurve:
    """Errors and budgets of the fit over a (w, num_pos) grid; batch shape ``(...)``."""

    w: np.ndarray               # (W,)
    num_pos: np.ndarray         # (P,)
    s: int
    stored_entries: np.ndarray  # (..., W, P)
    l1: np.ndarray              # (..., W, P)
    mean_error: np.ndarray      # (..., W, P)
    mass_captured: np.ndarray   # (..., W, P)

    def error(self, metric: str = "mean_error") -> np.ndarray:
        """The error surface (..., W, P) for ``metric`` in {"mean_error", "lost_mass"}."""
        if metric not in METRICS:
            raise ValueError(f"metric: expected one of {METRICS}, got {metric!r}")
        return self.mean_error if metric == "mean_error" else 1.0 - self.mass_captured


@dataclass(frozen=True)
class BudgetChoice:
    """The chosen (w, num_pos); -1 / NaN where no grid point reaches the target."""

    w: np.ndarray               # (...)
    num_pos: np.ndarray         # (...)
    stored_entries: np.ndarray  # (...)
    error: np.ndarray           # (...)
    reached: np.ndarray         # (...) bool


def error_budget_curve(a, ws=range(0, 11), num_pos_values=range(0, 5), s: int | None = None,
                       **fit_kw) -> ErrorBudgetCurve:
    """``structured_fit`` of every head for every (w, num_pos) of the grid.

    ``ws`` values ≥ max(n, m) are an error (``w``); ``fit_kw`` goes to
    ``structured_fit`` (``eps``, ``offset``, ``lengths``, ...).
    """
    a = as_batch(a, "a")
    # a: (..., n, m)
    ws = np.asarray(list(ws), dtype=np.int64)
    ps = np.asarray(list(num_pos_values), dtype=np.int64)
    if ws.size == 0:
        raise ValueError("w: empty grid of half-widths")
    if ps.size == 0:
        raise ValueError("num_pos: empty grid of column counts")
    s = a.shape[-2] if s is None else s
    shape = a.shape[:-2] + (ws.size, ps.size)
    out = {k: np.empty(shape) for k in ("stored_entries", "l1", "mean_error", "mass_captured")}
    for iw, w in enumerate(ws):
        for ip, num_pos in enumerate(ps):
            fit = structured_fit(a, int(w), int(num_pos), s, **fit_kw)
            for k in out:
                out[k][..., iw, ip] = getattr(fit, k)
    out["stored_entries"] = out["stored_entries"].astype(np.int64)
    return ErrorBudgetCurve(w=ws, num_pos=ps, s=int(s), **out)


def _choose(budget: np.ndarray, error: np.ndarray, target: float, ws, ps) -> BudgetChoice:
    # budget, error: (..., W, P)
    flat_b = budget.reshape(*budget.shape[:-2], -1).astype(np.float64)
    flat_e = error.reshape(*error.shape[:-2], -1)
    ok = flat_e <= target
    # lexicographic key: budget, then error, then grid order (w-major)
    order = np.lexsort((flat_e, np.where(ok, flat_b, np.inf)), axis=-1)[..., 0]
    reached = ok.any(-1)
    iw, ip = np.unravel_index(order, budget.shape[-2:])
    pick = lambda arr: np.take_along_axis(arr, order[..., None], axis=-1)[..., 0]  # noqa: E731
    return BudgetChoice(
        w=np.where(reached, ws[iw], -1),
        num_pos=np.where(reached, ps[ip], -1),
        stored_entries=np.where(reached, pick(flat_b), -1).astype(np.int64),
        error=np.where(reached, pick(flat_e), np.nan),
        reached=reached,
    )


def choose_budget(curve: ErrorBudgetCurve, target: float, metric: str = "mean_error") -> BudgetChoice:
    """Per head: the (w, num_pos) of smallest budget whose error ≤ ``target``."""
    if not target >= 0:
        raise ValueError(f"target: expected a non-negative error, got {target!r}")
    return _choose(curve.stored_entries, curve.error(metric), target, curve.w, curve.num_pos)


def choose_model_budget(curve: ErrorBudgetCurve, target: float, metric: str = "mean_error",
                        reduce: str = "max") -> BudgetChoice:
    """One (w, num_pos) for all heads: smallest total budget with reduced error ≤ ``target``.

    ``reduce``: "max" (every head reaches the target) or "mean".
    """
    if not target >= 0:
        raise ValueError(f"target: expected a non-negative error, got {target!r}")
    if reduce not in ("max", "mean"):
        raise ValueError(f"reduce: expected 'max' or 'mean', got {reduce!r}")
    err = curve.error(metric)
    heads = tuple(range(err.ndim - 2))
    red = err.max(axis=heads) if reduce == "max" else err.mean(axis=heads)
    return _choose(curve.stored_entries.sum(axis=heads), red, target, curve.w, curve.num_pos)

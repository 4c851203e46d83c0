"""Choosing a plan under a budget: a multiple-choice knapsack over the calibrated options of every head.

Calibration (``attnlab.llm.calibration.statistics``) records per head, for a grid of band half-widths w and
column counts g, the mass the exact fit captures:

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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from attnlab.errors import UserError
from attnlab.llm.plans.limits import W_GRID, WIDTHS  # choose_plan's bands: every width calibrated, or W_GRID alone
from attnlab.llm.plans.plan import FULL, SINKS, HeadPlan, Plan, check_budget, head_entries
from attnlab.support import Support

if TYPE_CHECKING:   # the record a plan is chosen from; the calibration measures it and imports plans/
    from attnlab.llm.calibration.statistics import Calibration

__all__ = ["TABLES", "WIDTHS", "choose_plan", "knapsack"]

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
                    per_cost = (np.where(ok, gain[l, h], 0) - gain[l, h, cur]) / np.where(extra > 0, extra, 1)
                    ratio = np.where(ok, per_cost, -1)
                    o = int(np.argmax(ratio))
                    if best is None or ratio[o] > best[0]:
                        best = (ratio[o], l, h, o)
        if best is None:
            break
        _, l, h, o = best
        spent += cost[l, h, o] - cost[l, h, choice[l, h]]
        choice[l, h] = o
    return choice


def choose_plan(cal: Calibration, budget: float, n: int | None = None, table: str | None = None,
                method: str = "attnlab",
                keep_full: np.ndarray | None = None, sliding_floor: int = 0, widths: str = "all",
                band_floor: int = 0) -> Plan:
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
    must stay full (retrieval heads) — their other options are not offered, the knapsack spends the rest;
    ``sliding_floor`` F: a head of a sliding layer is offered only bands w ≥ min(F, window − 1) (the sum of
    per-head errors does not see what short bands in several sliding layers cost together); a floor β cannot afford
    (no plan fits) is lowered to the grid's next band below it, down to none (``meta["sliding_floor"]``: the one used).
    ``band_floor`` f: every head is offered only bands w ≥ f (in a sliding layer, ≥ min(f, window − 1)): a head planned
    with w = 0 reads itself and its columns, no neighbour, and a per-head error small on calibration text may still tip
    a copy downstream (``attnlab eval-why --layers``); ``meta["band_floor"]``.
    ``widths``: ``"all"`` offers every band the calibration measured — attnlab's grid ``W_GRID`` and the candidate
    widths of the other methods it was made for (MInference's), so the plan depends on which methods were
    calibrated together; ``"own"`` offers ``W_GRID`` alone: the same plan whatever else the calibration holds.
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
        post = cal.mean("out_scale")  # a layer that normalises its attention output:
                                      # the change as it reaches the stream
        err = err * np.where(post > 0, post, 1.0)[:, None, None]
        if table == "err-rel":
            err = err / np.maximum(cal.mean("resid"), 1e-30)[:, None, None]
        if table == "err-grad":
            err = err * cal.mean("gsq")[:, None, None]
        gain = -err
    if not np.isfinite(gain).all():
        raise UserError(f"table {table}: the calibration holds non-finite values ({int((~np.isfinite(gain)).sum())}); "
                        "recalibrate")
    full_gain = 1.0 if table in ("fit", "est") else 0.0
    sinks = (0, SINKS)
    windows = cal.shape.get("windows") or [None] * L
    # cost[l, o]: entries a head of layer l runs with option o (a sliding layer's band capped at its window)
    cost = np.array([[head_entries(cal.w_grid[x], sinks[z], cal.g_grid[y], n, win) for z, x, y in options]
                     # (L, options + full)
                     + [head_entries(FULL, 0, 0, n, win)] for win in windows], dtype=np.float64)
    gain = np.concatenate([gain, np.full((L, H, 1), full_gain)], -1)   # (L, H, options + full)
    columned = np.array([z > 0 or y > 0 for z, _, y in options] + [False])
    for l, win in enumerate(windows):
        floor = max(sliding_floor, band_floor) if win is not None else band_floor
        if win is not None:  # a sliding layer runs its band alone: options with columns are not offered
            gain[l][:, columned] = -np.inf
        if floor:
            short = np.array([cal.w_grid[x] < min(floor, win - 1 if win is not None else n) for _, x, _ in options]
                             + [False])
            gain[l][:, short] = -np.inf
    if widths not in WIDTHS:
        raise ValueError(f"widths: expected one of {', '.join(WIDTHS)}, got {widths!r}")
    if widths == "own":   # the bands of attnlab's own grid only (not the other methods' candidates)
        foreign = np.array([cal.w_grid[x] not in W_GRID for _, x, _ in options] + [False])
        gain[:, :, foreign] = -np.inf
    if keep_full is not None:
        gain[np.asarray(keep_full, dtype=bool), :-1] = -np.inf
    order = np.argsort(cost, axis=-1, kind="stable")[:, None, :].repeat(H, 1)   # (L, H, O) cheapest first:
                                                                                # ties go to the cheaper
    cost = np.take_along_axis(cost[:, None, :].repeat(H, 1), order, -1)
    choice = knapsack(np.take_along_axis(gain, order, -1), cost, budget * L * H * n * (n + 1) / 2)
    if choice is None and sliding_floor:   # a floor β cannot afford: the next band of the grid below it, down to none
        lower = max((int(w) for w in cal.w_grid if 0 < w < sliding_floor), default=0)
        return choose_plan(cal, budget, n, table=table, keep_full=keep_full, method=method, sliding_floor=lower,
                           widths=widths, band_floor=band_floor)
    if choice is None:
        cheapest = (np.where(np.isfinite(np.take_along_axis(gain, order, -1)), cost, np.inf).min(-1).sum()
                    / (L * H * n * (n + 1) / 2))
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
                row.append(HeadPlan(support=Support(w=int(w), columns=np.asarray(fixed, dtype=np.int64)),
                                    dynamic=g - len(fixed)))
            else:
                row.append(HeadPlan(support=Support(w=int(w), columns=np.arange(sinks[z], dtype=np.int64)),
                                    dynamic=int(g)))
        heads.append(row)
    value = float(np.take_along_axis(gain, choice[..., None], -1).mean())
    key = "captured_mass" if full_gain == 1.0 else "mean_error"
    return Plan(heads, cal.shape["num_kv_heads"], method, budget, n,
                {key: value if full_gain else -value, "table": table, **({"widths": widths} if widths != "all" else {}),
                 **({"sliding_floor": int(sliding_floor)} if sliding_floor else {}),
                 **({"band_floor": int(band_floor)} if band_floor else {})},
                cal.shape.get("windows"))

"""The error surface of the structured fit over a (w, num_pos) grid, as CSV and PNG.

For every grid point the heads' fits are summarised (means over heads):

    stored_entries   mean budget per head
    mean_error       mean of ‖A − X‖₁ / n²  (and its max over heads)
    mass_captured    mean fraction of the attention mass kept

``sweep`` writes ``DIR/sweep.csv`` (one row per (w, num_pos)) and
``DIR/sweep.png`` (heat map of the mean error, w down, num_pos across),
each atomically (temporary file, then rename).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

from attnlab.analysis.budget import ErrorBudgetCurve, error_budget_curve
from attnlab.analysis.inputs import check_attention, check_num_pos, check_w
from attnlab.atomic import write_atomic

__all__ = ["CSV_FIELDS", "sweep", "surface_rows"]

CSV_FIELDS = ("w", "num_pos", "stored_entries", "mean_error", "max_mean_error", "mass_captured")


def surface_rows(curve: ErrorBudgetCurve) -> list[dict]:
    """One dict per (w, num_pos) with ``CSV_FIELDS``, averaged over the heads of ``curve``."""
    heads = tuple(range(curve.mean_error.ndim - 2))
    budget = curve.stored_entries.mean(axis=heads)
    err = curve.mean_error.mean(axis=heads)
    err_max = curve.mean_error.max(axis=heads)
    mass = curve.mass_captured.mean(axis=heads)
    return [
        {"w": int(w), "num_pos": int(p), "stored_entries": float(budget[i, j]), "mean_error": float(err[i, j]),
         "max_mean_error": float(err_max[i, j]), "mass_captured": float(mass[i, j])}
        for i, w in enumerate(curve.w)
        for j, p in enumerate(curve.num_pos)
    ]



def _heat_map(curve: ErrorBudgetCurve, rows: list[dict], tmp: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    z = np.array([r["mean_error"] for r in rows]).reshape(curve.w.size, curve.num_pos.size)
    budget = np.array([r["stored_entries"] for r in rows]).reshape(z.shape)
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * z.shape[1], 1.0 + 0.45 * z.shape[0]))
    im = ax.imshow(z, cmap="viridis_r", aspect="auto", origin="upper")
    ax.set_xticks(range(curve.num_pos.size), [str(p) for p in curve.num_pos])
    ax.set_yticks(range(curve.w.size), [str(w) for w in curve.w])
    ax.set_xlabel("num_pos (key columns)")
    ax.set_ylabel("w (band half-width)")
    ax.set_title(f"optimal fit, s = {curve.s}: mean error\n(numbers: stored entries per head)", fontsize=9)
    for (i, j), b in np.ndenumerate(budget):
        ax.text(j, i, f"{b:.0f}", ha="center", va="center", fontsize=7,
                color="white" if z[i, j] > z.mean() else "black")
    fig.colorbar(im, ax=ax, label="‖A − X‖₁ / n²")
    fig.tight_layout()
    fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def sweep(
    a,
    ws,
    num_pos_values,
    out_dir: str | os.PathLike,
    s: int | None = None,
    *,
    renormalize: bool = False,
    name: str = "attention",
) -> tuple[list[dict], Path, Path]:
    """Fit every head of ``a`` ``(H, n, m)`` over the grid; write ``sweep.csv`` and ``sweep.png``.

    Returns ``(rows, csv_path, png_path)``.  Everything is validated before anything is written.
    """
    a, _ = check_attention(a, name, renormalize=renormalize)
    a = a.reshape(-1, *a.shape[-2:])
    n, m = a.shape[-2:]
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir: {out} exists and is not a folder")
    ws, ps = list(ws), list(num_pos_values)
    for w in ws:
        check_w(w, max(n, m))
    for p in ps:
        check_num_pos(p, m)
    curve = error_budget_curve(a, ws, ps, s)
    rows = surface_rows(curve)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, png_path = out / "sweep.csv", out / "sweep.png"

    def write_csv(tmp: str) -> None:
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
            writer.writeheader()
            writer.writerows(rows)

    write_atomic(csv_path, write_csv)
    write_atomic(png_path, lambda tmp: _heat_map(curve, rows, tmp))
    return rows, csv_path, png_path

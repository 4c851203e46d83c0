"""The exact structured fit (band w + num_pos key columns) from streamed column and band statistics.

``attnlab.analysis.structured_fit`` with s = 0 and offset 0 stores, for a head A,

    X = band_w(A) + Σ_{t ∈ T} (column t of A off the band),   T = the num_pos columns of largest c_t(w) > 0

with c_t(w) = Σ_{i : |i−t| > w} a_it = c_t − c_t^band(w), the column mass minus
its in-band part.  Its mass captured and ℓ1 error need only

    band mass  B(w) = Σ_{|d| ≤ w} b_d       (b: the band profile)
    columns    c_t(w) = c_t − c_t^band(w)

    mass_captured(w, num_pos) = (B(w) + Σ_{top num_pos} max(c_t(w), 0)) / Σ_t c_t
    l1(w, num_pos)            = Σ_t c_t − B(w) − Σ_{top num_pos} max(c_t(w), 0)

— all O(n) per head, never the matrix.  Entries are counted in the causal
triangle (the entries a decoder row can see): the band stores
Σ_i (min(i, w) + 1), column t adds its n − 1 − t − w entries below the band.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FitTable", "fit_table", "choose"]


@dataclass(frozen=True)
class FitTable:
    """Structured fits of every head over the grid ws × num_pos; arrays ``(L, H, |ws|, |num_pos|)``."""

    ws: tuple[int, ...]
    num_pos: tuple[int, ...]
    mass_captured: np.ndarray
    l1: np.ndarray
    entries: np.ndarray        # stored entries (causal triangle)
    columns: np.ndarray        # (L, H, |ws|, max num_pos) the columns T, most off-band mass first; -1: none left


def fit_table(profile: np.ndarray, column: np.ndarray, in_band: np.ndarray, ws, num_pos) -> FitTable:
    """``FitTable`` from the streamed statistics (module docstring).

    ``profile``: (L, H, 2n − 1) band profile (index d + n − 1); ``column``: (L, H, n);
    ``in_band``: (L, H, |ws|, n) in-band column mass for each w.
    """
    # profile: (L, H, 2n-1)  column: (L, H, n)  in_band: (L, H, |ws|, n)
    L, H, n = column.shape
    ws, num_pos = tuple(int(w) for w in ws), tuple(int(k) for k in num_pos)
    total = column.sum(-1)  # (L, H)
    cum = np.cumsum(profile, -1)  # (L, H, 2n-1)
    k_max = max(num_pos) if num_pos else 0
    captured = np.zeros((L, H, len(ws), len(num_pos)))
    entries = np.zeros((L, H, len(ws), len(num_pos)), dtype=np.int64)
    columns = np.full((L, H, len(ws), k_max), -1, dtype=np.int64)
    for a, w in enumerate(ws):
        lo, hi = n - 1 - w, min(2 * n - 2, n - 1 + w)  # |d| <= w
        band = cum[..., hi] - (cum[..., lo - 1] if lo > 0 else 0.0)  # (L, H)
        c = np.clip(column - in_band[:, :, a], 0.0, None)  # (L, H, n) off-band column mass
        order = np.argsort(-c, axis=-1, kind="stable")[..., :k_max]  # (L, H, k_max)
        top = np.take_along_axis(c, order, -1)  # (L, H, k_max)
        if order.shape[-1] < k_max:  # fewer keys than columns asked (n < max num_pos): the rest stay empty
            order = np.pad(order, ((0, 0), (0, 0), (0, k_max - n)))
            top = np.pad(top, ((0, 0), (0, 0), (0, k_max - n)))
        useful = top > 0
        columns[:, :, a] = np.where(useful, order, -1)
        gained = np.concatenate([np.zeros((L, H, 1)), np.cumsum(top, -1)], -1)  # (L, H, k_max + 1)
        below = np.where(useful, np.maximum(0, n - 1 - order - w), 0)  # off-band causal entries of each column
        below = np.concatenate([np.zeros((L, H, 1), dtype=np.int64), np.cumsum(below, -1)], -1)
        band_entries = (w + 1) * (w + 2) // 2 + max(0, n - w - 1) * (w + 1) if w < n else n * (n + 1) // 2
        for b, k in enumerate(num_pos):
            captured[:, :, a, b] = band + gained[..., k]
            entries[:, :, a, b] = band_entries + below[..., k]
    l1 = total[..., None, None] - captured
    frac = np.divide(captured, total[..., None, None], out=np.ones_like(captured), where=total[..., None, None] > 0)
    return FitTable(ws, num_pos, frac, l1, entries, columns)


def choose(table: FitTable, target: float = 0.95, *, max_num_pos: int | None = None, max_w: int | None = None):
    """Per head, the grid point with the fewest entries holding ≥ ``target`` of the mass.

    Returns ``(w, num_pos, entries)`` arrays ``(L, H)``; −1 where no grid point
    (within ``max_w`` / ``max_num_pos``) reaches the target.
    """
    ok = table.mass_captured >= target  # (L, H, |ws|, |num_pos|)
    ws, nps = np.array(table.ws), np.array(table.num_pos)
    if max_w is not None:
        ok &= (ws <= max_w)[None, None, :, None]
    if max_num_pos is not None:
        ok &= (nps <= max_num_pos)[None, None, None, :]
    cost = np.where(ok, table.entries, np.iinfo(np.int64).max)
    L, H = cost.shape[:2]
    flat = cost.reshape(L, H, -1).argmin(-1)  # (L, H)
    a, b = np.unravel_index(flat, cost.shape[2:])
    found = ok.reshape(L, H, -1).any(-1)
    return (np.where(found, ws[a], -1), np.where(found, nps[b], -1),
            np.where(found, np.take_along_axis(table.entries.reshape(L, H, -1), flat[..., None], -1)[..., 0], -1))

"""The optimal structured fit: band + num_pos key columns + s sparse entries.

    X = band_w(A) + Σ_{t ∈ T} (column t of A off the band) + Ẽ_s

with T the ``num_pos`` key columns carrying the most off-band mass and Ẽ_s the
``s`` largest remaining entries (optionally capped at ε) — the thesis's
``I_n P + Ẽ`` made exact.

Why each step is optimal for its own budget (entrywise 1-norm, A ≥ 0): the
band's budget is w, the columns' is num_pos columns, the sparse step's is s
entries.
  1. Store exactly.  For any X whose support is a set S of entries,
     ‖A − X‖₁ = Σ_{(i,j)∈S} |a_ij − x_ij| + Σ_{(i,j)∉S} a_ij  ≥  Σ_{(i,j)∉S} a_ij,
     with equality iff x_ij = a_ij on S (the norm is separable over entries).
     So the best X on a support S stores A there and its error is the mass
     left out: ‖A − X‖₁ = Σ a_ij − mass(S).  Choosing the support within a
     budget = maximising the stored mass.
  2. Band.  Its entries are fixed by w (and the offset): the truncation
     band_w(A) is the best element of B_w (see ``projection``).
  3. Columns, given the band.  Column t adds c_t = Σ_{i : (i,t) ∉ band} a_it; the
     additions of distinct columns are disjoint, so mass(T) = Σ_{t∈T} c_t is
     additive and the num_pos largest c_t maximise it (exchange argument: a
     set missing one of the largest can swap it in without losing mass).
     The budget here is counted in columns, not entries: an edge column has
     more off-band entries than a central one, and no claim is made for the
     best mass per stored entry.  A column with c_t = 0 would store nothing:
     it is left out (fewer than num_pos columns, index −1).
  4. Sparse, given band and columns.  Each further entry adds its own value,
     so the s largest remaining entries maximise the stored mass; zeros
     add nothing and are not stored (fewer than s entries then).  With the
     cap |e_ij| ≤ ε the best stored value is min(a_ij, ε) and, min(·, ε) being
     monotone, the s largest entries are still the best choice.
Steps 3 and 4 are each optimal given the previous ones (the thesis's
structure: positions first, then the sparse error); the joint choice of
(T, S) can do better when a column's mass sits in a single entry.

Budget = number of stored entries = |band ∪ columns| + number of sparse
entries (≤ s; real, non-zero entries only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.analysis.inputs import as_batch, check_num_pos, check_w, valid_mask
from attnlab.analysis.projection import best_offsets
from attnlab.support import Support, top_columns

__all__ = ["StructuredFit", "structured_fit"]


@dataclass(frozen=True)
class StructuredFit:
    """Result of ``structured_fit``; batch shape ``(...)``."""

    x: np.ndarray               # (..., n, m) the fit X
    support: Support            # S = B_{w,o} ∪ (rows × T); the sparse entries are ``stored & ~support.dense``
    stored: np.ndarray          # (..., n, m) bool: entries X stores
    columns: np.ndarray         # (..., num_pos) the key columns T, most off-band mass first; -1: none left with mass
    offset: np.ndarray          # (...) diagonal offset of the band
    stored_entries: np.ndarray  # (...) budget: |band ∪ columns| + sparse entries
    mass_captured: np.ndarray   # (...) Σ x_ij / Σ a_ij
    l1: np.ndarray              # (...) ‖A − X‖₁
    mean_error: np.ndarray      # (...) ‖A − X‖₁ / (n·m)


def structured_fit(
    a,
    w: int,
    num_pos: int,
    s: int | None = None,
    *,
    eps: float | None = None,
    offset=0,
    max_shift: int | None = None,
    lengths=None,
    key_lengths=None,
) -> StructuredFit:
    """Optimal band + ``num_pos`` columns + ``s`` sparse entries fit of ``a`` (module docstring).

    ``a``: non-negative ``(..., n, m)``; ``0 ≤ w < max(n, m)`` (``w < n`` for square
    heads; a cross-attention band may be as wide as the longer side); ``s`` defaults to ``n`` (one entry per
    row on average); ``eps`` caps the sparse entries; ``offset`` shifts the
    band (an integer, an array ``(...)``, or ``"auto"`` for the best offset
    of each head, searched within ``|o| ≤ max_shift``).
    """
    a = as_batch(a, "a")
    # a: (..., n, m)
    n, m = a.shape[-2:]
    batch = a.shape[:-2]
    w = check_w(w, max(n, m))
    num_pos = check_num_pos(num_pos, m)
    s = n if s is None else s
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
        raise ValueError(f"s: expected an integer >= 0, got {s!r}")
    if eps is not None and not eps > 0:
        raise ValueError(f"eps: expected a positive cap, got {eps!r}")
    valid = valid_mask(a.shape, lengths, key_lengths)  # (..., n, m) | None
    if valid is not None:
        a = np.where(valid, a, 0.0)

    if isinstance(offset, str):
        if offset != "auto":
            raise ValueError(f"offset: expected an integer, an array or 'auto', got {offset!r}")
        offset = best_offsets(a, w, max_shift=max_shift, lengths=lengths, key_lengths=key_lengths)
    offset = np.asarray(offset)
    if not np.issubdtype(offset.dtype, np.integer):
        raise ValueError(f"offset: expected integers, got dtype {offset.dtype}")
    offset = np.broadcast_to(offset, batch)
    one_offset = offset.size == 0 or bool((offset == offset.flat[0]).all())

    # 2. band B_{w,o}, then 3. the columns T with the most off-band mass (attnlab.support: the one definition of S)
    support = Support(w=w, offset=offset.flat[0] if one_offset and offset.size else offset)
    band = support.band(n, m)  # (n, m), or (..., n, m) with per-head offsets
    if valid is not None:
        band = band & valid
    c = (a * ~band).sum(-2)  # (..., m): off-band mass c_t of each column
    support = Support(w=w, offset=offset, columns=top_columns(c, num_pos))  # (..., num_pos), −1: no mass left
    columns = support.columns
    stored = band | support.column_mask(m)[..., None, :]  # (..., n, m)
    if valid is not None:
        stored = stored & valid
    n_structured = stored.sum((-2, -1))

    # 4. sparse: the s largest remaining real entries (ties: lowest flat index)
    n_sparse = np.zeros(batch, dtype=np.int64)
    x = np.where(stored, a, 0.0)
    if s > 0:
        rest = np.where(stored, -1.0, a)  # stored entries and padding never chosen
        if valid is not None:
            rest = np.where(valid, rest, -2.0)
        rest = rest.reshape(-1, n * m)  # (B, n*m)
        k = min(s, n * m)
        t = -np.partition(-rest, k - 1, axis=-1)[:, k - 1 : k]  # k-th largest value, (B, 1)
        pick = rest > t
        ties = rest == t
        need = k - pick.sum(-1)  # (B,)
        crowded = ties.sum(-1) > need  # more ties than places: keep the first ones
        pick[~crowded] |= ties[~crowded]
        if crowded.any():
            tc = ties[crowded]
            pick[crowded] |= tc & (np.cumsum(tc, axis=-1) <= need[crowded, None])
        pick = pick.reshape(a.shape) & (rest.reshape(a.shape) > 0)  # only real, not yet stored, non-zero entries
        n_sparse = pick.sum((-2, -1))
        x = np.where(pick, a if eps is None else np.minimum(a, eps), x)
        stored = stored | pick

    total = a.sum((-2, -1))
    l1 = np.abs(a - x).sum((-2, -1))
    entries = np.full(batch, n * m) if valid is None else valid.sum((-2, -1))
    return StructuredFit(
        x=x,
        support=support,
        stored=np.broadcast_to(stored, a.shape),
        columns=columns,
        offset=np.array(offset),
        stored_entries=n_structured + n_sparse,
        mass_captured=np.divide(x.sum((-2, -1)), total, out=np.ones_like(total), where=total > 0),
        l1=l1,
        mean_error=l1 / entries,
    )

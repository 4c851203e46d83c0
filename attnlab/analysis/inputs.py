"""Validation of attention arrays at the boundary of the analysis.

An attention batch is an array ``a`` of shape ``(..., n, m)``: ``n`` queries,
``m`` keys, every row a probability distribution over the keys,

    a_ij ≥ 0,   Σ_j a_ij = 1.

Padding is excluded by ``lengths`` (the number of real queries of each matrix,
shape ``(...)``) and ``key_lengths`` (the number of real keys; defaults to
``lengths`` for self-attention).  Entries outside the ``lengths × key_lengths``
top-left block are ignored (set to 0) by every analysis; a batch of one length
can simply be cut to ``a[..., :n, :n]`` before.

Everything that is wrong raises ``ValueError`` naming the argument; rows whose
sums are off by more than ``atol`` give a ``RowSumWarning`` with the largest
deviation, or are renormalised with ``renormalize=True``.
"""

from __future__ import annotations

import warnings

import numpy as np

from attnlab.support import check_num_pos, check_w  # noqa: F401  (re-exported: the one check of w and num_pos)

__all__ = [
    "RowSumWarning",
    "as_batch",
    "check_attention",
    "check_num_pos",
    "check_w",
    "valid_mask",
]


class RowSumWarning(UserWarning):
    """Rows of an attention matrix do not sum to 1."""


def as_batch(a, name: str = "a", *, square: bool = False, nonnegative: bool = True) -> np.ndarray:
    """``a`` as a float64 array of shape ``(..., n, m)``: non-empty, finite (and ≥ 0).

    Raises ``ValueError`` naming ``name`` otherwise.
    """
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}: not a numeric array ({err})") from None
    # arr: (..., n, m)
    if arr.ndim < 2:
        raise ValueError(f"{name}: expected an array of shape (..., n, m), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name}: empty array of shape {arr.shape}")
    if square and arr.shape[-1] != arr.shape[-2]:
        raise ValueError(f"{name}: expected square matrices (..., n, n), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise ValueError(f"{name}: {bad} entries are NaN or Inf")
    if nonnegative and (arr < 0).any():
        raise ValueError(f"{name}: {int((arr < 0).sum())} negative entries (smallest {arr.min():.3g})")
    return arr


def valid_mask(shape: tuple[int, ...], lengths=None, key_lengths=None, name: str = "lengths") -> np.ndarray | None:
    """Boolean mask ``(..., n, m)`` of the real (non-padding) entries, or ``None`` if no lengths.

        valid_ij = (i < lengths) ∧ (j < key_lengths)
    """
    # shape: (..., n, m); lengths, key_lengths: (...) or scalars
    if lengths is None and key_lengths is None:
        return None
    n, m = shape[-2], shape[-1]
    batch = shape[:-2]
    q_len = np.full(batch, n) if lengths is None else np.asarray(lengths)
    if key_lengths is None:
        k_len = q_len if n == m and lengths is not None else np.full(batch, m)
    else:
        k_len = np.asarray(key_lengths)
    for arg, val, top in ((name, q_len, n), ("key_lengths", k_len, m)):
        if not np.issubdtype(val.dtype, np.integer):
            raise ValueError(f"{arg}: expected integers, got dtype {val.dtype}")
        try:
            np.broadcast_to(val, batch)
        except ValueError:
            raise ValueError(f"{arg}: shape {val.shape} does not match the batch shape {batch}") from None
        if (val < 1).any() or (val > top).any():
            raise ValueError(f"{arg}: lengths must lie in 1..{top}, got {val.min()}..{val.max()}")
    i = np.arange(n)[:, None]
    j = np.arange(m)[None, :]
    return (i < q_len[..., None, None]) & (j < k_len[..., None, None])


def check_attention(
    a,
    name: str = "attention",
    *,
    square: bool = False,
    lengths=None,
    key_lengths=None,
    renormalize: bool = False,
    atol: float = 1e-4,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Validate an attention batch; return ``(a, mask)`` with padding zeroed.

    Checks shape ``(..., n, m)`` (``n == m`` if ``square``), non-empty, finite,
    non-negative, and ``|Σ_j a_ij − 1| ≤ atol`` on every real row.  Rows that
    fail give one ``RowSumWarning`` naming the largest deviation, or are
    divided by their sum if ``renormalize`` (a row of zeros cannot be and is a
    ``ValueError``).
    """
    arr = as_batch(a, name, square=square)
    # arr: (..., n, m); mask: (..., n, m) | None
    mask = valid_mask(arr.shape, lengths, key_lengths)
    if mask is not None:
        arr = np.where(mask, arr, 0.0)
        real_rows = mask.any(-1)
    else:
        real_rows = np.ones(arr.shape[:-1], dtype=bool)
    row_sum = arr.sum(-1)  # (..., n)
    dev = np.where(real_rows, np.abs(row_sum - 1.0), 0.0)
    worst = float(dev.max())
    if worst > atol:
        if renormalize:
            if ((row_sum == 0) & real_rows).any():
                raise ValueError(f"{name}: {int(((row_sum == 0) & real_rows).sum())} rows are all zero and cannot be "
                                 "renormalised")
            arr = np.where(real_rows[..., None], arr / np.where(row_sum == 0, 1.0, row_sum)[..., None], 0.0)
        else:
            idx = np.unravel_index(int(dev.argmax()), dev.shape)
            warnings.warn(
                f"{name}: {int((dev > atol).sum())} rows do not sum to 1; largest deviation {worst:.3g} "
                f"at index {tuple(int(k) for k in idx)} (renormalize to fix)",
                RowSumWarning,
                stacklevel=2,
            )
    return arr, mask



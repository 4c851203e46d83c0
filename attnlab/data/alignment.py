"""Measures of a word alignment: how far translation moves words.

An alignment is a set of links ``(i, j)``: source word ``i`` ↔ target word ``j``.

- Raw displacement ``max |i − j|`` over the links: the half-width ``w`` of the
  band ``|i − j| ≤ w`` of the cross-attention matrix that contains every link.
- Reordering distance: for a link ``ℓ = (i, j)``, the number of distinct source
  words ``i'`` linked to some ``j'`` with ``(i' − i)(j' − j) < 0`` (links that
  cross ``ℓ``); the distance of the alignment is the maximum over links.  It
  counts reorderings only — insertions, deletions and contractions
  (``of the`` → ``del``) do not change it — and is 0 exactly for monotone
  alignments.  ``the big red car`` → ``la macchina rossa grande``: 2.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def _links(alignment: Iterable[tuple[int, int]]) -> np.ndarray:
    a = np.asarray(list(alignment), dtype=np.int64).reshape(-1, 2)
    if (a < 0).any():
        raise ValueError("alignment has a negative index")
    return a


def max_displacement(alignment: Iterable[tuple[int, int]]) -> int:
    """``max |i − j|`` over the links (0 for an empty alignment)."""
    a = _links(alignment)
    return int(np.abs(a[:, 0] - a[:, 1]).max()) if len(a) else 0


def reorder_distance(alignment: Iterable[tuple[int, int]]) -> int:
    """``max_ℓ #{ i' : ∃ j', (i' − i)(j' − j) < 0 }``: the most source words one link crosses."""
    a = _links(alignment)  # (L, 2)
    if len(a) < 2:
        return 0
    i, j = a[:, 0], a[:, 1]
    crosses = (i[:, None] - i[None, :]) * (j[:, None] - j[None, :]) < 0  # (L, L)
    onehot = i[:, None] == np.unique(i)[None, :]  # (L, S): link → its source word
    crossed_words = (crosses.astype(np.int64) @ onehot.astype(np.int64)) > 0  # (L, S)
    return int(crossed_words.sum(axis=1).max())


def alignment_matrix(alignment: Iterable[tuple[int, int]], n_src: int, n_tgt: int) -> np.ndarray:
    """The 0/1 matrix ``A`` of shape (n_tgt, n_src) with ``A[j, i] = 1`` for each link (i, j).

    Oriented like cross-attention weights (queries = target rows, keys = source columns).
    """
    a = _links(alignment)
    if len(a) and (a[:, 0].max() >= n_src or a[:, 1].max() >= n_tgt):
        raise ValueError(f"alignment index out of range for n_src={n_src}, n_tgt={n_tgt}")
    A = np.zeros((n_tgt, n_src), dtype=np.float32)
    A[a[:, 1], a[:, 0]] = 1.0
    return A

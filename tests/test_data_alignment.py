"""Alignment measures: reordering distance and raw displacement."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from attnlab.data import alignment_matrix, max_displacement, reorder_distance


def test_examples():
    # the big red car → la macchina rossa grande
    a = [(0, 0), (1, 3), (2, 2), (3, 1)]
    assert reorder_distance(a) == 2 and max_displacement(a) == 2
    # of the house → della casa: a contraction is not a reordering
    assert reorder_distance([(0, 0), (1, 0), (2, 1)]) == 0
    # she sees him → lo vede (she unaligned)
    assert reorder_distance([(1, 1), (2, 0)]) == 1
    assert reorder_distance([]) == 0 and max_displacement([]) == 0


@given(st.permutations(list(range(12))))
def test_permutation_bounds(perm):
    a = list(enumerate(perm))
    d = reorder_distance(a)
    assert d >= max_displacement(a)  # a word moved by k positions crosses at least k others
    assert (d == 0) == (list(perm) == sorted(perm))


@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=30))
def test_monotone_insertions_do_not_count(links):
    # sorting both coordinates independently gives a monotone alignment
    i = sorted(x for x, _ in links)
    j = sorted(y for _, y in links)
    assert reorder_distance(list(zip(i, j))) == 0


def test_alignment_matrix():
    A = alignment_matrix([(0, 1), (2, 0)], n_src=3, n_tgt=2)
    assert A.shape == (2, 3) and A[1, 0] == 1 and A[0, 2] == 1 and A.sum() == 2
    assert np.issubdtype(A.dtype, np.floating)

"""Σ1, Σ2(w, p), Σ3(T, W) generators: row-stochastic, supports, ε and density, seeds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.analysis.families import planted_heads, sigma1, sigma2, sigma3, sparse_error

FAST = settings(max_examples=30, deadline=None)


def _rows_sum_to_one(x):
    return np.allclose(x.sum(-1), 1.0) and (x >= 0).all()


@FAST
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 20), density=st.floats(0, 0.5), eps=st.floats(0, 0.2))
def test_generators_are_row_stochastic_and_respect_eps_and_density(seed, n, density, eps):
    k = int(round(density * n * n))
    for gen, kw in ((sigma1, {}), (sigma2, {"w": min(2, n - 1), "p": 0.5}), (sigma3, {"num_pos": min(2, n)})):
        x, p, e = gen(n, size=(3,), density=density, eps=eps, rng=seed, parts=True, **kw)
        assert x.shape == (3, n, n)
        assert _rows_sum_to_one(x) and _rows_sum_to_one(p)
        assert (e >= 0).all() and (e <= eps).all()
        assert ((e > 0).sum((-2, -1)) == (k if eps > 0 else 0)).all()
        assert np.allclose(x, (p + e) / (p + e).sum(-1, keepdims=True))
        # off the support of P, X is the (shrunk) error: |x_ij| <= eps, at most k such entries
        off = p == 0
        assert (x[off] <= eps + 1e-15).all()
        assert ((x > 0) & off).sum((-2, -1)).max() <= k


def test_sigma1_is_the_shifted_identity():
    x = sigma1(6, offset=-1)
    assert x[0, 0] == 1 and all(x[i, i - 1] == 1 for i in range(1, 6))
    assert np.array_equal(sigma1(5), np.eye(5))


def test_sigma2_support_is_the_band_with_dropped_blocks():
    x = sigma2(12, w=3, p=0.0, size=4, rng=1)
    band = np.abs(np.subtract.outer(np.arange(12), np.arange(12))) <= 3
    assert ((x > 0) == band).all()
    only_diag = sigma2(12, w=3, p=1.0, size=2, rng=1)
    assert np.array_equal(only_diag, np.broadcast_to(np.eye(12), (2, 12, 12)))
    some = sigma2(40, w=5, p=0.5, block=2, size=50, rng=2)
    band40 = np.abs(np.subtract.outer(np.arange(40), np.arange(40))) <= 5
    kept = ((some > 0) & band40).sum() - 50 * 40  # off-diagonal band cells kept
    total = 50 * (band40.sum() - 40)
    assert ((some > 0) <= band40).all()
    assert 0.3 < kept / total < 0.7


def test_sigma3_columns_and_windows():
    x = sigma3(10, T=[2, 7], W=[3, 10], rng=0)
    support = x > 0
    assert support[np.arange(10), np.arange(10)].all()
    assert support[[1, 2, 3], 2].all() and not support[[0, 4, 5, 6, 7, 8, 9], 2].any()
    assert support[:, 7].all()
    assert _rows_sum_to_one(x)
    with pytest.raises(ValueError, match="^T:"):
        sigma3(5, T=[5], W=[1])
    with pytest.raises(ValueError, match="^W:"):
        sigma3(5, T=[1], W=[0])


def test_rectangular_and_seeded():
    a = sigma2(5, 9, w=2, p=0.2, size=(2, 3), density=0.1, eps=0.05, rng=7)
    b = sigma2(5, 9, w=2, p=0.2, size=(2, 3), density=0.1, eps=0.05, rng=np.random.default_rng(7))
    assert a.shape == (2, 3, 5, 9) and np.array_equal(a, b)
    assert _rows_sum_to_one(sigma1(9, 4, size=2)) and _rows_sum_to_one(sigma3(9, 4, num_pos=2, size=3, rng=0))
    assert not np.array_equal(a, sigma2(5, 9, w=2, p=0.2, size=(2, 3), density=0.1, eps=0.05, rng=8))


def test_sparse_error_and_bad_arguments():
    e = sparse_error((4, 6, 6), 0.25, 0.1, rng=0)
    assert ((e > 0).sum((-2, -1)) == 9).all() and e.max() <= 0.1
    with pytest.raises(ValueError, match="^density:"):
        sparse_error((3, 3), 1.5, 0.1)
    with pytest.raises(ValueError, match="^eps:"):
        sparse_error((3, 3), 0.5, -1)
    with pytest.raises(ValueError, match="^w:"):
        sigma2(4, w=4)
    with pytest.raises(ValueError, match="^p:"):
        sigma2(4, w=1, p=2)
    with pytest.raises(ValueError, match="^n:"):
        sigma1(0)


def test_planted_heads_are_softmax_like():
    a = planted_heads(8, 16, rng=0)
    assert a.shape == (8, 16, 16) and _rows_sum_to_one(a) and (a > 0).all()
    assert np.array_equal(a, planted_heads(8, 16, rng=0))
    # the previous-token head puts its largest weight on i-1
    assert (a[1].argmax(-1)[1:] == np.arange(15)).mean() > 0.6

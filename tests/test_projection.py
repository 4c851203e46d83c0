"""Band space B_w, band projection, shifted bands, the optimal structured fit, distances, budgets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.analysis.budget import choose_budget, choose_model_budget, error_budget_curve
from attnlab.analysis.distances import frobenius_distance, l1_distance, mass_captured, mean_error, output_error
from attnlab.analysis.families import planted_heads, sigma2
from attnlab.analysis.projection import band_dimension, band_mask, band_mass_by_offset, best_offsets, project_band
from attnlab.analysis.structured_fit import structured_fit

FAST = settings(max_examples=40, deadline=None)


def _stochastic(rng, shape):
    a = rng.random(shape) ** 3
    return a / a.sum(-1, keepdims=True)


# ---- B_w ---------------------------------------------------------------------------------
@FAST
@given(n=st.integers(1, 60), data=st.data())
def test_band_dimension_formula(n, data):
    w = data.draw(st.integers(0, n - 1))
    assert band_dimension(n, w) == n + 2 * sum(n - i for i in range(1, w + 1))


@FAST
@given(n=st.integers(1, 25), m=st.integers(1, 25), data=st.data())
def test_band_dimension_rectangular_counts_entries(n, m, data):
    w = data.draw(st.integers(0, max(n, m) - 1))
    assert band_dimension(n, w, m) == sum(1 for i in range(n) for j in range(m) if abs(i - j) <= w)


def test_band_dimension_rejects_bad_w():
    with pytest.raises(ValueError, match="^w:"):
        band_dimension(3, 3)  # 0 <= w < n; beyond, n + 2·Σ(n − k) stops counting entries (w = 5 gives 3)
    with pytest.raises(ValueError, match="^w:"):
        band_dimension(3, -1)


@FAST
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 12), m=st.integers(2, 12), data=st.data())
def test_no_band_matrix_beats_the_projection(seed, n, m, data):
    w = data.draw(st.integers(0, max(n, m) - 1))
    rng = np.random.default_rng(seed)
    a = rng.random((n, m))
    p = project_band(a, w)
    band = band_mask(n, m, w)
    # random band matrices, and the projection perturbed inside the band
    b = np.where(band, rng.normal(size=(64, n, m)), 0.0)
    b = np.concatenate([b, p + np.where(band, rng.normal(scale=1e-3, size=(64, n, m)), 0.0)])
    assert (l1_distance(a, b) >= l1_distance(a, p) - 1e-12).all()
    assert (frobenius_distance(a, b) >= frobenius_distance(a, p) - 1e-12).all()
    assert np.isclose(l1_distance(a, p), a[~band].sum())


def test_projection_rejects_bad_w():
    a = np.eye(4)
    with pytest.raises(ValueError, match="^w:"):
        project_band(a, -1)
    with pytest.raises(ValueError, match="^w:"):
        project_band(a, 4)


# ---- shifted band --------------------------------------------------------------------------
def test_best_offsets_finds_previous_and_next_token_heads():
    n = 10
    i = np.arange(n)
    prev = np.zeros((n, n)); prev[i, np.clip(i - 1, 0, None)] = 1
    nxt = np.zeros((n, n)); nxt[i, np.clip(i + 1, None, n - 1)] = 1
    batch = np.stack([prev, np.eye(n), nxt])
    assert best_offsets(batch, 0).tolist() == [-1, 0, 1]
    # w = 1: the band around 0 already holds everything -> tie broken toward 0
    assert best_offsets(batch, 1).tolist() == [0, 0, 0]
    fit = structured_fit(batch, 0, 0, 0, offset="auto")
    assert fit.offset.tolist() == [-1, 0, 1]
    assert fit.l1.tolist() == [1.0, 0.0, 1.0]  # only the clipped first/last row is off the shifted diagonal


def test_band_mass_by_offset_matches_direct_sums():
    rng = np.random.default_rng(1)
    a = rng.random((2, 5, 7))
    offsets, mass = band_mass_by_offset(a, 1)
    for k, o in enumerate(offsets):
        direct = np.where(band_mask(5, 7, 1, o), a, 0).sum((-2, -1))
        assert np.allclose(mass[:, k], direct)


# ---- optimal structured fit ----------------------------------------------------------------
@FAST
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(8, 24), w=st.integers(0, 2), k=st.integers(0, 8))
def test_planted_band_columns_sparse_recovered_exactly(seed, n, w, k):
    rng = np.random.default_rng(seed)
    band = band_mask(n, n, w)
    t = rng.choice(n, size=2, replace=False)
    cols = np.zeros((n, n), bool); cols[:, t] = True
    a = np.where(band, rng.uniform(0.2, 1.0, (n, n)), 0.0)
    a = np.where(cols & ~band, rng.uniform(0.5, 1.0, (n, n)), a)
    free = np.flatnonzero(~(band | cols))
    k = min(k, free.size)
    where = rng.choice(free, size=k, replace=False)
    a.flat[where] = rng.uniform(0.01, 0.1, k)
    fit = structured_fit(a, w, 2, k)
    assert fit.l1.item() == 0.0
    assert set(fit.columns.tolist()) == set(t.tolist())
    assert fit.mass_captured.item() == pytest.approx(1.0)
    assert fit.stored_entries.item() == (band | cols).sum() + k


def test_column_choice_is_optimal_given_the_band():
    rng = np.random.default_rng(2)
    a = _stochastic(rng, (6, 7, 7))
    fit = structured_fit(a, 1, 2, 0)
    band = band_mask(7, 7, 1)
    for h in range(a.shape[0]):
        best = min(a[h][~(band | np.isin(np.arange(7), pair)[None, :])].sum() for pair in itertools.combinations(range(7), 2))
        assert fit.l1[h] == pytest.approx(best)


def test_sparse_step_takes_the_largest_and_respects_eps():
    rng = np.random.default_rng(3)
    a = _stochastic(rng, (4, 9, 9))
    s = 5
    fit = structured_fit(a, 0, 1, s)
    base = structured_fit(a, 0, 1, 0)
    rest = np.where(base.stored, 0.0, a).reshape(4, -1)
    top = np.sort(rest, axis=-1)[:, -s:].sum(-1)
    assert np.allclose(base.l1 - fit.l1, top)
    capped = structured_fit(a, 0, 1, s, eps=0.05)
    extra = capped.x - base.x
    assert (extra <= 0.05 + 1e-15).all() and ((extra > 0).sum((-2, -1)) <= s).all()
    assert np.allclose(base.l1 - capped.l1, np.minimum(np.sort(rest, axis=-1)[:, -s:], 0.05).sum(-1))


def test_fit_errors_relations_and_budget():
    rng = np.random.default_rng(4)
    a = _stochastic(rng, (5, 12, 12))
    fit = structured_fit(a, 2, 1)
    assert np.allclose(fit.l1, l1_distance(a, fit.x))
    assert np.allclose(fit.mean_error, mean_error(a, fit.x))
    assert np.allclose(fit.mass_captured, mass_captured(a, fit.x))
    assert np.allclose(fit.l1, (1 - fit.mass_captured) * a.sum((-2, -1)))
    off_band_in_col = (~band_mask(12, 12, 2))[:, fit.columns[:, 0]].sum(0)  # (5,)
    assert (fit.stored_entries == band_dimension(12, 2) + off_band_in_col + 12).all()
    v = rng.normal(size=(5, 12, 4))
    assert np.allclose(output_error(a, a, v), 0.0)
    assert (output_error(a, fit.x, v) > 0).all()


@FAST
@given(seed=st.integers(0, 2**32 - 1))
def test_fit_batch_equals_heads_one_by_one_with_padding(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 11, size=4)
    a = np.zeros((4, 10, 10))
    cut = []
    for h, L in enumerate(lengths):
        m = _stochastic(rng, (L, L))
        a[h, :L, :L] = m
        cut.append(m)
    fit = structured_fit(a, 1, 2, 4, lengths=lengths)
    for h, m in enumerate(cut):
        one = structured_fit(m, 1, 2, 4)
        L = lengths[h]
        assert fit.l1[h] == pytest.approx(one.l1)
        assert fit.mean_error[h] == pytest.approx(one.mean_error)
        assert fit.stored_entries[h] == one.stored_entries
        assert np.array_equal(fit.x[h, :L, :L], one.x)
        assert not fit.x[h, L:, :].any() and not fit.x[h, :, L:].any()


def test_fit_rectangular_cross_attention():
    rng = np.random.default_rng(5)
    a = _stochastic(rng, (3, 6, 11))
    fit = structured_fit(a, 2, 3, 4)
    for h in range(3):
        one = structured_fit(a[h], 2, 3, 4)
        assert np.array_equal(fit.x[h], one.x)
    assert fit.x.shape == a.shape


@pytest.mark.parametrize(
    "kw, arg",
    [({"w": -1}, "w"), ({"w": 8}, "w"), ({"num_pos": 9}, "num_pos"), ({"num_pos": -1}, "num_pos"), ({"s": -2}, "s"), ({"eps": 0.0}, "eps")],
)
def test_fit_bad_arguments(kw, arg):
    a = np.full((8, 8), 1 / 8)
    args = {"w": 1, "num_pos": 1, "s": 2} | kw
    with pytest.raises(ValueError, match=f"^{arg}:"):
        structured_fit(a, args.pop("w"), args.pop("num_pos"), args.pop("s"), **args)


def test_fit_stores_no_zeros():
    """Zero entries and zero-mass columns cost budget and capture nothing: they are not stored."""
    fit = structured_fit(np.eye(4), 0, 1, 4)
    assert fit.stored_entries == 4 and fit.l1 == 0 and fit.columns.tolist() == [-1]
    a = np.zeros((6, 6))
    a[:, 0] = 0.5
    a[np.arange(6), np.arange(6)] += 0.5  # identity + one column: columns beyond it carry nothing
    fit = structured_fit(a, 0, 3, 6)
    assert fit.columns.tolist() == [0, -1, -1]
    assert fit.stored_entries == 6 + 5 and fit.l1 == 0


@pytest.mark.parametrize(
    "a, arg",
    [(np.full((3, 3), np.nan), "a"), (-np.eye(3), "a"), (np.zeros((0, 3)), "a"), (np.ones(3), "a")],
)
def test_fit_bad_arrays(a, arg):
    with pytest.raises(ValueError, match=f"^{arg}:"):
        structured_fit(a, 0, 0)


# ---- budget ----------------------------------------------------------------------------------
def test_budget_choice_is_the_smallest_budget_reaching_the_target():
    a = planted_heads(6, 12, rng=0)
    curve = error_budget_curve(a, range(0, 6), range(0, 4), s=6)
    assert curve.mean_error.shape == (6, 6, 4)
    assert (np.diff(curve.mean_error, axis=-2) <= 1e-12).all()  # wider band never hurts
    for target in (0.02, 0.01, 0.005):
        choice = choose_budget(curve, target)
        for h in range(6):
            ok = curve.mean_error[h] <= target
            assert choice.reached[h] == ok.any()
            if ok.any():
                assert choice.stored_entries[h] == curve.stored_entries[h][ok].min()
                assert curve.mean_error[h][curve.w == choice.w[h], curve.num_pos == choice.num_pos[h]] <= target
    model = choose_model_budget(curve, 0.01)
    ok = curve.mean_error.max(0) <= 0.01
    assert model.stored_entries == curve.stored_entries.sum(0)[ok].min()
    lost = choose_budget(curve, 0.1, metric="lost_mass")
    assert (lost.error <= 0.1).all()
    with pytest.raises(ValueError, match="^metric:"):
        choose_budget(curve, 0.1, metric="l7")
    with pytest.raises(ValueError, match="^w:"):
        error_budget_curve(a, [12], [0])


def test_sigma2_band_is_fitted_by_band_alone():
    x = sigma2(10, w=2, p=0.4, size=5, rng=0)
    fit = structured_fit(x, 2, 0, 0)
    assert np.allclose(fit.l1, 0.0)

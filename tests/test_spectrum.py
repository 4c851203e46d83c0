"""Singular values, effective and energy ranks, norms, cumulative energy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.analysis.families import planted_heads
from attnlab.analysis.spectrum import cumulative_energy, effective_rank, energy_rank, singular_values, spectrum


def test_identity_and_rank_one():
    eye = spectrum(np.eye(8))
    assert eye.effective_rank == pytest.approx(8) and eye.energy_rank == 8
    assert eye.spectral_norm == pytest.approx(1) and eye.frobenius_norm == pytest.approx(np.sqrt(8))
    one = np.zeros((8, 8)); one[:, 3] = 1.0  # every query attends key 3
    s = spectrum(one)
    assert s.effective_rank == pytest.approx(1) and s.energy_rank == 1
    assert s.spectral_norm == pytest.approx(np.sqrt(8))
    assert np.allclose(s.energy, 1.0)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 12), m=st.integers(2, 12))
def test_norms_and_batch_equals_one_by_one(seed, n, m):
    a = np.random.default_rng(seed).random((3, n, m))
    s = spectrum(a, tau=0.95)
    assert np.allclose(s.spectral_norm, np.linalg.norm(a, 2, axis=(-2, -1)))
    assert np.allclose(s.frobenius_norm, np.linalg.norm(a, "fro", axis=(-2, -1)))
    assert (np.diff(s.energy, axis=-1) >= -1e-12).all() and np.allclose(s.energy[..., -1], 1)
    assert ((1 <= s.effective_rank) & (s.effective_rank <= min(n, m) + 1e-9)).all()
    for h in range(3):
        one = spectrum(a[h], tau=0.95)
        assert np.allclose(one.sigma, s.sigma[h]) and one.energy_rank == s.energy_rank[h]


def test_padding_does_not_change_the_spectrum():
    a = planted_heads(2, 6, rng=0)
    padded = np.zeros((2, 9, 9)); padded[:, :6, :6] = a; padded[:, 6:, :] = 3.0
    s_pad = spectrum(padded, lengths=np.array([6, 6]))
    s = spectrum(a)
    assert np.allclose(s_pad.sigma[:, :6], s.sigma) and np.allclose(s_pad.sigma[:, 6:], 0)
    assert np.allclose(s_pad.effective_rank, s.effective_rank)
    assert np.array_equal(s_pad.energy_rank, s.energy_rank)


def test_row_stochastic_spectral_norm_at_least_one_and_bad_input():
    a = planted_heads(4, 10, rng=1)
    assert (singular_values(a)[..., 0] >= 1 - 1e-12).all()
    rng = np.random.default_rng(2)
    for n, m in ((1, 4), (3, 7), (7, 3)):  # rectangular: σ_1 ≥ √(n/m), reached by the uniform rows
        x = rng.random((5, n, m))
        x /= x.sum(-1, keepdims=True)
        assert (singular_values(x)[..., 0] >= np.sqrt(n / m) - 1e-12).all()
        assert np.isclose(singular_values(np.full((n, m), 1 / m))[0], np.sqrt(n / m))
    assert effective_rank(np.zeros(3)) == 0 and energy_rank(np.zeros(3)) == 0
    assert np.allclose(cumulative_energy(np.zeros(3)), 1)
    with pytest.raises(ValueError, match="^tau:"):
        energy_rank(np.ones(3), 0)
    with pytest.raises(ValueError, match="^a:"):
        singular_values(np.array([[np.nan]]))

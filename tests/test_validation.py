"""The thesis's random-search protocol: definition, seeds, batch == one by one, padding."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.analysis.families import planted_heads, sigma1, sigma2, sigma3
from attnlab.analysis.structured_fit import structured_fit
from attnlab.analysis.validation import random_search


def test_matches_a_direct_implementation_of_the_protocol():
    a = planted_heads(3, 10, rng=1)
    rs = random_search(a, 2, 1, n_attempts=7, seed=5, density=0.1, eps=0.05, p=0.3)
    rng = np.random.default_rng(5)
    draws = np.concatenate([
        sigma1(10, size=7, density=0.1, eps=0.05, rng=rng),
        sigma2(10, w=2, p=0.3, size=7, density=0.1, eps=0.05, rng=rng),
        sigma3(10, num_pos=1, size=7, density=0.1, eps=0.05, rng=rng),
    ])
    for h in range(3):
        d = [np.abs(a[h] - x).sum() for x in draws]
        assert rs.min_distance[h] == pytest.approx(min(d))
        assert rs.mean_error[h] == pytest.approx(min(d) / 100)
        assert rs.family[h] == int(np.argmin(d)) // 7


def test_batch_equals_heads_one_by_one_and_seeds():
    a = planted_heads(5, 12, rng=2).reshape(5, 12, 12)
    rs = random_search(a, 3, 2, seed=11)
    for h in range(5):
        one = random_search(a[h], 3, 2, seed=11)
        assert one.min_distance == rs.min_distance[h]
    again = random_search(a, 3, 2, seed=11)
    assert np.array_equal(again.min_distance, rs.min_distance)
    other = random_search(a, 3, 2, seed=12)
    assert not np.array_equal(other.min_distance, rs.min_distance)
    # nested batch shape (L, H) and chunking give the same numbers
    nested = random_search(a[:4].reshape(2, 2, 12, 12), 3, 2, seed=11, max_chunk_bytes=1)
    assert np.array_equal(nested.min_distance.ravel(), rs.min_distance[:4])


def test_padding_is_excluded():
    a = planted_heads(3, 8, rng=3)
    padded = np.zeros((3, 12, 12))
    padded[:, :8, :8] = a
    lengths = np.array([8, 8, 8])
    rs_pad = random_search(padded, 2, 1, seed=0, lengths=lengths)
    # the same heads padded by garbage give the same result
    garbage = padded.copy()
    garbage[:, 8:, :] = 5.0
    garbage[:, :, 8:] = 5.0
    rs_garbage = random_search(garbage, 2, 1, seed=0, lengths=lengths)
    assert np.array_equal(rs_pad.min_distance, rs_garbage.min_distance)
    assert np.allclose(rs_pad.mean_error, rs_pad.min_distance / 64)


def test_padded_draws_are_cut_and_renormalised():
    """On a 1×1 real block every draw, cut and renormalised, is [[1]]: distance 0 — uncut draws would miss it."""
    a = np.full((2, 6, 6), 7.0)
    a[:, 0, 0] = 1.0
    rs = random_search(a, 2, 1, seed=0, density=1.0, lengths=np.array([1, 1]))
    assert np.array_equal(rs.min_distance, np.zeros(2)) and np.array_equal(rs.family_min, np.zeros((2, 3)))


def test_identity_heads_are_found_in_sigma1_and_structure_beats_search():
    eye = np.broadcast_to(np.eye(16), (2, 16, 16))
    rs = random_search(eye, 3, 2, seed=0)
    assert (rs.family == 0).all() and (rs.min_distance < 2.0).all()
    a = planted_heads(8, 16, rng=0)
    rs = random_search(a, 3, 2, seed=0)
    fit = structured_fit(a, 3, 2, 16)
    assert (fit.l1 < rs.min_distance).all()
    assert rs.mean_error.mean() > 5 * fit.mean_error.mean()


def test_bad_arguments():
    a = np.full((2, 6, 6), 1 / 6)
    for kw, arg in (({"w": 6}, "w"), ({"num_pos": 7}, "num_pos"), ({"n_attempts": 0}, "n_attempts")):
        args = {"w": 1, "num_pos": 1} | kw
        with pytest.raises(ValueError, match=f"^{arg}:"):
            random_search(a, args.pop("w"), args.pop("num_pos"), **args)
    with pytest.raises(ValueError, match="^a:"):
        random_search(np.full((6, 6), np.inf), 1, 1)

"""Validation of attention arrays at the boundary (attnlab.analysis.inputs)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from attnlab.analysis.inputs import RowSumWarning, check_attention, check_num_pos, check_w, valid_mask


def test_accepts_stochastic_and_masks_padding():
    a = np.full((2, 4, 4), 0.25)
    out, mask = check_attention(a)
    assert mask is None and np.array_equal(out, a)
    padded = np.full((2, 5, 5), 7.0)
    padded[0, :3, :3] = 1 / 3
    padded[1, :, :] = 0.2
    out, mask = check_attention(padded, lengths=np.array([3, 5]))
    assert mask.shape == (2, 5, 5) and out[0, 3:].sum() == 0 and out[0, :, 3:].sum() == 0


@pytest.mark.parametrize(
    "a, kw, match",
    [
        (np.ones((3, 4)) / 4, {"square": True}, "square"),
        (np.array([[np.nan, 1.0]]), {}, "NaN"),
        (np.array([[np.inf, 1.0]]), {}, "NaN or Inf"),
        (np.array([[-0.5, 1.5]]), {}, "negative"),
        (np.zeros((0, 0)), {}, "empty"),
        (np.ones(3), {}, "shape"),
        (np.array([["a"]]), {}, "numeric"),
        (np.eye(3), {"lengths": np.array(4)}, "lengths must lie in 1..3"),
        (np.eye(3), {"lengths": np.array(1.5)}, "expected integers"),
    ],
)
def test_rejects_bad_arrays_naming_the_argument(a, kw, match):
    arg = "lengths" if "lengths" in kw else "heads"
    with pytest.raises(ValueError, match=f"^{arg}:.*{match}"):
        check_attention(a, "heads", **kw)


def test_row_sums_warn_with_largest_deviation_or_renormalize():
    a = np.array([[0.5, 0.5], [0.2, 0.3]])
    with pytest.warns(RowSumWarning, match=r"largest deviation 0\.5 at index \(1,\)"):
        check_attention(a, "heads")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, _ = check_attention(a, "heads", renormalize=True)
    assert np.allclose(out.sum(-1), 1) and np.allclose(out[1], [0.4, 0.6])
    with pytest.raises(ValueError, match="all zero"):
        check_attention(np.array([[0.0, 0.0], [0.5, 0.5]]), "heads", renormalize=True)


def test_w_and_num_pos():
    assert check_w(0, 5) == 0 and check_w(4, 5) == 4
    for bad in (-1, 5, 1.5, True):
        with pytest.raises(ValueError, match="^w:"):
            check_w(bad, 5)
    assert check_num_pos(5, 5) == 5
    with pytest.raises(ValueError, match="^num_pos:"):
        check_num_pos(6, 5)


def test_valid_mask_rectangular():
    mask = valid_mask((2, 3, 4), np.array([2, 3]), np.array([4, 1]))
    assert mask[0].sum() == 8 and mask[1].sum() == 3
    assert valid_mask((3, 4)) is None

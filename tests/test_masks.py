"""The mask predicates (attnlab.masks) against the matrices they name, in numpy and torch alike."""

import numpy as np
import pytest
import torch

from attnlab.masks import causal, hidden, in_band, in_window, near, visible


@pytest.mark.parametrize("xp", [np, torch])
def test_predicates_are_the_matrices_they_name(xp):
    n = 9
    i, j = xp.arange(n)[:, None], xp.arange(n)[None, :]
    lower = np.tril(np.ones((n, n), dtype=bool))                           # j ≤ i
    as_np = (lambda x: x.numpy()) if xp is torch else np.asarray
    assert (as_np(causal(i, j)) == lower).all()
    assert (as_np(visible(i, j)) == lower).all() and (as_np(hidden(i, j)) == ~lower).all()
    W = 3
    window = np.triu(np.ones((n, n), dtype=bool), -(W - 1))                # i − j < W
    assert (as_np(in_window(i, j, W)) == window).all() and as_np(in_window(i, j, None)).all()
    assert (as_np(visible(i, j, W)) == (lower & window)).all() and (as_np(hidden(i, j, W)) == ~(lower & window)).all()
    w = 2
    assert (as_np(near(i, j, w) & causal(i, j)) == (lower & np.triu(np.ones((n, n), dtype=bool), -w))).all()
    band = np.triu(np.tril(np.ones((n, n), dtype=bool), 1 + w), 1 - w)     # |j − i − 1| ≤ w
    assert (as_np(in_band(i, j, w, 1)) == band).all()

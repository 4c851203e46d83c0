"""The one structured support S = B_{w,o} ∪ (rows × T) ∪ R and its users (fit, surgery, mask_mod, kernel)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.analysis.structured_fit import structured_fit
from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.full import Full
from attnlab.nn.mechanisms.sliding_window import chunk_size, sliding_window_attention
from attnlab.nn.scoring import build_scoring
from attnlab.nn.softmax import masked_softmax
from attnlab.nn.surgery import StructuredSurgery
from attnlab.support import FULL, Support, top_columns


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), m=st.integers(1, 12), w=st.integers(0, 12), o=st.integers(-4, 4), seed=st.integers(0, 99))
def test_numpy_and_torch_agree(n, m, w, o, seed):
    rng = np.random.default_rng(seed)
    cols = rng.integers(-1, m, size=3)
    a = rng.random((n, m))
    s_np = Support(w=w, offset=o, columns=cols)
    s_t = Support(w=torch.tensor(w), offset=torch.tensor(o), columns=torch.tensor(cols))
    assert np.array_equal(s_np.dense(n, m), s_t.dense(n, m).numpy())
    # the band by definition, entry by entry
    expect = np.array([[abs(j - i - o) <= w or j in set(cols.tolist()) for j in range(m)] for i in range(n)])
    assert np.array_equal(s_np.dense(n, m), expect)
    assert np.array_equal(top_columns(a, 2), top_columns(torch.tensor(a), 2).numpy())


def test_full_head_keeps_everything_and_empty_slots_hold_nothing():
    assert Support(w=FULL).dense(4, 5).all()
    s = Support(w=0, columns=np.array([-1, -1]))
    assert np.array_equal(s.dense(3, 3), np.eye(3, dtype=bool))
    assert int(s.entries(3)) == 3


def test_top_columns_drops_zero_mass_and_honours_per_head_budgets():
    c = np.array([[0.0, 3.0, 1.0, 0.0], [2.0, 0.0, 0.0, 0.0]])
    assert top_columns(c, 3).tolist() == [[1, 2, -1], [0, -1, -1]]
    assert top_columns(c, np.array([1, 2])).tolist() == [[1, -1], [0, -1]]


def test_mask_mod_draws_the_same_support_per_head():
    w = torch.tensor([0, 2, FULL])
    o = torch.tensor([-1, 0, 0])
    cols = torch.tensor([[3, -1], [0, 5], [-1, -1]])
    S = Support(w=w, offset=o, columns=cols)
    dense = S.mask_mod().dense(1, 3, 7, 9)[0]
    assert torch.equal(dense, S.dense(7, 9))


@pytest.mark.parametrize("seed", range(4))
def test_fit_equals_surgery_on_the_same_heads(seed):
    """The fit (numpy) and surgery (torch) keep the same entries for the same (w, num_pos) per head."""
    g = torch.Generator().manual_seed(seed)
    B, H, n, d = 2, 4, 11, 8
    q, k = torch.randn(B, H, n, d, generator=g), torch.randn(B, H, n, d, generator=g)
    # one head with zero off-band mass in some columns: the fit stores no empty column, nor may surgery
    mask = Mask(causal=True)
    full = Full(build_scoring("dot", H, d, 1.0))
    a = full.weights(q, k, mask)
    w, num_pos = [1, 0, 3, 2], [2, 3, 1, 0]
    surg = StructuredSurgery(full, w, num_pos)
    keep = surg.support(a, mask).numpy()
    for h in range(H):
        fit = structured_fit(a[:, h].numpy(), w[h], num_pos[h], s=0)
        causal = np.tril(np.ones((n, n), dtype=bool))  # the fit sees no mask: compare on the allowed entries
        assert np.array_equal(fit.stored & causal, keep[:, h]), h
        assert fit.columns.shape[-1] == num_pos[h]


def test_kernel_runs_the_support_and_equals_its_dense_reference():
    g = torch.Generator().manual_seed(0)
    B, H, n, d, w = 1, 2, 50, 8, 3
    q, k, v = (torch.randn(B, H, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    S = Support(w=w, columns=torch.tensor([[[0, 17]], [[-1, 40]]]).view(1, 2, 2))
    c = chunk_size(w)
    out = sliding_window_attention(
        q, k, v, w, causal=True, extra_idx=S.kernel_extra_idx(n, c), extra_own=S.kernel_extra_own(), chunk=c
    )
    allowed = S.dense(n, n) & torch.ones(n, n, dtype=torch.bool).tril()
    ref = masked_softmax(q @ k.transpose(-1, -2) / d**0.5, allowed) @ v
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)


def test_round_trip_to_plain_dict():
    S = Support(w=np.array([1, 2]), offset=np.array([0, -1]), columns=np.array([[0, -1], [3, 4]]), residual=2)
    T = Support.from_dict(S.to_dict())
    assert np.array_equal(S.dense(6, 6), T.dense(6, 6)) and T.residual == 2
    with pytest.raises(ValueError, match="^support: unknown"):
        Support.from_dict({"w": 1, "band": 2})


def test_surgery_keeps_no_zero_mass_column_like_the_fit():
    """eye(6), w 0, num_pos 2: no column has off-band mass — the fit stores 6 entries, and so does surgery."""
    a = torch.eye(6)[None, None]
    surg = StructuredSurgery(Full(build_scoring("dot", 1, 4, 1.0)), [0], [2])
    fit = structured_fit(a[0, 0].numpy(), 0, 2, s=0)
    assert int(fit.stored_entries) == 6
    assert int(surg.support(a, Mask()).sum()) == 6


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 20), m=st.integers(1, 20), s=st.integers(0, 5), batch=st.lists(st.integers(1, 3), max_size=2),
       seed=st.integers(0, 999))
def test_diagonal_mask_is_its_definition_in_numpy_and_torch(n, m, s, batch, seed):
    """D[…, i, j] = 1[j − i ∈ Δ]; offsets off every (i, j) and NO_DIAGONAL slots hold nothing."""
    from attnlab.support import NO_DIAGONAL, diagonal_mask

    rng = np.random.default_rng(seed)
    delta = rng.integers(-25, 25, size=(*batch, s))
    delta[rng.random(delta.shape) < 0.2] = NO_DIAGONAL
    i, j = np.arange(n)[:, None], np.arange(m)[None, :]
    expect = np.zeros((*batch, n, m), dtype=bool)
    for idx in np.ndindex(*batch):
        for d in delta[idx]:
            expect[idx] |= (j - i) == d
    assert np.array_equal(diagonal_mask(delta, n, m), expect)
    assert np.array_equal(diagonal_mask(torch.as_tensor(delta), n, m).numpy(), expect)

"""Head surgery (attnlab.nn.surgery): the band + columns fit of each head, swapped into a model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.analysis.structured_fit import structured_fit
from attnlab.config import ModelConfig
from attnlab.nn import build_model
from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms import Full
from attnlab.nn.surgery import StructuredSurgery, apply_surgery, attention_modules, kept_fraction, remove_surgery, surgery


def _qk(B, H, n, m, d_k=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, n, d_k, generator=g) * 2, torch.randn(B, H, m, d_k, generator=g) * 2


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 12), m=st.integers(2, 12), w=st.lists(st.integers(0, 6), min_size=3, max_size=3),
       p=st.lists(st.integers(0, 3), min_size=3, max_size=3), seed=st.integers(0, 1000))
def test_weights_are_the_renormalised_optimal_fit(n, m, w, p, seed):
    # Â_h = rows of structured_fit(A_h, w_h, num_pos_h, s=0).x renormalised, for every head
    q, k = _qk(2, 3, n, m, seed=seed)
    mech = StructuredSurgery(Full(), w, p)
    a = Full().weights(q, k, Mask()).double().numpy()  # (2, 3, n, m)
    got = mech.weights(q, k, Mask()).double().numpy()
    for h in range(3):  # reference: the analysis fit of each head (its own w, num_pos)
        wh = min(w[h], max(n, m) - 1)
        x = structured_fit(a[:, h], wh, min(p[h], m), s=0).x  # (2, n, m)
        row = x.sum(-1, keepdims=True)
        expect = np.where(row > 0, x / np.where(row > 0, row, 1), a[:, h])
        np.testing.assert_allclose(got[:, h], expect, atol=1e-5)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)


def test_untouched_heads_are_exactly_full_and_kept_counts_entries():
    q, k = _qk(1, 2, 6, 6)
    mech = StructuredSurgery(Full(), [-1, 0], [0, 0])
    a = Full().weights(q, k, Mask())
    got = mech.weights(q, k, Mask())
    assert torch.equal(got[:, 0], a[:, 0])
    assert torch.allclose(got[:, 1], torch.eye(6).expand(1, 6, 6))  # w = 0, no column: the diagonal
    assert mech.total == 2 * 36 and mech.kept == 36 + 6


def test_padding_and_causal_masks_are_respected():
    q, k = _qk(2, 2, 5, 5)
    keep = torch.tensor([[True] * 5, [True, True, True, False, False]])
    mask = Mask(key_keep=keep, causal=True)
    mech = StructuredSurgery(Full(), [1, 0], [1, 2])
    got = mech.weights(q, k, mask)
    allowed = mask.allowed(5, 5).expand_as(got)
    assert (got[~allowed] == 0).all()
    np.testing.assert_allclose(got.sum(-1).numpy(), 1.0, atol=1e-6)
    assert mech.total == float(allowed.sum())


def _model(heads=4):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=30, d_model=32, heads=heads, layers=1, ff=64, dropout=0.0, max_len=16)
    return build_model(cfg).eval()


def test_swap_into_a_model_and_back():
    model = _model()
    src = torch.randint(4, 30, (3, 9))
    tgt = torch.randint(4, 30, (3, 7))
    with torch.no_grad():
        ref = model(src, tgt)
    keys = attention_modules(model)
    assert set(keys) == {("encoder", 0), ("decoder", 0), ("cross", 0)}
    untouched = {key: ([-1] * 4, [0] * 4) for key in keys}
    with surgery(model, untouched) as mechs, torch.no_grad():
        assert torch.allclose(model(src, tgt), ref, atol=1e-5)  # nothing cut: the same model
        assert kept_fraction(mechs)["all"] == 1.0
    narrow = {key: ([0, 1, 2, 3], [0, 1, 0, 2]) for key in keys}
    with surgery(model, narrow) as mechs, torch.no_grad():
        changed = model(src, tgt)
        kept = kept_fraction(mechs)
        assert not torch.allclose(changed, ref, atol=1e-3)
        assert 0 < kept["encoder"] < 1 and 0 < kept["cross"] < 1 and 0 < kept["all"] < 1
        assert isinstance(keys[("cross", 0)].mechanism, StructuredSurgery)
    assert not isinstance(keys[("cross", 0)].mechanism, StructuredSurgery)  # restored
    with torch.no_grad():
        assert torch.equal(model(src, tgt), ref)


def test_bad_input():
    with pytest.raises(ValueError, match="w"):
        StructuredSurgery(Full(), [-2], [0])
    with pytest.raises(ValueError, match="num_pos"):
        StructuredSurgery(Full(), [1], [-1])
    with pytest.raises(ValueError, match="w, num_pos"):
        StructuredSurgery(Full(), [1, 2], [0])
    model = _model()
    with pytest.raises(ValueError, match="choices"):
        apply_surgery(model, {("encoder", 3): ([1] * 4, [0] * 4)})
    apply_surgery(model, {("encoder", 0): ([1, 1], [0, 0])})  # 2 heads for a 4-head attention
    with pytest.raises(ValueError, match="heads"):
        model(torch.randint(4, 30, (1, 5)), torch.randint(4, 30, (1, 4)))
    remove_surgery(model)

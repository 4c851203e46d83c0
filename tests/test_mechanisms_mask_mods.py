"""mask_mod predicates: dense matrices, combinators, and the FlexAttention path."""

from __future__ import annotations


import pytest
import torch

from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms import Global, Structured
from attnlab.nn.mechanisms import mask_mods as mm
from attnlab.support import Support


def test_band_dense_counts():
    a = mm.band(2).dense(1, 1, 10, 10)[0, 0]
    assert a.sum(-1).tolist() == [3, 4, 5, 5, 5, 5, 5, 5, 4, 3]


def test_dilated_band_keeps_every_delta_th_key():
    a = mm.band(2, dilation=3).dense(1, 1, 20, 20)[0, 0]
    assert torch.nonzero(a[10]).flatten().tolist() == [4, 7, 10, 13, 16]


def test_or_and_combinators():
    n = 12
    p = (mm.band(1) | mm.global_(2)) & mm.causal()
    a = p.dense(1, 1, n, n)[0, 0]
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    expect = (((i - j).abs() <= 1) | (j < 2)) & (j <= i)
    assert torch.equal(a, expect)
    assert "band(1)" in repr(p) and "causal" in repr(p)


def test_random_table_is_seeded_and_blockwise():
    t1, t2 = mm.random_table(50, 40, 3, 16, seed=7), mm.random_table(50, 40, 3, 16, seed=7)
    assert torch.equal(t1, t2) and t1.shape == (4, 3) and int(t1.max()) < 40
    assert not torch.equal(t1, mm.random_table(50, 40, 3, 16, seed=8))
    a = mm.random_(t1, 16).dense(1, 1, 50, 40)[0, 0]
    assert torch.equal(a[0], a[15]) and set(torch.nonzero(a[20]).flatten().tolist()) == set(t1[1].tolist())


def test_columns_and_padding_per_batch_and_head():
    cols = torch.tensor([[[0, 3], [1, 2]]])  # (B=1, H=2, g=2)
    a = Support(w=0, offset=100, columns=cols).mask_mod().dense(1, 2, 4, 5)  # the band lies outside: columns only
    assert torch.nonzero(a[0, 0, 0]).flatten().tolist() == [0, 3]
    assert torch.nonzero(a[0, 1, 2]).flatten().tolist() == [1, 2]
    keep = torch.tensor([[True, True, False], [True, False, False]])
    p = mm.padding(keep).dense(2, 1, 2, 3)
    assert p[1, 0, 1].tolist() == [True, False, False]


def test_bad_pattern_arguments():
    with pytest.raises(ValueError, match="w"):
        mm.band(-1)
    with pytest.raises(ValueError, match="dilation"):
        mm.band(1, dilation=0)
    with pytest.raises(ValueError, match="g"):
        mm.global_(-2)


@pytest.mark.slow
def test_flex_matches_dense():
    """Compiled FlexAttention (inference path) equals the dense reference; compiling takes ~20-60 s on CPU."""
    from attnlab.nn.mechanisms.flex import flex_forward

    torch.manual_seed(0)
    mech = Global(8, 2)
    q, k, v = (torch.randn(1, 2, 200, 16) for _ in range(3))
    keep = torch.ones(1, 200, dtype=torch.bool)
    keep[0, 180:] = False
    mask = Mask(key_keep=keep)
    with torch.no_grad():
        out = flex_forward(q, k, v, mech.pattern(200, 200), mask)
        ref = mech.weights(q, k, mask) @ v
    assert (out - ref).abs().max().item() < 1e-5


@pytest.mark.slow
def test_flex_structured_matches_dense():
    """The structured mechanism's FlexAttention path: its BlockMask comes from ``Support.mask_mod()``."""
    from attnlab.nn.mechanisms.flex import flex_forward

    torch.manual_seed(0)
    mech = Structured(w=4, num_pos=3, positions=[0, 37, 150])
    q, k, v = (torch.randn(1, 2, 160, 16) for _ in range(3))
    mask = Mask(causal=True)
    pattern = mech.pattern(160, 160)
    assert torch.equal(pattern.dense(1, 2, 160, 160), mech.support(160).dense(160, 160).expand(1, 2, 160, 160))
    with torch.no_grad():
        out = flex_forward(q, k, v, pattern, mask)
        ref = mech.weights(q, k, mask) @ v
    assert (out - ref).abs().max().item() < 1e-5


def test_structured_flex_pattern_refuses_data_dependent_support():
    with pytest.raises(ValueError, match="sparse"):
        Structured(w=2, num_pos=1, sparse=1).pattern(8, 8)
    with pytest.raises(ValueError, match="columns"):
        Structured(w=2, num_pos=1, columns="learned", heads=1, d_k=4).pattern(8, 8)

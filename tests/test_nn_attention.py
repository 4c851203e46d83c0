"""Multi-head attention and masks: the weights are the ones used, masks behave."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.config import ModelConfig
from attnlab.nn import Mask, MultiHeadAttention, build_model
from attnlab.nn.mechanisms import Full
from attnlab.nn.scoring import Additive, Gaussian, ScaledDot
from attnlab.nn.softmax import masked_softmax


def _mha(scoring=None, d=16, H=4, rank=0):
    torch.manual_seed(0)
    return MultiHeadAttention(d, H, Full(scoring), value_rank=rank).eval()


@pytest.mark.parametrize("scoring", [ScaledDot(), Additive(4, 4), Gaussian(2.0)])
def test_returned_weights_are_the_ones_used(scoring):
    mha = _mha(scoring)
    x = torch.randn(2, 5, 16)
    out, a = mha(x, x, Mask(), need_weights=True)
    v = mha.split_heads(mha.W_v(x))  # (B, H, n, d_k)
    heads = a @ v
    expected = mha.W_c(heads.transpose(1, 2).reshape(2, 5, 16))
    assert torch.allclose(out, expected, atol=1e-6)
    out_fast, none = mha(x, x, Mask(), need_weights=False)
    assert none is None
    assert torch.allclose(out, out_fast, atol=1e-5)


def test_scaled_dot_is_qk_over_sqrt_dk():
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 4, 8)
    assert torch.allclose(ScaledDot()(q, k), q @ k.transpose(-1, -2) / math.sqrt(8))


def test_gaussian_kernel_formula():
    q, k = torch.randn(1, 1, 3, 5), torch.randn(1, 1, 4, 5)
    s = Gaussian(sigma=1.5)(q, k)
    direct = -((q[:, :, :, None, :] - k[:, :, None, :, :]) ** 2).sum(-1) / (2 * 1.5**2)
    assert torch.allclose(s, direct, atol=1e-5)


def test_causal_rows_sum_to_one_and_are_lower_triangular():
    mha = _mha()
    x = torch.randn(2, 6, 16)
    _, a = mha(x, x, Mask(causal=True), need_weights=True)
    assert torch.allclose(a.sum(-1), torch.ones(2, 4, 6), atol=1e-6)
    assert torch.all(a.triu(diagonal=1) == 0)


def test_padded_keys_get_zero_weight_and_fast_path_agrees():
    mha = _mha()
    x = torch.randn(2, 6, 16)
    keep = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    out, a = mha(x, x, Mask(key_keep=keep), need_weights=True)
    assert torch.all(a[0, :, :, 4:] == 0)
    assert torch.allclose(a.sum(-1), torch.ones(2, 4, 6), atol=1e-6)
    out_fast, _ = mha(x, x, Mask(key_keep=keep))
    assert torch.allclose(out, out_fast, atol=1e-5)


def test_fully_masked_row_gives_zeros_not_nan_forward_and_backward():
    s = torch.randn(1, 1, 3, 4, requires_grad=True)
    allowed = torch.tensor([[True, True, False, False], [False] * 4, [True] * 4])[None, None]
    a = masked_softmax(s, allowed)
    assert torch.all(a[0, 0, 1] == 0)
    a.sum().backward()
    assert torch.isfinite(s.grad).all()
    # the SDPA fast path too
    mha = _mha()
    x = torch.randn(1, 4, 16, requires_grad=True)
    out, _ = mha(x, x, Mask(key_keep=torch.zeros(1, 4, dtype=torch.bool)))
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_low_rank_value_map_has_rank_at_most_r():
    mha = _mha(rank=3)
    V_d, V_u = mha.W_v[0].weight, mha.W_v[1].weight  # (r, d), (d, r)
    W_V = V_u @ V_d
    assert torch.linalg.matrix_rank(W_V) <= 3


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("kind", ["transformer", "lm", "gru"])
def test_models_return_weights_of_every_kind(kind, norm):
    cfg = ModelConfig(model=kind, vocab_size=40, d_model=32, heads=4, layers=2, ff=64, norm=norm, max_len=16)
    model = build_model(cfg).eval()
    src = torch.randint(4, 40, (3, 7))
    src[0, 5:] = 0
    tgt = torch.randint(4, 40, (3, 5))
    logits, attn = model(src, tgt, need_weights=True) if kind != "lm" else model(src, need_weights=True)
    expected = {"transformer": {"encoder", "decoder", "cross"}, "lm": {"decoder"}, "gru": {"cross"}}[kind]
    assert set(attn) == expected
    for maps in attn.values():
        for a in maps:
            real_rows = a[1:]  # sentence 0 has padded keys; rows still sum to one
            assert torch.allclose(a.sum(-1), torch.ones_like(a.sum(-1)), atol=1e-5)
            assert real_rows.min() >= 0
    if "encoder" in attn:
        assert torch.all(attn["encoder"][0][0, :, :, 5:] == 0)
    if "cross" in attn:
        assert torch.all(attn["cross"][0][0, :, :, 5:] == 0)


def test_pre_and_post_norm_differ_and_tied_weights_are_shared():
    cfg = ModelConfig(vocab_size=30, d_model=16, heads=2, layers=1, ff=32)
    m = build_model(cfg)
    assert m.out.weight is m.src_input.embedding.weight is m.tgt_input.embedding.weight
    untied = build_model(ModelConfig(vocab_size=30, d_model=16, heads=2, layers=1, ff=32, tie_embeddings=False))
    assert untied.out.weight is not untied.src_input.embedding.weight


def test_sequence_longer_than_max_len_is_a_clear_error():
    model = build_model(ModelConfig(vocab_size=30, d_model=16, heads=2, layers=1, ff=32, max_len=8))
    with pytest.raises(ValueError, match="max_len"):
        model(torch.ones(1, 9, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))

"""Every efficient forward (and its gradient) equals the dense reference weights(q, k, mask) @ v."""

from __future__ import annotations

import pytest
import torch

from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms import Band, BigBird, Global, Linear, Linformer, Structured, Taylor
from attnlab.nn.mechanisms.sliding_window import sliding_window_attention

TOL = 1e-5  # float32; absolute, or relative to the largest entry when that exceeds 1


def close(x: torch.Tensor, ref: torch.Tensor) -> bool:
    return (x - ref).abs().max().item() <= TOL * max(1.0, ref.abs().max().item())


def make_mechanisms(max_len: int):
    torch.manual_seed(0)
    return {
        "band": Band(3),
        "band-w0": Band(0),
        "band-wide": Band(20),
        "band-dilated": Band(2, dilation=3),
        "global": Global(4, 2),
        "global-columns-only": Global(4, 2, global_rows=False),
        "bigbird": BigBird(3, 1, 2, seed=5),
        "linear": Linear(),
        "taylor": Taylor(),
        "linformer": Linformer(max_len, 7),
        "structured": Structured(2, 2),
        "structured-positions": Structured(1, 2, positions=[5, 0]),
        "structured-learned": Structured(2, 2, columns="learned", heads=3, d_k=8),
        "structured-sparse": Structured(2, 1, sparse=2),
        "structured-learned-sparse": Structured(1, 2, sparse=1, columns="learned", heads=3, d_k=8),
    }


MECHS = list(make_mechanisms(80))


def check(mech, n: int, m: int, causal: bool, padded: bool) -> None:
    torch.manual_seed(n * 100 + m)
    B, H, d = 2, 3, 8
    q = torch.randn(B, H, n, d, requires_grad=True)
    k = torch.randn(B, H, m, d, requires_grad=True)
    v = torch.randn(B, H, m, d, requires_grad=True)
    keep = None
    if padded:
        keep = torch.ones(B, m, dtype=torch.bool)
        keep[1, m - max(1, m // 3) :] = False  # batch entry 1 is padded at the end
    mask = Mask(key_keep=keep, causal=causal)
    ref = mech.weights(q, k, mask) @ v
    out, a = mech(q, k, v, mask)
    assert a is None and out.shape == ref.shape
    assert torch.isfinite(out).all()
    assert close(out, ref)
    g = torch.randn_like(out)
    params = [p for p in mech.parameters()]
    grads_ref = torch.autograd.grad(ref, [q, k, v, *params], g, allow_unused=True)
    grads = torch.autograd.grad(out, [q, k, v, *params], g, allow_unused=True)
    for gr, go in zip(grads_ref, grads):
        if gr is None:
            assert go is None or go.abs().max() == 0
            continue
        assert torch.isfinite(go).all()
        assert close(go, gr)


@pytest.mark.parametrize("name", MECHS)
@pytest.mark.parametrize("n", [1, 5, 16, 37, 70])
@pytest.mark.parametrize("padded", [False, True])
def test_self_attention_matches_dense(name, n, padded):
    mech = make_mechanisms(80)[name]
    check(mech, n, n, causal=False, padded=padded)
    if mech.supports_causal:
        check(mech, n, n, causal=True, padded=padded)


@pytest.mark.parametrize("name", MECHS)
@pytest.mark.parametrize("n,m", [(9, 23), (40, 17), (3, 50)])
def test_cross_attention_matches_dense(name, n, m):
    check(make_mechanisms(80)[name], n, m, causal=False, padded=True)


def test_weights_rows_sum_to_one_over_real_keys():
    torch.manual_seed(1)
    q, k = torch.randn(2, 3, 30, 8), torch.randn(2, 3, 30, 8)
    keep = torch.ones(2, 30, dtype=torch.bool)
    keep[0, 20:] = False
    for name, mech in make_mechanisms(80).items():
        if name == "linformer":  # A = softmax(Q(EK)ᵀ) F: rows need not sum to 1
            continue
        a = mech.weights(q, k, Mask(key_keep=keep))
        assert torch.allclose(a[0, :, :20].sum(-1), torch.ones(()), atol=1e-5), name  # real queries
        assert torch.allclose(a[1].sum(-1), torch.ones(()), atol=1e-5), name
        assert (a[0, :, :, 20:] == 0).all(), name


def test_band_weights_vanish_outside_band():
    q, k = torch.randn(1, 1, 20, 4), torch.randn(1, 1, 20, 4)
    a = Band(2).weights(q, k, Mask())
    i, j = torch.meshgrid(torch.arange(20), torch.arange(20), indexing="ij")
    assert (a[0, 0][(i - j).abs() > 2] == 0).all()
    assert (a[0, 0][(i - j).abs() <= 2] > 0).all()


def test_fully_masked_query_gives_zero_not_nan():
    # a query whose band keys are all padding and no extra key: output 0, finite gradient
    q = torch.randn(1, 1, 40, 4, requires_grad=True)
    k, v = torch.randn(1, 1, 40, 4), torch.randn(1, 1, 40, 4)
    keep = torch.zeros(1, 40, dtype=torch.bool)
    keep[0, :5] = True
    out = sliding_window_attention(q, k, v, 2, key_keep=keep)
    assert torch.isfinite(out).all() and (out[0, 0, 10:] == 0).all()
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


@pytest.mark.parametrize("chunk", [16, 24, 64])
def test_chunked_kernel_long_and_blocked(chunk, monkeypatch):
    # lengths not multiples of the chunk, w > chunk (reach r > 1), and the inference block loop
    import attnlab.nn.mechanisms.sliding_window as sw

    monkeypatch.setattr(sw, "BLOCK_SCORES", 2000)
    torch.manual_seed(3)
    mech = Band(30)
    q, k, v = (torch.randn(1, 2, 301, 8) for _ in range(3))
    for causal in (False, True):
        mask = Mask(causal=causal)
        ref = mech.weights(q, k, mask) @ v
        with torch.no_grad():
            out = sliding_window_attention(q, k, v, 30, causal=causal, chunk=chunk)
        assert (out - ref).abs().max().item() < TOL


def test_repeated_extra_keys_are_counted_once():
    # extra keys listed twice (and inside the band) must count once: softmax over band ∪ extras
    from attnlab.nn.mechanisms.mask_mods import band
    from attnlab.nn.softmax import masked_softmax

    torch.manual_seed(4)
    n, c, w = 40, 16, 2
    q, k, v = (torch.randn(1, 2, n, 8) for _ in range(3))
    T = -(-n // c)
    idx = torch.tensor([[7, 7, 30, 1], [0, 30, 30, 20], [39, 0, 39, 5]]).view(1, 1, T, 4)  # repeats and band hits
    out = sliding_window_attention(q, k, v, w, extra_idx=idx, chunk=c)
    allowed = band(w).dense(1, 1, n, n).clone()
    for t in range(T):
        allowed[..., t * c : (t + 1) * c, idx[0, 0, t]] = True
    ref = masked_softmax(q @ k.transpose(-1, -2) / 8**0.5, allowed) @ v
    assert close(out, ref)

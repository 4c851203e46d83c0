"""The per-row top-k oracle keeps exactly k_i = ⌈β(i+1)⌉ keys per row, the largest, and is full attention at β = 1."""

from __future__ import annotations

import pytest
import torch

from attnlab.llm.plans import oracle


@pytest.mark.parametrize("window", [None, 7])
def test_topk_attention_equals_its_dense_masked_reference(window, monkeypatch):
    monkeypatch.setattr(oracle, "ROW_BLOCK", 9)            # several blocks, the last one short
    g = torch.Generator().manual_seed(0)
    B, H, n, d = 1, 2, 40, 8
    q, k, v = (torch.randn(B, H, n, d, generator=g, dtype=torch.float64) for _ in range(3))
    beta = 0.3
    out = oracle.topk_attention(q, k, v, 0.5, beta, window)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    s = (q @ k.transpose(-1, -2)) * 0.5
    far = (j > i) if window is None else (j > i) | (i - j >= window)
    s = s.masked_fill(far, float("-inf"))
    kk = oracle.row_budget(beta, torch.arange(n))
    keep = torch.zeros_like(s, dtype=torch.bool)
    for r in range(n):
        idx = torch.topk(s[..., r, :], int(kk[r]), -1).indices
        keep[..., r, :].scatter_(-1, idx, True)
    ref = torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ v
    assert torch.allclose(out, ref, atol=1e-10)
    assert int(kk[0]) == 1 and int(kk[n - 1]) == 12       # ⌈0.3 · 40⌉


def test_at_full_budget_it_is_full_attention():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 30, 8, generator=g) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.4)
    assert torch.allclose(oracle.topk_attention(q, k, v, 0.4, 1.0), ref, atol=1e-5)
    assert oracle.entries_kept(1.0, 30) == pytest.approx(1.0)
    assert oracle.entries_kept(0.1, 1000) == pytest.approx(0.1, abs=0.002)

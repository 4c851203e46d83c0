"""The per-row top-k oracle keeps exactly k_i = ⌈β(i+1)⌉ keys per row, the largest, and is full attention at β = 1.

``reference`` is the definition written out (GQA heads expanded, all n × n scores, one torch.topk per row); the
blocked oracle (+∞ placeholders, one selection per block, a weighted bag of v rows) must give the same answers.
"""

from __future__ import annotations

import pytest
import torch

from attnlab.llm.plans import oracle


def reference(q, k, v, scaling, beta, window=None):
    """q: (B, H, n, d), k, v: (B, H_kv, n, d) → (B, H, n, d): row i over the k_i keys of largest visible score."""
    H, n = q.shape[1], q.shape[2]
    kv = torch.arange(H) // (H // k.shape[1])
    k, v = k[:, kv], v[:, kv]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    far = (j > i) if window is None else (j > i) | (i - j >= window)
    s = ((q @ k.transpose(-1, -2)) * scaling).masked_fill(far, float("-inf"))
    kk = oracle.row_budget(beta, torch.arange(n))
    keep = torch.zeros_like(s, dtype=torch.bool)
    for r in range(n):
        keep[..., r, :].scatter_(-1, torch.topk(s[..., r, :], int(kk[r]), -1).indices, True)
    return torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ v


def rand(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("row_block", [9, 128])                          # several blocks, the last one short; one block
@pytest.mark.parametrize("heads,kv_heads", [(2, 2), (6, 2), (6, 1)])     # MHA, GQA, MQA
@pytest.mark.parametrize("beta,window", [(0.3, None), (0.3, 7), (0.05, None), (0.5, 11), (1 / 3, None)])
def test_the_blocked_oracle_equals_its_definition(row_block, heads, kv_heads, beta, window, monkeypatch):
    monkeypatch.setattr(oracle, "ROW_BLOCK", row_block)
    B, n, d = 2, 40, 8
    q, k, v = rand(B, heads, n, d, seed=1), rand(B, kv_heads, n, d, seed=2), rand(B, kv_heads, n, d, seed=3)
    out = oracle.topk_attention(q, k, v, 0.5, beta, window)
    assert out.shape == (B, heads, n, d)
    assert torch.allclose(out, reference(q, k, v, 0.5, beta, window), atol=1e-12)


def test_it_reads_a_transposed_query_as_the_model_passes_it():
    q = rand(1, 50, 4, 8, seed=4, dtype=torch.float32).transpose(1, 2)    # (B, H, n, d) as a view of (B, n, H, d)
    k, v = rand(1, 2, 50, 8, seed=5, dtype=torch.float32), rand(1, 2, 50, 8, seed=6, dtype=torch.float32)
    assert torch.allclose(oracle.topk_attention(q, k, v, 0.3, 0.2), reference(q, k, v, 0.3, 0.2), atol=1e-5)


def test_ties_keep_exactly_k_i_keys_not_every_tied_one(monkeypatch):
    """Keys from 3 distinct vectors (and v equal where k is): many rows have a tie across their k_i-th score.

    Which tied key is kept does not change the answer (same score, same value), but keeping all of them would.
    """
    monkeypatch.setattr(oracle, "ROW_BLOCK", 16)
    n, d, beta = 60, 8, 0.5                          # k_i ≈ i/2: the top score level (≈ i/3 keys), part of the next
    q = rand(1, 2, n, d, seed=7)
    k, v = rand(1, 1, 3, d, seed=8)[:, :, torch.arange(n) % 3], rand(1, 1, 3, d, seed=9)[:, :, torch.arange(n) % 3]
    ref = reference(q, k, v, 1.0, beta)
    assert torch.allclose(oracle.topk_attention(q, k, v, 1.0, beta), ref, atol=1e-12)
    s = (q @ k.transpose(-1, -2)).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    kk = oracle.row_budget(beta, torch.arange(n))
    t = s.sort(-1, descending=True).values.gather(-1, (kk - 1).view(1, 1, n, 1).expand(1, 2, n, 1))   # k_i-th score
    all_ties = torch.softmax(s.masked_fill(s < t, float("-inf")), -1) @ v
    assert not torch.allclose(all_ties, ref, atol=1e-6)                 # the test can tell the two rules apart


def test_the_cpu_selection_picks_the_same_columns_as_torch_topk():
    s = rand(3, 70, 500, seed=10, dtype=torch.float32)
    for kmax in (1, 37, 499, 500):
        cols = oracle.top_columns(s, kmax)
        assert cols.shape == (3, 70, kmax) and cols.dtype == torch.long
        assert torch.equal(cols.sort(-1).values, torch.topk(s, kmax, -1).indices.sort(-1).values)


@pytest.mark.parametrize("beta", [1e-3, 0.05, 0.1, 1 / 3, 0.7, 0.999, 1.0])
def test_placeholders_always_fit_in_a_blocks_future(beta):
    for i0, i1 in [(0, 1), (0, 9), (9, 18), (0, 128), (128, 256), (1920, 2048), (8064, 8192)]:
        hid, pad, far, kmax = oracle.block_support(i0, i1, beta, None)
        i = torch.arange(i0, i1)
        assert kmax == int(oracle.row_budget(beta, i).max())
        assert torch.equal(pad.sum(-1), kmax - oracle.row_budget(beta, i))      # p_i placeholders, all of them
        assert not (pad & ~hid).any() and far is None                         # only in hidden (future) entries


def test_at_full_budget_it_is_full_attention():
    q, k, v = (rand(1, 2, 30, 8, seed=s, dtype=torch.float32) for s in (11, 12, 13))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.4)
    assert torch.allclose(oracle.topk_attention(q, k, v, 0.4, 1.0), ref, atol=1e-5)
    assert oracle.entries_kept(1.0, 30) == pytest.approx(1.0)
    assert oracle.entries_kept(0.1, 1000) == pytest.approx(0.1, abs=0.002)


def test_bfloat16_takes_torch_topk_and_stays_near_the_definition():
    q, k, v = rand(1, 4, 64, 16, seed=14), rand(1, 2, 64, 16, seed=15), rand(1, 2, 64, 16, seed=16)
    out = oracle.topk_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), 0.25, 1.0)
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.double(), reference(q, k, v, 0.25, 1.0), atol=5e-2)

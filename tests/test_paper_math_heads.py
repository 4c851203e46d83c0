"""Every formula of multi-head attention on the page, checked: one test per statement, named after it
(the concatenation of the heads times W_c, its split as a sum over heads, a low-rank value map)."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.full import Full

from test_paper_math import _float64, softmax_attention  # noqa: F401 - float64: the shared autouse fixture


# ---------------------------------------------------------------- multi-head attention


def _mha_and_input(bias: bool, value_rank: int = 0):
    torch.manual_seed(3)
    d, H, n = 16, 4, 6
    mha = MultiHeadAttention(d, H, Full(), value_rank=value_rank, bias=bias).double().eval()
    return mha, torch.randn(2, n, d), d, H, n


def test_multihead_attention_equals_concat_of_heads_times_W_c():
    """MultiHead(X) = Concat(head_1, …, head_H) W_c with head_h = softmax(X W_q^h (X W_k^h)ᵀ/√d_k) X W_v^h.
    Each head computed by hand from attnlab's weight matrices (rows h·d_k … (h+1)·d_k)."""
    mha, x, d, H, n = _mha_and_input(bias=True)
    d_k = d // H
    heads = []
    for h in range(H):
        b = slice(h * d_k, (h + 1) * d_k)
        q_h = x @ mha.W_q.weight[b].T + mha.W_q.bias[b]
        k_h = x @ mha.W_k.weight[b].T + mha.W_k.bias[b]
        v_h = x @ mha.W_v.weight[b].T + mha.W_v.bias[b]
        heads.append(softmax_attention(q_h, k_h, v_h))
    W_c = mha.W_c.weight.T  # (H·d_k, d): right-multiplying, as on the page
    by_hand = torch.cat(heads, dim=-1) @ W_c + mha.W_c.bias
    with torch.no_grad():
        out, _ = mha(x, x, Mask())
    torch.testing.assert_close(out, by_hand, atol=1e-12, rtol=0)


def test_multihead_attention_equals_sum_over_heads_with_W_c_split():
    """Splitting W_c by heads into blocks W_{c,h} ∈ R^{d_k×d},
    MultiHead(X)_i = Σ_h W_{c,h}ᵀ Σ_j α_ij^(h) V^(h)(x_j)  (no biases), α^(h) = the weights of head h,
    which are also the weights attnlab returns with need_weights=True."""
    mha, x, d, H, n = _mha_and_input(bias=False)
    d_k = d // H
    W_c = mha.W_c.weight.T  # (H·d_k, d)
    out = torch.zeros(2, n, d)
    alphas = []
    for h in range(H):
        b = slice(h * d_k, (h + 1) * d_k)
        alpha = torch.softmax((x @ mha.W_q.weight[b].T) @ (x @ mha.W_k.weight[b].T).transpose(-2, -1) / math.sqrt(d_k), -1)
        V_h = x @ mha.W_v.weight[b].T  # V^(h)(x_j), rows j: (2, n, d_k)
        W_ch = W_c[b]  # (d_k, d)
        for i in range(n):  # the formula, one output position at a time
            out[:, i] += (W_ch.T @ (alpha[:, i, :, None] * V_h).sum(1).T).T  # W_{c,h}ᵀ Σ_j α_ij V(x_j)
        alphas.append(alpha)
    with torch.no_grad():
        mha_out, a = mha(x, x, Mask(), need_weights=True)
    torch.testing.assert_close(mha_out, out, atol=1e-12, rtol=0)
    torch.testing.assert_close(a, torch.stack(alphas, 1), atol=1e-14, rtol=0)


@pytest.mark.parametrize("r", [1, 3, 8])
def test_low_rank_value_map_has_rank_at_most_r(r):
    """With value_rank = r, attnlab factors the value map W_V = V_u V_d (V_d: R^d → R^r, V_u: R^r → R^d),
    so rank W_V ≤ r (= r for generic weights), and the values of any n > r tokens span ≤ r dimensions."""
    mha, x, d, H, n = _mha_and_input(bias=False, value_rank=r)
    V_d, V_u = mha.W_v[0].weight, mha.W_v[1].weight  # (r, d), (d, r)
    W_V = V_u @ V_d  # (d, d)
    assert torch.linalg.matrix_rank(W_V).item() == r < d
    with torch.no_grad():
        values = mha.W_v(torch.randn(3 * d, d))  # (3d, d)
    assert torch.linalg.matrix_rank(values).item() <= r
    full = MultiHeadAttention(d, H, Full(), bias=False).double()
    assert torch.linalg.matrix_rank(full.W_v.weight).item() == d  # without the factorisation: full rank

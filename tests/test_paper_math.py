"""Every formula on the page, checked: one test per statement, named after it.

Each test quotes the statement it checks (from E. Conti, *The Math behind
Transformers*; Vaswani et al. 2017; Katharopoulos et al. 2020; Wang et al. 2020
(Linformer); Zaheer et al. 2020 (BigBird)), then computes both sides.  Where
attnlab implements the formula, attnlab's function is one of the two sides.
Float64 is used wherever the statement is an identity, so tolerances are tiny.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.embedding import sinusoidal_encoding
from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.full import Full
from attnlab.nn.softmax import masked_softmax

@pytest.fixture(autouse=True)
def _float64():
    """Every test of this file computes in float64; the default is restored afterwards."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def softmax_attention(q, k, v, allowed=None):
    """softmax(QKᵀ/√d_k + M) V, written out (M = −∞ where not allowed)."""
    # q: (..., n, d_k), k: (..., m, d_k), v: (..., m, d_v)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if allowed is not None:
        s = s.masked_fill(~allowed, -math.inf)
    return torch.softmax(s, dim=-1) @ v


# ---------------------------------------------------------------- softmax


def test_softmax_jacobian_is_diag_s_minus_s_sT():
    """∂softmax(z)_i/∂z_j = s_i(δ_ij − s_j), i.e. J = diag(s) − s sᵀ, with s = softmax(z)."""
    g = torch.Generator().manual_seed(0)
    for n in (2, 5, 17):
        z = torch.randn(n, generator=g) * 3
        s = torch.softmax(z, dim=0)
        J_text = torch.diag(s) - torch.outer(s, s)
        J_autograd = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=0), z)
        torch.testing.assert_close(J_autograd, J_text, atol=1e-14, rtol=0)


def test_softmax_jacobian_vanishes_at_one_hot_outputs():
    """If s = e_k (one-hot), J = diag(e_k) − e_k e_kᵀ = 0: a saturated softmax passes no gradient."""
    n = 6
    for k in range(n):
        e_k = torch.zeros(n)
        e_k[k] = 1.0
        assert torch.count_nonzero(torch.diag(e_k) - torch.outer(e_k, e_k)) == 0
        # and in practice: scores far apart make s numerically one-hot, and autograd's J is ~0
        z = torch.zeros(n)
        z[k] = 200.0
        J = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=0), z)
        assert J.abs().max() < 1e-80


def test_softmax_is_not_scale_invariant():
    """softmax(1, 2, 0.5, −1) = (0.2242, 0.6095, 0.1360, 0.0303), while softmax of the doubled
    vector (2, 4, 1, −2) ≈ (0.1140, 0.8420, 0.0419, 0.0021): scaling the scores sharpens the weights."""
    z = torch.tensor([1.0, 2.0, 0.5, -1.0])
    s, s2 = torch.softmax(z, 0), torch.softmax(2 * z, 0)
    torch.testing.assert_close(s, torch.tensor([0.2242, 0.6095, 0.1360, 0.0303]), atol=5e-5, rtol=0)
    torch.testing.assert_close(s2, torch.tensor([0.1140, 0.8420, 0.0419, 0.0021]), atol=5e-5, rtol=0)
    assert (s - s2).abs().max() > 0.2  # not the same distribution
    assert s2.max() > s.max() and s2.min() < s.min()  # sharper


# ---------------------------------------------------------------- scaling by √d_k


@pytest.mark.parametrize("d_k", [16, 64, 256])
def test_variance_of_q_dot_k_is_d_k_and_1_after_scaling(d_k):
    """If the entries of q and k are iid with mean 0 and variance 1, then q·k = Σ_i q_i k_i has mean 0
    and variance d_k; hence q·k/√d_k has variance 1 (why attention divides by √d_k).

    Monte Carlo with N = 40 000 pairs of standard normal vectors.  The sample variance has relative
    standard error ≈ √(2/N) ≈ 0.7 %, so the stated tolerance is 5 % (about 7 standard errors).
    """
    N = 40_000
    g = torch.Generator().manual_seed(d_k)
    q, k = torch.randn(N, d_k, generator=g), torch.randn(N, d_k, generator=g)
    dots = (q * k).sum(-1)
    assert abs(dots.var().item() / d_k - 1) < 0.05
    assert abs((dots / math.sqrt(d_k)).var().item() - 1) < 0.05
    assert abs(dots.mean().item()) < 5 * math.sqrt(d_k / N)  # mean 0 within 5 standard errors


# ---------------------------------------------------------------- positional encoding


def test_sinusoidal_encoding_shift_is_a_rotation_per_frequency():
    """f(t)_{2k} = sin(ω_k t), f(t)_{2k+1} = cos(ω_k t), ω_k = 1/10000^{2k/d}.  For every offset s there
    is a fixed linear map M(s), independent of t, with f(t+s) = M(s) f(t): in each plane (2k, 2k+1)
    it is the rotation [[cos ω_k s, sin ω_k s], [−sin ω_k s, cos ω_k s]].  Checked with attnlab's
    ``sinusoidal_encoding`` for all t and several s."""
    d, T = 32, 300
    f = sinusoidal_encoding(T, d).double()  # (T, d)
    omega = 1.0 / 10000 ** (2 * torch.arange(d // 2) / d)  # (d/2,)
    for s in (1, 2, 7, 50, 123):
        M = torch.zeros(d, d)
        c, sn = torch.cos(omega * s), torch.sin(omega * s)
        for kk in range(d // 2):  # block-diagonal: one 2×2 rotation per frequency
            M[2 * kk : 2 * kk + 2, 2 * kk : 2 * kk + 2] = torch.stack([torch.stack([c[kk], sn[kk]]), torch.stack([-sn[kk], c[kk]])])
        torch.testing.assert_close(f[s:] , f[:-s] @ M.T, atol=2e-6, rtol=0)  # f(t+s) = M(s) f(t) for every t
        torch.testing.assert_close(M @ M.T, torch.eye(d), atol=1e-12, rtol=0)  # a rotation: orthogonal …
        assert abs(torch.linalg.det(M).item() - 1) < 1e-10  # … with determinant 1


# ---------------------------------------------------------------- masking


def test_minus_infinity_mask_gives_lower_triangular_rows_summing_to_one():
    """With M_ij = 0 for j ≤ i and −∞ for j > i, softmax(S + M) is lower triangular (a word sees only
    the words before it) and every row sums to 1.  Checked with attnlab's ``masked_softmax``."""
    n = 7
    g = torch.Generator().manual_seed(1)
    S = torch.randn(3, n, n, generator=g) * 4
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    A = masked_softmax(S, allowed)
    M = torch.zeros(n, n).masked_fill(~allowed, -math.inf)
    torch.testing.assert_close(A, torch.softmax(S + M, dim=-1), atol=1e-15, rtol=0)
    assert torch.all(A.triu(1) == 0)  # exactly zero above the diagonal
    torch.testing.assert_close(A.sum(-1), torch.ones(3, n), atol=1e-14, rtol=0)
    assert torch.all(A[:, allowed] > 0)  # every allowed key gets some weight


# ---------------------------------------------------------------- linear attention, Taylor


def phi(x):
    """The feature map of Katharopoulos et al. (2020): φ(x) = elu(x) + 1 > 0."""
    return torch.nn.functional.elu(x) + 1


def _qkv(n=9, d_k=4, d_v=3, seed=0, B=2, H=2):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, n, d_k, generator=g), torch.randn(B, H, n, d_k, generator=g), torch.randn(B, H, n, d_v, generator=g))


def test_linear_attention_by_associativity_equals_its_quadratic_form():
    """V'_i = Σ_j φ(q_i)ᵀφ(k_j) v_j / Σ_j φ(q_i)ᵀφ(k_j)   (quadratic: forms the n×n matrix)
           = φ(q_i)ᵀ (Σ_j φ(k_j) v_jᵀ) / φ(q_i)ᵀ (Σ_j φ(k_j))   (associativity: O(n), never forms it)."""
    q, k, v = _qkv()
    sim = phi(q) @ phi(k).transpose(-2, -1)  # (B, H, n, n)
    quadratic = (sim @ v) / sim.sum(-1, keepdim=True)
    S = phi(k).transpose(-2, -1) @ v  # Σ_j φ(k_j) v_jᵀ: (B, H, d_k, d_v)
    z = phi(k).sum(-2)  # Σ_j φ(k_j): (B, H, d_k)
    linear = (phi(q) @ S) / (phi(q) @ z[..., None])
    torch.testing.assert_close(linear, quadratic, atol=1e-13, rtol=0)
    # attnlab's mechanism computes the same: its O(n) forward and its dense weights
    from attnlab.nn.mechanisms.linear import Linear

    out, _ = Linear()(q, k, v, Mask())
    torch.testing.assert_close(out, quadratic, atol=1e-13, rtol=0)
    torch.testing.assert_close(Linear().weights(q, k, Mask()), sim / sim.sum(-1, keepdim=True), atol=1e-14, rtol=0)


def test_causal_linear_attention_prefix_sums_equal_the_masked_quadratic_form():
    """Causal: V'_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i with the prefix sums S_i = Σ_{j≤i} φ(k_j) v_jᵀ and
    z_i = Σ_{j≤i} φ(k_j), equal to the quadratic form with the sum over j ≤ i only."""
    q, k, v = _qkv(seed=1)
    n = q.shape[-2]
    sim = (phi(q) @ phi(k).transpose(-2, -1)) * torch.ones(n, n).tril()  # keep j ≤ i
    quadratic = (sim @ v) / sim.sum(-1, keepdim=True)
    S = torch.cumsum(phi(k)[..., :, None] * v[..., None, :], dim=-3)  # S_i: (B, H, n, d_k, d_v)
    z = torch.cumsum(phi(k), dim=-2)  # z_i: (B, H, n, d_k)
    num = (phi(q)[..., None, :] @ S)[..., 0, :]  # φ(q_i)ᵀ S_i: (B, H, n, d_v)
    prefix = num / (phi(q) * z).sum(-1, keepdim=True)
    torch.testing.assert_close(prefix, quadratic, atol=1e-13, rtol=0)
    # attnlab's causal linear attention (chunked prefix sums), also past one chunk of 64
    from attnlab.nn.mechanisms.linear import Linear

    out, _ = Linear()(q, k, v, Mask(causal=True))
    torch.testing.assert_close(out, quadratic, atol=1e-13, rtol=0)
    q, k, v = _qkv(n=150, seed=4, B=1)
    sim = (phi(q) @ phi(k).transpose(-2, -1)) * torch.ones(150, 150).tril()
    out, _ = Linear()(q, k, v, Mask(causal=True))
    torch.testing.assert_close(out, (sim @ v) / sim.sum(-1, keepdim=True), atol=1e-12, rtol=0)


def taylor_attention(q, k, v):
    """First-order Taylor form: exp(s_ij) ≈ 1 + s_ij with s_ij = q_i·k_j/√d_k, so

        V'_i = Σ_j (1 + s_ij) v_j / Σ_j (1 + s_ij)
             = (Σ_j v_j + q_iᵀ(Σ_j k_j v_jᵀ)/√d_k) / (n + q_iᵀ(Σ_j k_j)/√d_k)     (O(n) by associativity)
    """
    # q, k: (B, H, n, d_k), v: (B, H, n, d_v)
    n, d_k = k.shape[-2], k.shape[-1]
    num = v.sum(-2, keepdim=True) + q @ (k.transpose(-2, -1) @ v) / math.sqrt(d_k)
    den = n + q @ k.sum(-2)[..., None] / math.sqrt(d_k)
    return num / den


def test_first_order_taylor_form_as_written():
    """The linear-time Taylor form equals Σ_j (1 + s_ij) v_j / Σ_j (1 + s_ij) written out, and, since
    exp(s) = 1 + s + O(s²), it approaches softmax attention with an error O(ε²) when the scores are
    of size ε: halving ε divides the error by about 4."""
    q, k, v = _qkv(seed=2)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    written = ((1 + s) @ v) / (1 + s).sum(-1, keepdim=True)
    torch.testing.assert_close(taylor_attention(q, k, v), written, atol=1e-13, rtol=0)
    errors = []
    for eps in (0.1, 0.05, 0.025):
        c = math.sqrt(eps / s.abs().max().item())
        qe, ke = q * c, k * c  # now max |s_ij| = ε
        errors.append((taylor_attention(qe, ke, v) - softmax_attention(qe, ke, v)).abs().max().item())
    for big, small in zip(errors, errors[1:]):
        assert 3.0 < big / small < 5.0, errors


def test_attnlab_taylor_mechanism_is_the_first_order_form_with_normalised_q_and_k():
    """attnlab's Taylor mechanism writes exp(q̂·k̂) ≈ 1 + q̂·k̂ with x̂ = x/‖x‖ (so 1 + q̂·k̂ ≥ 0):
    A_ij = (1 + q̂_i·k̂_j) / Σ_j' (1 + q̂_i·k̂_j'); checked as written, without and with the causal mask."""
    from attnlab.nn.mechanisms.taylor import Taylor

    q, k, v = _qkv(seed=5)
    n = q.shape[-2]
    s_hat = torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(k, dim=-1).transpose(-2, -1)
    for causal, keep in ((False, torch.ones(n, n)), (True, torch.ones(n, n).tril())):
        w = (1 + s_hat) * keep
        out, _ = Taylor()(q, k, v, Mask(causal=causal))
        torch.testing.assert_close(out, (w @ v) / w.sum(-1, keepdim=True), atol=1e-13, rtol=0)


# ---------------------------------------------------------------- Linformer, BigBird


def test_linformer_equals_attention_when_E_and_F_are_identity():
    """Linformer: head = softmax(Q (E K)ᵀ/√d_k) (F V) with E, F ∈ R^{k×n} projecting the n keys and
    values to k rows.  With k = n and E = F = I_n it is exactly softmax(QKᵀ/√d_k) V."""
    q, k, v = _qkv(seed=3)
    n = k.shape[-2]
    E = F = torch.eye(n)
    linformer = torch.softmax(q @ (E @ k).transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ (F @ v)
    torch.testing.assert_close(linformer, softmax_attention(q, k, v), atol=1e-14, rtol=0)
    # and a real projection k < n is *not* attention in general (the statement needs E = F = I)
    E_small = torch.randn(4, n, generator=torch.Generator().manual_seed(0)) / math.sqrt(n)
    projected = torch.softmax(q @ (E_small @ k).transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ (E_small @ v)
    assert (projected - softmax_attention(q, k, v)).abs().max() > 1e-3
    # attnlab's Linformer with its E and F set to the identity is full attention
    from attnlab.nn.mechanisms.linformer import Linformer

    mech = Linformer(max_len=n, proj_len=n).double()
    with torch.no_grad():
        mech.E.copy_(torch.eye(n))
        mech.F.copy_(torch.eye(n))
    out, _ = mech(q, k, v, Mask())
    torch.testing.assert_close(out, softmax_attention(q, k, v), atol=1e-13, rtol=0)
    torch.testing.assert_close(mech.weights(q, k, Mask()), Full().weights(q, k, Mask()), atol=1e-14, rtol=0)


def bigbird_generalised_attention(x, Q, K, V, N):
    """BigBird eq. (13): ATTN(X)_i = x_i + Σ_h σ(Q_h(x_i) K_h(X_{N(i)})ᵀ) V_h(X_{N(i)}),
    σ = softmax, N(i) = the set of positions token i attends to.  Written with a loop over i.

    x: (n, d); Q, K, V: lists over heads of maps R^d → R^{d_k} (V: R^d → R^d); N: list of index lists.
    """
    out = []
    for i in range(x.shape[0]):
        X_N = x[N[i]]  # (|N(i)|, d)
        out.append(x[i] + sum(torch.softmax(Q_h(x[i]) @ K_h(X_N).T, dim=-1) @ V_h(X_N) for Q_h, K_h, V_h in zip(Q, K, V)))
    return torch.stack(out)


def test_bigbird_generalised_attention_reduces_to_full_attention():
    """When every N(i) is the whole sequence [n], eq. (13) is x_i + MultiHead(X)_i: full multi-head
    attention plus the residual.  The heads are attnlab's MultiHeadAttention (no biases) with
    Q_h(x) = W_q^h x/√d_k, K_h(x) = W_k^h x, V_h(x) = W_{c,h}ᵀ W_v^h x (the output map split by heads)."""
    d, H, n = 12, 3, 8
    torch.manual_seed(0)
    mha = MultiHeadAttention(d, H, Full(), bias=False).double()
    d_k = d // H
    blk = [slice(h * d_k, (h + 1) * d_k) for h in range(H)]
    Q = [lambda x, b=b: x @ mha.W_q.weight[b].T / math.sqrt(d_k) for b in blk]
    K = [lambda x, b=b: x @ mha.W_k.weight[b].T for b in blk]
    V = [lambda x, b=b: x @ mha.W_v.weight[b].T @ mha.W_c.weight[:, b].T for b in blk]
    x = torch.randn(n, d)
    with torch.no_grad():
        eq13 = bigbird_generalised_attention(x, Q, K, V, [list(range(n))] * n)
        full, _ = mha(x[None], x[None], Mask())
    torch.testing.assert_close(eq13, x + full[0], atol=1e-12, rtol=0)
    # and with a sparse N(i) (band of width 1 plus the global token 0) it is masked softmax attention
    allowed = torch.zeros(n, n, dtype=torch.bool)
    N = [sorted({0, *range(max(0, i - 1), min(n, i + 2))}) for i in range(n)]
    for i, row in enumerate(N):
        allowed[i, row] = True
    with torch.no_grad():
        sparse13 = bigbird_generalised_attention(x, Q, K, V, N)
        qh = mha.split_heads(mha.W_q(x[None]))
        kh = mha.split_heads(mha.W_k(x[None]))
        vh = mha.split_heads(mha.W_v(x[None]))
        heads = softmax_attention(qh, kh, vh, allowed)  # (1, H, n, d_k)
        ref = mha.W_c(heads.transpose(1, 2).reshape(1, n, d))[0]
    torch.testing.assert_close(sparse13, x + ref, atol=1e-12, rtol=0)


def test_attnlab_bigbird_is_generalised_attention_with_its_neighbourhoods():
    """attnlab's BigBird mechanism (band w, g global tokens, r random keys) inside MultiHeadAttention
    is eq. (13) with N(i) = {j : pattern(i, j)}, the pattern it declares; with w ≥ n, N(i) = [n] and it
    is full attention."""
    from attnlab.nn.mechanisms.bigbird import BigBird

    d, H, n = 12, 3, 40
    d_k = d // H
    torch.manual_seed(1)
    x = torch.randn(n, d)
    for mech, full_pattern in ((BigBird(w=2, g=1, r=2, seed=0), False), (BigBird(w=n, g=0, r=0), True)):
        mha = MultiHeadAttention(d, H, mech, bias=False).double()
        blk = [slice(h * d_k, (h + 1) * d_k) for h in range(H)]
        Q = [lambda x, b=b: x @ mha.W_q.weight[b].T / math.sqrt(d_k) for b in blk]
        K = [lambda x, b=b: x @ mha.W_k.weight[b].T for b in blk]
        V = [lambda x, b=b: x @ mha.W_v.weight[b].T @ mha.W_c.weight[:, b].T for b in blk]
        allowed = mech.pattern(n, n).dense(1, 1, n, n)[0, 0]  # (n, n) bool
        assert bool(allowed.all()) == full_pattern
        N = [torch.nonzero(allowed[i]).flatten().tolist() for i in range(n)]
        with torch.no_grad():
            out, _ = mha(x[None], x[None], Mask())  # the efficient (chunked) forward
            eq13 = bigbird_generalised_attention(x, Q, K, V, N)
        torch.testing.assert_close(x + out[0], eq13, atol=1e-12, rtol=0)
        if full_pattern:
            mha_full = MultiHeadAttention(d, H, Full(), bias=False).double()
            mha_full.load_state_dict(mha.state_dict())
            with torch.no_grad():
                torch.testing.assert_close(out, mha_full(x[None], x[None], Mask())[0], atol=1e-12, rtol=0)


# ---------------------------------------------------------------- band space


def band_dimension_formula(n: int, w: int) -> int:
    """dim B_w = n + 2·Σ_{i=1..w} (n − i)   (for 0 ≤ w ≤ n − 1)."""
    return n + 2 * sum(n - i for i in range(1, w + 1))


def test_band_space_dimension_formula():
    """The band matrices B_w = {A ∈ R^{n×n} : A_ij = 0 when |i − j| > w} form a vector space of
    dimension n + 2·Σ_{i=1..w}(n − i): the main diagonal has n entries, the i-th diagonals above and
    below have n − i each.  Checked three ways: counting the entries with |i − j| ≤ w, the rank of
    many random band matrices (flattened), and attnlab.analysis.projection.band_dimension."""
    from attnlab.analysis.projection import band_dimension

    rng = np.random.default_rng(0)
    for n in range(1, 13):
        i, j = np.indices((n, n))
        for w in range(n):
            count = int((np.abs(i - j) <= w).sum())
            assert count == band_dimension_formula(n, w)
            assert band_dimension(n, w) == band_dimension_formula(n, w)
            if n <= 6:  # span: random band matrices, flattened, have rank = dim B_w
                band = (np.abs(i - j) <= w).astype(float)
                samples = rng.standard_normal((count + 5, n, n)) * band
                assert np.linalg.matrix_rank(samples.reshape(count + 5, n * n)) == count
    assert band_dimension_formula(5, 4) == 25  # w = n − 1: the whole space R^{n×n}


# ---------------------------------------------------------------- LayerNorm


def test_layernorm_as_written_vs_torch_layernorm():
    """The text writes LN(x) = γ (x − μ)/(σ + ε) + β, σ = √(mean (x − μ)²): ε OUTSIDE the square root.
    torch.nn.LayerNorm computes γ (x − μ)/√(σ² + ε) + β: ε INSIDE.  The two differ by the factor

        LN_text / LN_torch = √(σ² + ε) / (σ + ε),

    which is 1 − ε/2 + O(ε²) when σ = 1 (a relative difference of 5·10⁻⁶ for ε = 10⁻⁵, below float32
    rounding for typical activations) but √2/(1 + √ε) ≈ 1.41 when σ = √ε (nearly constant inputs)."""
    eps, d = 1e-5, 64
    ln = torch.nn.LayerNorm(d, eps=eps).double()
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)

    def ln_text(x):
        mu = x.mean(-1, keepdim=True)
        sigma = ((x - mu) ** 2).mean(-1, keepdim=True).sqrt()
        return ln.weight * (x - mu) / (sigma + eps) + ln.bias

    g = torch.Generator().manual_seed(0)
    for sigma_target, expected in ((1.0, 1 - eps / 2), (math.sqrt(eps), math.sqrt(2) / (1 + math.sqrt(eps)))):
        z = torch.randn(10, d, generator=g)
        x = 3.0 + sigma_target * (z - z.mean(-1, keepdim=True)) / z.std(-1, unbiased=False, keepdim=True)
        with torch.no_grad():
            ratio = (ln_text(x) - ln.bias) / (ln(x) - ln.bias)  # the normalised parts
        sigma = x.std(-1, unbiased=False, keepdim=True)
        torch.testing.assert_close(ratio, (torch.sqrt(sigma**2 + eps) / (sigma + eps)).expand_as(ratio), atol=1e-9, rtol=0)
        assert abs(ratio.mean().item() - expected) < 1e-6 * max(1.0, expected) + eps**2 * 10
    # measured difference at σ = 1: |LN_text − LN_torch| is about ε/2 times |LN|
    x = torch.randn(1000, d, generator=g)
    with torch.no_grad():
        diff = (ln_text(x) - ln(x)).abs().max().item()
    assert 1e-7 < diff < 1e-4

"""The native kernel's row softmax (band_kernel.c: row_softmax, its inline exp) against float64, weight by weight.

With one-hot values v_j = e_j the output row is the softmax itself, o_ij = a_ij, so each weight is checked, across
score gaps from 0 to past float's normal range (e^x for x < −86 is 0 there), through the band and through the
key columns (the extra keys' segment).
"""

from __future__ import annotations

import pytest
import torch

from attnlab.nn.mechanisms import native


@pytest.mark.parametrize("through", ["band", "columns"])
@pytest.mark.parametrize("step", [0.37, 1.375])
def test_row_softmax_weights_equal_float64_over_the_exp_range(through, step):
    if not native.available():
        pytest.skip(f"no native kernel here: {native.unavailable_reason()}")
    n = d = 64
    j = torch.arange(n, dtype=torch.float64)
    q = torch.zeros(1, n, d, dtype=torch.float64)
    q[..., 0] = 1.0
    k = torch.zeros(1, n, d, dtype=torch.float64)
    k[0, :, 0] = -step * j          # s_ij = −step·j, exact in float32 (1·k): gaps 0 … −step·(n − 1) (−86.6 at 1.375)
    v = torch.eye(n, dtype=torch.float64)[None]              # o_i = (a_i0, …, a_i,n−1)
    if through == "band":   # every causal key in the band
        O, L = native.band_forward(q.float(), k.float(), v.float(), n, causal=True, scale=1.0)
    else:                   # band j = i only, every other key a column: the extra keys' path
        cols = torch.arange(n)[None]
        O, L = native.band_forward(q.float(), k.float(), v.float(), 0, causal=True, scale=1.0, columns=cols)
    s = (q.float().double() @ k.float().double().transpose(-1, -2))[0]               # the float32 inputs' scores
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    ref = torch.softmax(s, -1)
    err = (O[0].double() - ref).abs()
    assert (err <= 1e-6 * ref + 1e-36).all(), f"worst relative error {float((err / ref.clamp_min(1e-30)).max()):.3g}"
    assert torch.allclose(L[0].double(), torch.logsumexp(s, -1), rtol=0, atol=1e-5)
    assert (O[0][ref < 1e-38] == 0).all() or step < 1                # below the normal range: 0, not a denormal

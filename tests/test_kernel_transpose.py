"""The kernel's keys transposed VEC at a time (band_tiles.h: transpose_rows, vector_math.h: transpose): the rolling
buffer of a head's band keys appended by whole VEC × VEC blocks (past the keys a tile needs, past the last key: zeros;
its last slots one key at a time), and the columns' keys (empty slots: zeros) — checked against the dense reference
at head sizes of one to four blocks, lengths that are no multiple of VEC, and a buffer that wraps many times."""

from __future__ import annotations

import pytest
import torch

from attnlab.nn.mechanisms import sliding_window as sw


@pytest.mark.parametrize("d", [16, 48, 64])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n, w", [(301, 20), (77, 3), (530, 45)])
def test_band_and_columns_with_keys_transposed_by_blocks_equal_the_dense_reference(d, causal, n, w):
    if not sw.native.available():
        pytest.skip(f"no native kernel here: {sw.native.unavailable_reason()}")
    gen = torch.Generator().manual_seed(n + d + w)
    B, H, H_kv = 1, 2, 1
    q, k, v = torch.randn(B, H, n, d, generator=gen), torch.randn(B, H_kv, n, d, generator=gen), torch.randn(B, H_kv, n, d, generator=gen)
    cols = torch.randperm(n, generator=gen)[:21].view(1, 1, 21).repeat(1, H, 1)
    cols[:, 1, ::4] = -1                                                                # empty slots: zeros
    out = torch.full((B, H, n, d), float("nan"))
    with torch.no_grad():
        sw.band_heads_attention(q, k, v, w, torch.arange(H), torch.zeros(H, dtype=torch.long), out, columns=cols,
                                causal=causal, scale=d ** -0.5)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    for h in range(H):
        mine = torch.zeros(n, n, dtype=torch.bool)
        mine[:, cols[0, h][cols[0, h] >= 0]] = True
        allowed = ((i - j).abs() <= w) | mine
        if causal:
            allowed &= j <= i
        ref = torch.softmax(((q[0, h] @ k[0, 0].T) * d ** -0.5).masked_fill(~allowed, float("-inf")), -1) @ v[0, 0]
        torch.testing.assert_close(out[0, h], ref, rtol=1e-5, atol=1e-5)

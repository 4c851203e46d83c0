"""Key blocks in the native kernel (band_kernel.c: blocks_resident): a chunk's key set kept by groups of VEC slots, a
group the previous chunk held staying where it is — checked against the dense reference on sets that repeat groups
from chunk to chunk in another order (as neighbouring query blocks choose many of the same key blocks), and that hold
some of the head's columns (read once, as the column)."""

from __future__ import annotations

import pytest
import torch

from attnlab.nn.mechanisms import sliding_window as sw

VEC = 16


@pytest.mark.parametrize("gb", [16, 40, 48])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("with_columns", [False, True])   # the sets hold the heads' columns too: each read once, as a column
def test_key_sets_that_repeat_groups_across_chunks_equal_the_dense_reference(gb, seed, with_columns):
    if not sw.native.available():
        pytest.skip(f"no native kernel here: {sw.native.unavailable_reason()}")
    gen = torch.Generator().manual_seed(seed)
    B, H, H_kv, n, d, w, chunk = 1, 4, 2, 203, 16, 5, 16
    q, k, v = torch.randn(B, H, n, d, generator=gen), torch.randn(B, H_kv, n, d, generator=gen), torch.randn(B, H_kv, n, d, generator=gen)
    heads, kv_heads = torch.tensor([0, 1, 3]), torch.tensor([0, 0, 1])
    T = -(-n // chunk)
    cols = torch.tensor([[[2, 77, -1]] * 3])                                            # (B, G, 3): two columns a head
    runs = [torch.arange(s, min(s + VEC, n)) for s in range(0, n, VEC)]                 # key blocks of VEC keys
    sets = torch.full((B, 3, T, gb), -1, dtype=torch.long)
    for x in range(3):
        prev = []
        for t in range(T):   # half the previous chunk's groups, in another order, the rest drawn anew
            keep = [r for r in prev if torch.rand(1, generator=gen) < 0.5]
            pool = [r for r in range(len(runs)) if r not in keep]
            new = [pool[i] for i in torch.randperm(len(pool), generator=gen)[: -(-gb // VEC) - len(keep)].tolist()]
            chosen = [keep[i] for i in torch.randperm(len(keep), generator=gen).tolist()] + new
            keys = torch.cat([runs[r] for r in chosen])[:gb]
            if not with_columns:
                keys = keys[~torch.isin(keys, cols[0, x])]                                # none a column
            sets[0, x, t, : len(keys)] = keys
            prev = chosen
    out = torch.full((B, H, n, d), float("nan"))
    with torch.no_grad():
        sw.band_heads_attention(q, k, v, w, heads, kv_heads, out, columns=cols, blocks=sets, chunk=chunk, scale=d ** -0.5)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    for x, (h, kv) in enumerate(zip(heads.tolist(), kv_heads.tolist())):
        mine = torch.zeros(n, n, dtype=torch.bool)
        for t in range(T):
            s = sets[0, x, t]
            mine[t * chunk : (t + 1) * chunk, s[s >= 0]] = True
        mine[:, cols[0, x][cols[0, x] >= 0]] = True
        allowed = (j <= i) & ((i - j <= w) | mine)
        ref = torch.softmax(((q[0, h] @ k[0, kv].T) * d ** -0.5).masked_fill(~allowed, float("-inf")), -1) @ v[0, kv]
        torch.testing.assert_close(out[0, h], ref, rtol=1e-5, atol=1e-5)
    assert torch.isnan(out[:, 2]).all()

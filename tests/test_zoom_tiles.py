"""Zoom tiles: the streamed top-K off-band tiles equal the dense choice, whatever the row blocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.llm.heads.zoom_tiles import ZoomTiles


def dense_top(P: np.ndarray, T: int, K: int, sinks: int, keys: np.ndarray):
    """Reference: every aligned tile's off-band mass (rows weighted by the keys they see) from the full matrix, the K largest (> 0) per head."""
    # P: (H, n, n)
    H, n, _ = P.shape
    C = -(-n // T)
    Q = np.zeros((H, C * T, C * T))
    Q[:, :n, :n] = P
    Q[:, :, :sinks] = 0
    Q[:, :n] *= keys[None, :, None]  # rows weighted by the keys they see
    mass = Q.reshape(H, C, T, C, T).sum((2, 4))  # (H, R, C)
    R, Cc = np.meshgrid(np.arange(C), np.arange(C), indexing="ij")
    mass = np.where(Cc <= R - 2, mass, -np.inf)
    out = []
    for h in range(H):
        flat = mass[h].ravel()
        order = [k for k in np.argsort(-flat, kind="stable")[:K] if flat[k] > 0]
        out.append({(int(k // C) * T, int(k % C) * T) for k in order})
    return out


@pytest.mark.parametrize("n, T, K, r, W", [(200, 16, 3, 7, None), (200, 16, 3, 64, None), (129, 32, 2, 200, None), (64, 16, 4, 5, None),
                                           (200, 16, 3, 30, 70)])
def test_streamed_tiles_are_the_dense_top(n, T, K, r, W):
    rng = np.random.default_rng(n + r)
    H = 3
    s = rng.normal(size=(H, n, n)) * 3
    i, j = np.indices((n, n))
    s[:, (j > i) | ((i - j >= W) if W else False)] = -np.inf  # causal, and a sliding window of W keys
    keys = np.minimum(np.arange(n) + 1, W or n).astype(float)
    P = np.exp(s - s.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)  # (H, n, n) causal rows
    zt = ZoomTiles(2, H, n, tile=T, count=K, sinks=2)
    for i0 in range(0, n, r):  # layer 1 only; layer 0 sees nothing
        i1 = min(n, i0 + r)
        zt.observe(1, i0, 0, torch.tensor(P[:, i0:i1, :i1], dtype=torch.float32), None if W is None else torch.tensor(keys[i0:i1]))
    want = dense_top(P, T, K, sinks=2, keys=keys)
    for h in range(H):
        got = {tuple(int(x) for x in p) for p in zt.pos[1, h] if p[0] >= 0}
        assert got == want[h]
        for k in range(K):
            a, c = (int(x) for x in zt.pos[1, h, k])
            if a < 0:
                continue
            block = P[h, a : a + T, c : c + T]
            np.testing.assert_allclose(zt.maps[1, h, k, : block.shape[0], : block.shape[1]].numpy(), block, atol=1e-6)
    assert (zt.pos[0] == -1).all()

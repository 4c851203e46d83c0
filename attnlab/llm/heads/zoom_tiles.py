"""Exact zoom tiles of a long input: per head, the K blocks of T × T entries with the most off-band mass.

The explorer shows a long input pooled (``HeadStatistics.pool``); zooming into a region needs its
exact rows, which exist only while the capture streams them.  ``ZoomTiles`` watches the rows go by
and keeps, per layer l and head h, the K tiles

    tile(R, C) = P[R·T : (R+1)·T, C·T : (C+1)·T]          (an aligned grid of T × T blocks)

of largest off-band mass, each row weighted by the keys it sees (k_i = i + 1 for a causal row,
the window in a sliding layer), so that uniform attention scores every tile alike (T² × 1) and
early rows, which spread over few keys, do not win by that alone:

    m(R, C) = Σ_{i ∈ R, j ∈ C, j ≥ sinks} k_i · P_ij    over C ≤ R − 2,

i.e. away from the band (the diagonal tile and the one left of it hold |i − j| < 2T) and without
the attention-sink keys j < ``sinks`` (which every row-tile would otherwise win: they show in the
pooled overview and the column plot).  A row-tile of T rows is buffered (H × T × n floats, one
block of rows, never n × n); when its last row arrives its tiles compete with the K kept so far
(vectorised over heads).  Rows must arrive in order per layer, as ``streaming`` gives them.
"""

from __future__ import annotations

import math

import torch

__all__ = ["ZoomTiles", "TILE", "TILES"]

TILE = 64     # T: tokens per tile side
TILES = 4     # K: tiles kept per head


class ZoomTiles:
    """Online top-K off-band tiles per (layer, head) (module docstring); ``observe`` takes each block of rows."""

    def __init__(self, n_layers: int, n_heads: int, n: int, *, tile: int = TILE, count: int = TILES, sinks: int = 4):
        if tile < 1 or count < 1:
            raise ValueError(f"zoom tiles: tile and count must be >= 1, got {tile}, {count}")
        L, H, T, K = n_layers, n_heads, int(tile), int(count)
        self.L, self.H, self.n, self.T, self.K, self.sinks = L, H, n, T, K, int(sinks)
        self.C = math.ceil(n / T)  # tiles per side
        self.maps = torch.zeros(L, H, K, T, T)                       # the kept tiles
        self.pos = torch.full((L, H, K, 2), -1, dtype=torch.long)    # (row start, key start) in tokens; −1: none
        self.score = torch.full((L, H, K), -math.inf, dtype=torch.float64)
        self._buf = torch.zeros(H, T, self.C * T)                    # the current row-tile of one layer
        self._keys = torch.zeros(T)                                  # k_i of the rows in _buf
        self._band = (-1, -1)                                        # (layer, R) held in _buf

    def observe(self, layer: int, i0: int, j0: int, p: torch.Tensor, keys: torch.Tensor | None = None) -> None:
        """Rows i0 : i0 + r of ``layer`` over keys j0 : j0 + m' (p: (H, r, m')), in row order;
        ``keys``: (r,) the keys each row sees (default: i + 1, causal)."""
        # p: (H, r, m')  keys: (r,)
        H, r, m = p.shape
        T = self.T
        i = i0
        while i < i0 + r:
            R = i // T
            if self._band != (layer, R):
                self._buf.zero_()
                self._keys.zero_()
                self._band = (layer, R)
            stop = min(i0 + r, (R + 1) * T)
            self._buf[:, i - R * T : stop - R * T, j0 : j0 + m] = p[:, i - i0 : stop - i0].float()
            self._keys[i - R * T : stop - R * T] = ((torch.arange(i, stop) + 1.0) if keys is None
                                                    else keys[i - i0 : stop - i0].float())
            if stop == min((R + 1) * T, self.n):
                self._flush(layer, R)
            i = stop

    def _flush(self, layer: int, R: int) -> None:
        """Row-tile R complete: its off-band tiles compete with the K kept for each head of ``layer``."""
        if R < 2:
            return
        H, T, K, C = self.H, self.T, self.K, self.C
        tiles = self._buf.view(H, T, C, T).permute(0, 2, 1, 3)  # (H, C, T, T): tile c of each head
        k = self._keys[None, :, None].double()  # (1, T, 1)
        mass = (tiles.sum(-1).double() * k[..., 0][:, None, :]).sum(-1)  # (H, C): Σ_i k_i Σ_j P_ij per tile
        mass[:, 0] -= (self._buf[:, :, : self.sinks].double() * k).sum((-2, -1))
        mass[:, R - 1 :] = -math.inf  # the band's tiles (and the masked future)
        cand, idx = mass.topk(min(K, R - 1), -1)  # (H, k)
        cand = torch.where(cand > 0, cand, torch.full_like(cand, -math.inf))
        heads = torch.arange(H)[:, None]
        all_score = torch.cat([self.score[layer], cand], -1)  # (H, K + k)
        all_maps = torch.cat([self.maps[layer], tiles[heads, idx]], 1)  # (H, K + k, T, T)
        new_pos = torch.stack([torch.full_like(idx, R * T), idx * T], -1)  # (H, k, 2)
        all_pos = torch.cat([self.pos[layer], new_pos], 1)  # (H, K + k, 2)
        best, keep = all_score.topk(K, -1)  # (H, K)
        self.score[layer] = best
        self.maps[layer] = all_maps[heads, keep]
        self.pos[layer] = torch.where(torch.isfinite(best)[..., None], all_pos[heads, keep], -1)

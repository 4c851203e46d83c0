"""Per-head statistics of attention, accumulated one block of softmax rows at a time.

For a layer with heads h, the block p = P[h, i0:i1, j0:j1] (rows sum to 1
over the keys the model's mask allows) adds to, for every head at once:

* band profile     b_d = Σ_i P_{i, i−d}            (mass at relative distance d = i − j; index d + n − 1)
* column mass      c_j = Σ_i P_ij                  (sinks, rare tokens)
* in-band columns  c_j(w) = Σ_{i: |i−j| ≤ w} P_ij   for each w of the fit grid
* entropy          Σ_i −Σ_j P_ij ln P_ij  (and divided by ln(i+1), the keys a causal row can see)
* roles' scores    (``attnlab.analysis.roles``): max over word keys (confidence), the histogram
                   of a_i − i with a_i = argmax_j P_ij (positional), a_i on the rarest token
* optional maps    a window of rows ``rows=(a, b)`` kept exactly (keys a:b), a pooled map:
                   key groups summed, query groups averaged (``attnlab.viz.explorer.pool_tokens``),
                   and per head the exact tiles of most off-band mass (``attnlab.llm.heads.zoom_tiles``)

Nothing here is n×n: the accumulators are O(L·H·n·|grid|); the structured
fit is computed from them (``attnlab.llm.heads.streamed_fit``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attnlab.masks import in_band

__all__ = ["TokenInfo", "HeadStatistics", "DEFAULT_WS"]

DEFAULT_WS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


@dataclass(frozen=True)
class TokenInfo:
    """What the role scores need to know about the n tokens (as ``attnlab.analysis.roles`` defines them)."""

    word: np.ndarray       # (n,) bool: not a special token
    rare1: np.ndarray      # (n,) bool: an occurrence of the rarest word token
    rare2: np.ndarray      # (n,) bool: one of the two rarest
    candidate: np.ndarray  # (n,) bool: sink candidates (special, punctuation, first token)


class HeadStatistics:
    """Accumulators for L layers × H heads over n tokens; ``observe`` is the ``streaming`` observer."""

    def __init__(self, n_layers: int, n_heads: int, n: int, tokens: TokenInfo, *, ws=DEFAULT_WS,
                 rows: tuple[int, int] | None = None, pool: int | None = None, tiles: tuple[int, int] | None = None):
        L, H = n_layers, n_heads
        self.L, self.H, self.n = L, H, n
        self.ws = tuple(int(w) for w in ws if 0 <= w < n)
        self.tokens = tokens
        f64 = dict(dtype=torch.float64)
        self.profile = torch.zeros(L, H, 2 * n - 1, **f64)          # b_d, index d + n − 1
        self.column = torch.zeros(L, H, n, **f64)                    # c_j
        self.in_band = torch.zeros(L, H, len(self.ws), n, **f64)     # c_j(w)
        self.entropy = torch.zeros(L, H, **f64)                      # Σ_i H_i
        self.entropy_norm = torch.zeros(L, H, **f64)                 # Σ_{i ≥ 1} H_i / ln(i + 1)
        self.confidence = torch.zeros(L, H, **f64)                   # Σ_{i word} max_{j word} P_ij
        self.argmax_hist = torch.zeros(L, H, 2 * n - 1, dtype=torch.long)  # #{i word: a_i − i = o}, index o + n − 1
        self.on_rare1 = torch.zeros(L, H, dtype=torch.long)
        self.on_rare2 = torch.zeros(L, H, dtype=torch.long)
        self.rows_seen = torch.zeros(L, dtype=torch.long)
        self._word = torch.as_tensor(tokens.word, dtype=torch.bool)
        self._rare1 = torch.as_tensor(tokens.rare1, dtype=torch.bool)
        self._rare2 = torch.as_tensor(tokens.rare2, dtype=torch.bool)
        self._bands: dict = {}
        self.window = None
        if rows is not None:
            a, b = rows
            if not 0 <= a < b <= n:
                raise ValueError(f"rows: expected 0 <= a < b <= {n}, got {rows}")
            self.window = (a, b)
            self.window_maps = torch.zeros(L, H, b - a, b - a)
        self.pool = None
        if pool is not None and pool > 1:
            self.pool = int(pool)
            G = math.ceil(n / self.pool)
            self.pooled = torch.zeros(L, H, G, G, **f64)
        self.tiles = None
        if tiles is not None:  # (tile side T, tiles per head K)
            from attnlab.llm.heads.zoom_tiles import ZoomTiles

            self.tiles = ZoomTiles(L, H, n, tile=tiles[0], count=tiles[1])

    # ------------------------------------------------------------------------------------------
    def _band(self, shift: int, r: int, width: int, w: int) -> torch.Tensor:
        """float (r, width): 1 where |t + shift − c| ≤ w (row t, column c of a sub-block); cached, blocks repeat."""
        key = (shift, r, width, w)
        band = self._bands.get(key)
        if band is None:
            if len(self._bands) > 64:
                self._bands.clear()
            t = torch.arange(r)[:, None] + shift
            band = in_band(t, torch.arange(width)[None, :], w).float()
            self._bands[key] = band
        return band

    def _word_max(self, p: torch.Tensor, j0: int) -> torch.Tensor:
        """max_j P_ij over the word keys of the block: the max of each run of word columns (views, no copy)."""
        # p: (H, r, m)
        m = p.shape[-1]
        word = self._word[j0 : j0 + m]
        out = torch.zeros(p.shape[:2], dtype=p.dtype)
        start = None
        for c in list(torch.nonzero(~word).flatten().tolist()) + [m]:
            a = 0 if start is None else start
            if c > a:
                out = torch.maximum(out, p[..., a:c].amax(-1))
            start = c + 1
        return out

    def observe(self, layer: int, i0: int, j0: int, p: torch.Tensor, allowed: torch.Tensor,
                entropy: torch.Tensor | None = None) -> None:
        """Add the block p = P[:, i0:i0+r, j0:j0+m'] of ``layer`` (batch of one text); ``entropy`` its rows'
        (if known)."""
        # p: (1, H, r, m')  allowed: (1, 1, r, m')  entropy: (1, H, r)
        p = p[0]
        H, r, m = p.shape
        n = self.n
        i = torch.arange(i0, i0 + r)  # query positions
        self.rows_seen[layer] += r

        # band profile: d = i − j.  Row t written shifted right by r − 1 − t into G, so that every
        # column u of G holds one distance: d = i0 − j0 + r − 1 − u
        W = m + r - 1
        G = p.new_zeros(H, r, W)
        G.as_strided((H, r, m), (r * W, W - 1, 1), r - 1).copy_(p)
        lo = i0 - j0 - m + 1 + n - 1  # profile index of u = W − 1
        self.profile[layer, :, lo : lo + W] += G.sum(1).flip(-1).double()
        del G

        # column mass and in-band column mass c_j(w) (only the band's few columns are read)
        self.column[layer, :, j0 : j0 + m] += p.sum(1).double()
        for k, w in enumerate(self.ws):
            a, b = max(j0, i0 - w), min(j0 + m, i0 + r + w)
            if a >= b:
                continue
            sub = p[:, :, a - j0 : b - j0]  # (H, r, b − a)
            self.in_band[layer, :, k, a:b] += (sub * self._band(i0 - a, r, b - a, w)).sum(1).double()

        # entropy (nats): H_i = −Σ_j P_ij ln P_ij
        ent = (torch.special.entr(p).sum(-1) if entropy is None else entropy[0]).double()  # (H, r)
        self.entropy[layer] += ent.sum(-1)
        visible = (i + 1).double()  # a causal row sees i + 1 keys (roles' definition)
        ok = visible > 1
        self.entropy_norm[layer] += (ent[:, ok] / torch.log(visible[ok])).sum(-1)

        # roles: a_i = argmax_j P_ij (first on ties), confidence = max over word keys, on word queries
        top, arg = p.max(-1)  # (H, r)
        arg = arg + j0
        qw = self._word[i0 : i0 + r]  # (r,)
        wmax = self._word_max(p, j0) if not bool(self._word[j0 : j0 + m].all()) else top
        self.confidence[layer] += (wmax.clamp_min(0) * qw).sum(-1).double()
        off = arg - i[None, :] + (n - 1)
        flat = (torch.arange(H)[:, None] * (2 * n - 1) + off)[:, qw]
        self.argmax_hist[layer] += torch.bincount(flat.reshape(-1), minlength=H * (2 * n - 1)).reshape(H, 2 * n - 1)
        self.on_rare1[layer] += (self._rare1[arg] & qw).sum(-1)
        self.on_rare2[layer] += (self._rare2[arg] & qw).sum(-1)

        # stored maps, only where asked
        if self.window is not None:
            a, b = self.window
            t0, t1 = max(a, i0), min(b, i0 + r)
            k0, k1 = max(a, j0), min(b, j0 + m)
            if t0 < t1 and k0 < k1:
                self.window_maps[layer, :, t0 - a : t1 - a, k0 - a : k1 - a] = (
                    p[:, t0 - i0 : t1 - i0, k0 - j0 : k1 - j0])
        if self.tiles is not None:
            self.tiles.observe(layer, i0, j0, p, allowed[0, 0].sum(-1))  # keys each row sees
        if self.pool is not None:
            g = self.pool
            J0, J1 = j0 // g, math.ceil((j0 + m) / g)
            cols = torch.zeros(H, r, (J1 - J0) * g, dtype=p.dtype)
            cols[:, :, j0 - J0 * g : j0 - J0 * g + m] = p
            key_groups = cols.reshape(H, r, J1 - J0, g).sum(-1)  # keys summed per group: (H, r, J)
            self.pooled[layer, :, :, J0:J1].index_add_(1, i // g, key_groups.double())

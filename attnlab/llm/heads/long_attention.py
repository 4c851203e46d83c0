"""The streamed statistics of every head on one long text (``LongAttention``), and its file.

Made by ``attnlab.llm.heads.long_capture.capture_long``; per layer l and head h:

* ``profile[l, h, d + n − 1]`` — mass at relative distance d = i − j (the band profile),
  ``far_share(D)`` = share of the mass beyond distance D;
* ``column[l, h, j]`` — mass on key column j (sinks, rare tokens);
* ``fit`` — the exact structured fit (band w + num_pos columns) over a grid
  (``attnlab.llm.heads.streamed_fit``) and ``choose(target)``;
* ``roles`` — ``attnlab.analysis.roles.HeadRole`` with the same scores and thresholds;
* optional ``window`` (exact rows a:b, keys a:b) and ``pooled`` maps, as ``AttentionMaps``.

File: ONE ``.safetensors`` (arrays) with the metadata (tokens, roles, grid,
timing, memory) as JSON in its header, sized like the page it feeds:

* the statistics at token resolution (``profile``, ``column``) in float32 (a relative 6e-8: sums of
  float32 probabilities), and of the profile only the side d ≥ 0 (``profile.causal``) when the other
  side is all zero, as for every causal head — they stay exact: the fit, far share, reach and a plan read them;
* the maps (``pooled``, ``window_maps``, ``tiles``) as the explorer shows them: log-quantised bytes
  (``attnlab.viz.log_bytes``, ±3.7 %, values below 1e-8 read as 0), deflated, one uint8 array each
  (``<name>.log8``), their shape and range in the header's ``maps`` — pictures, which no statistic reads.

Files written before that (float64 profile, float32 maps) load unchanged.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnlab.analysis.roles import HeadRole
from attnlab.atomic import write_atomic
from attnlab.errors import UserError
from attnlab.llm.heads.streamed_fit import FitTable, choose

__all__ = ["FORMAT", "LongAttention"]

FORMAT = "attnlab.long_attention"
MAPS = ("window_maps", "pooled", "tiles")  # stored log-quantised and deflated (module docstring)
MAP_RANGE = (-8.0, 0.0)                    # log10 range of the stored maps (the explorer's)


@dataclass
class LongAttention:
    """The streamed statistics of every head on one long text (module docstring)."""

    name: str
    tokens: list[str]
    special: list[bool]
    layers: list[int]                 # the model layers analysed (rows of every array)
    layer_types: list[str]            # of those layers
    sliding_window: int | None
    profile: np.ndarray               # (L, H, 2n − 1)
    column: np.ndarray                # (L, H, n)
    fit: FitTable
    roles: list[HeadRole]
    entropy: np.ndarray               # (L, H) mean nats per row
    block_rows: int
    seconds: float
    peak_bytes: int                   # peak resident memory of the process (ru_maxrss)
    estimate_bytes: int
    window: tuple[int, int] | None = None
    window_maps: np.ndarray | None = None   # (L, H, b − a, b − a)
    pool: int | None = None
    pooled: np.ndarray | None = None        # (L, H, G, G)
    meta: dict = field(default_factory=dict)
    tiles: np.ndarray | None = None         # (L, H, K, T, T) exact tiles
    tile_pos: np.ndarray | None = None      # (L, H, K, 2) (row start, key start); −1: empty slot
    tile_score: np.ndarray | None = None    # (L, H, K) off-band mass of each tile

    @property
    def n(self) -> int:
        return len(self.tokens)

    def distance_profile(self) -> np.ndarray:
        """Mass by distance d = i − j ≥ 0 (and the j > i side folded in, zero for causal heads): (L, H, n)."""
        n = self.n
        out = self.profile[..., n - 1 :].copy()
        out[..., 1:] += self.profile[..., : n - 1][..., ::-1]
        return out

    def far_distance(self) -> int:
        """The distance past which a head's mass counts as far: the sliding window, else 512 tokens."""
        return self.sliding_window if self.sliding_window else 512

    def far_share(self, distance: int) -> np.ndarray:
        """Share of each head's mass at distance |i − j| > ``distance``: (L, H)."""
        d = self.distance_profile()
        total = d.sum(-1)
        return np.divide(d[..., distance + 1 :].sum(-1), total, out=np.zeros_like(total), where=total > 0)

    def reach(self) -> np.ndarray:
        """Largest distance |i − j| at which each head puts any mass (softmax is never 0 on an allowed key): (L, H).

        A causal full-attention head reaches n − 1 (its last query sees the first key);
        a head behind a sliding window of size W reaches W − 1 — found from the data, not the config.
        """
        d = self.distance_profile()
        nz = d > 0
        return np.where(nz.any(-1), d.shape[-1] - 1 - np.argmax(nz[..., ::-1], -1), -1)

    def inferred_layer_types(self) -> list[str]:
        """Per layer "windowed(W)" when no head reaches past distance W − 1 < n − 1, else "full" (from ``reach``)."""
        r = self.reach().max(-1)  # (L,)
        return [f"windowed({int(x) + 1})" if x < self.n - 1 else "full" for x in r]

    def top_columns(self, k: int = 4) -> tuple[np.ndarray, np.ndarray]:
        """The k key columns of most mass per head and their share of the head's mass: (L, H, k) each."""
        order = np.argsort(-self.column, -1, kind="stable")[..., :k]
        share = np.take_along_axis(self.column, order, -1) / np.maximum(self.column.sum(-1, keepdims=True), 1e-30)
        return order, share

    def choose(self, target: float = 0.95, **kw):
        return choose(self.fit, target, **kw)

    # ---------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """One .safetensors file: arrays + JSON metadata (atomic); the storage of the module docstring."""
        from safetensors.numpy import save_file

        from attnlab.viz.log_bytes import log_quantise

        n = self.n
        causal = not np.any(self.profile[..., : n - 1])  # no mass at j > i
        arrays = {
            ("profile.causal" if causal else "profile"):
                (self.profile[..., n - 1 :] if causal else self.profile).astype(np.float32),
            "column": self.column.astype(np.float32),
            "fit.mass_captured": self.fit.mass_captured, "fit.l1": self.fit.l1, "fit.entries": self.fit.entries,
            "fit.columns": self.fit.columns.astype(np.int32), "entropy": self.entropy,  # key positions < 2^31
        }
        maps = {}
        for name in MAPS:
            x = getattr(self, name)
            if x is not None:
                q = log_quantise(x, *MAP_RANGE)
                arrays[name + ".log8"] = np.frombuffer(zlib.compress(q.tobytes(), 6), dtype=np.uint8)
                maps[name] = {"shape": list(q.shape), "lo": MAP_RANGE[0], "hi": MAP_RANGE[1]}
        if self.tiles is not None:
            arrays.update({"tiles.pos": self.tile_pos.astype(np.int64),
                           "tiles.score": self.tile_score.astype(np.float64)})
        meta = {
            "name": self.name, "tokens": self.tokens, "special": self.special, "layers": self.layers,
            "layer_types": self.layer_types, "sliding_window": self.sliding_window, "ws": list(self.fit.ws),
            "num_pos": list(self.fit.num_pos), "roles": [r.to_dict() for r in self.roles],
            "block_rows": self.block_rows,
            "seconds": self.seconds, "peak_bytes": self.peak_bytes, "estimate_bytes": self.estimate_bytes,
            "window": list(self.window) if self.window else None, "pool": self.pool, "meta": self.meta, "maps": maps,
        }
        arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
        return write_atomic(path,
                            lambda tmp: save_file(arrays, tmp, metadata={"format": FORMAT, "json": json.dumps(meta)}))

    @staticmethod
    def is_file(path: str | os.PathLike) -> bool:
        """Whether ``path`` is a .safetensors file with the long-attention header (False for anything else)."""
        try:
            from safetensors import safe_open

            with safe_open(str(path), framework="numpy") as f:
                return (f.metadata() or {}).get("format") == FORMAT
        except Exception:
            return False

    @classmethod
    def load(cls, path: str | os.PathLike) -> "LongAttention":
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise UserError(f"{path}: no such long-attention file")
        try:
            with safe_open(str(path), framework="numpy") as f:
                header = f.metadata() or {}
                if header.get("format") != FORMAT:
                    raise UserError(f"{path}: not a long-attention file (no '{FORMAT}' header)")
                a = {k: f.get_tensor(k) for k in f.keys()}
            meta = json.loads(header["json"])
        except UserError:
            raise
        except Exception as err:
            raise UserError(f"{path}: not a long-attention file ({type(err).__name__}: {err})") from None
        fit = FitTable(tuple(meta["ws"]), tuple(meta["num_pos"]), a["fit.mass_captured"], a["fit.l1"], a["fit.entries"],
                       a["fit.columns"])
        profile, column = _profile(a, len(meta["tokens"])), a["column"].astype(np.float64)
        for name, rec in (meta.get("maps") or {}).items():  # the maps stored as log bytes
            from attnlab.viz.log_bytes import log_dequantise

            q = np.frombuffer(zlib.decompress(a.pop(name + ".log8").tobytes()), dtype=np.uint8).reshape(rec["shape"])
            a[name] = log_dequantise(q, rec["lo"], rec["hi"]).astype(np.float32)
        return cls(
            name=meta["name"], tokens=meta["tokens"], special=meta["special"], layers=meta["layers"],
            layer_types=meta["layer_types"], sliding_window=meta["sliding_window"], profile=profile,
            column=column, fit=fit, roles=[HeadRole(**r) for r in meta["roles"]], entropy=a["entropy"],
            block_rows=meta["block_rows"], seconds=meta["seconds"], peak_bytes=meta["peak_bytes"],
            estimate_bytes=meta["estimate_bytes"], window=tuple(meta["window"]) if meta["window"] else None,
            window_maps=a.get("window_maps"), pool=meta["pool"], pooled=a.get("pooled"), meta=meta["meta"],
            tiles=a.get("tiles"), tile_pos=a.get("tiles.pos"), tile_score=a.get("tiles.score"),
        )


def _profile(a: dict, n: int) -> np.ndarray:
    """The (L, H, 2n − 1) band profile of a file's arrays (the side d ≥ 0 alone when stored so), float64."""
    if "profile" in a:
        return a["profile"].astype(np.float64)
    half = a["profile.causal"].astype(np.float64)  # (L, H, n): d = 0 .. n − 1
    return np.concatenate([np.zeros(half.shape[:-1] + (n - 1,)), half], -1)

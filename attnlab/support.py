"""The structured support S: a shifted band, a few key columns, a sparse residual — defined once.

    S = B_{w,o} ∪ (rows × T) ∪ D ∪ R,
    B_{w,o} = {(i, j) : |j − i − o| ≤ w}          band of half-width w, diagonal offset o
    rows × T = {(i, j) : j ∈ T},  |T| ≤ num_pos    key columns (sinks, rare tokens, positions)
    D = {(i, j) : j − i ∈ Δ}                       single diagonals at any offsets Δ (MInference's slash
                                                   lines; the thesis's I_n P with P a shift)
    R                                              residual: s further entries (per row or per head)

This is the thesis's ``I_n P + Ẽ`` written as a set of entries: the band and
the columns are the structured part ``I_n P``, the residual the sparse ``Ẽ``.
Every user of the structure derives from this one object:

* the exact fit (``analysis.structured_fit``) chooses T with ``top_columns``
  and stores A on ``Support.dense``;
* head surgery (``nn.surgery``) keeps exactly the fit's support of each head;
* the ``structured`` mechanism executes it through the chunked kernel
  (``kernel_extra_idx``) and draws it densely for ``weights()``;
* ``mask_mod`` turns it into a FlexAttention predicate (dense reference,
  ``BlockMask``);
* an LLM plan is a table of supports, one per (layer, head).

A support may describe a batch of heads: ``w``, ``offset`` are integers or
arrays of shape ``(...)``; ``columns`` has shape ``(..., g)`` with ``-1`` for an
empty slot (a column the fit found no mass for).  ``w = FULL`` (−1) means the
whole row (an untouched head).  The same code serves numpy arrays and torch
tensors (the functions use only operations both share), so numpy and torch
agree because they run the same lines.

Causality, padding and sliding windows are the model's mask, not part of S:
callers intersect ``dense`` with their ``allowed`` matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnlab.masks import NEG_INF, MaskMod, in_band

__all__ = ["FULL", "NO_DIAGONAL", "Support", "diagonal_mask", "band_of", "check_num_pos", "check_w", "column_mask",
           "top_columns"]

FULL = -1  # w = FULL: the head keeps every entry of its rows (an untouched / "full" head)
NO_DIAGONAL = 1 << 40  # an empty diagonal slot: an offset no key of any real input lies on


def _ns(*xs: Any):
    """The array namespace of the arguments: torch if any is a tensor, else numpy."""
    return torch if any(isinstance(x, torch.Tensor) for x in xs) else np


def check_w(w, n: int | None = None, name: str = "w") -> int:
    """Band half-width: an integer with 0 ≤ w (< n when n is given) — the one check of w."""
    if isinstance(w, bool) or not isinstance(w, (int, np.integer)):
        raise ValueError(f"{name}: expected an integer, got {w!r}")
    if n is None and w < 0:
        raise ValueError(f"{name}: band half-width must be >= 0, got {w}")
    if n is not None and (w < 0 or w >= n):
        raise ValueError(f"{name}: band half-width must satisfy 0 <= {name} < n = {n}, got {w}")
    return int(w)


def check_num_pos(num_pos, m: int | None = None, name: str = "num_pos") -> int:
    """Number of key columns: an integer with 0 ≤ num_pos (≤ m when m is given) — the one check of num_pos."""
    if isinstance(num_pos, bool) or not isinstance(num_pos, (int, np.integer)):
        raise ValueError(f"{name}: expected an integer, got {num_pos!r}")
    if m is None and num_pos < 0:
        raise ValueError(f"{name}: number of key columns must be >= 0, got {num_pos}")
    if m is not None and (num_pos < 0 or num_pos > m):
        raise ValueError(f"{name}: must satisfy 0 <= {name} <= {m} (number of keys), got {num_pos}")
    return int(num_pos)


def band_of(n: int, m: int, w, offset=0, like=None):
    """B_{w,o}: ``(..., n, m)`` bool, |j − i − o| ≤ w (w = FULL: everything).

    ``w`` and ``offset`` are integers or arrays ``(...)``; the result is a torch tensor
    if any of ``w``, ``offset``, ``like`` is one (on its device), else a numpy array.
    """
    tensors = [x for x in (w, offset, like) if isinstance(x, torch.Tensor)]
    if tensors:
        dev = tensors[0].device
        w_ = torch.as_tensor(w, dtype=torch.long, device=dev)[..., None, None]
        o_ = torch.as_tensor(offset, dtype=torch.long, device=dev)[..., None, None]
        i = torch.arange(n, device=dev)[:, None]
        j = torch.arange(m, device=dev)[None, :]
    else:
        w_, o_ = np.asarray(w)[..., None, None], np.asarray(offset)[..., None, None]
        i, j = np.arange(n)[:, None], np.arange(m)[None, :]
    return in_band(i, j, w_, o_) | (w_ == FULL)


def column_mask(columns, m: int):
    """1[j ∈ T]: ``(..., m)`` bool from ``columns`` ``(..., g)`` (−1 slots hold nothing)."""
    xp = _ns(columns)
    if xp is torch:   # O(g + m) a row: a scatter into one spare slot ([m]) for the empty slots and those ≥ m
        table = torch.zeros(*columns.shape[:-1], m + 1, dtype=torch.bool, device=columns.device)
        return table.scatter_(-1, torch.where((columns >= 0) & (columns < m), columns, m), True)[..., :m]
    j = xp.arange(m)
    return (columns[..., :, None] == j).any(-2)  # (..., m)


def top_columns(c, num_pos):
    """T: the ``num_pos`` columns with the largest off-band mass c_t, most first; ``(..., max num_pos)``.

    Ties go to the lowest index (a stable sort).  A column with c_t = 0 would store
    nothing and is left out (−1); so is any slot beyond a head's own ``num_pos``
    when ``num_pos`` is an array ``(...)`` (one budget per head).  Optimal for the
    column budget (exchange argument, ``analysis.structured_fit``).
    """
    xp = _ns(c)
    k = int(np.max(np.asarray(num_pos.cpu() if isinstance(num_pos, torch.Tensor) else num_pos), initial=0))
    k = min(k, c.shape[-1])
    if xp is torch:
        order = torch.sort(-c, dim=-1, stable=True).indices[..., :k]
        mass = torch.gather(c, -1, order)
        slot = torch.arange(k, device=c.device)
        budget = torch.as_tensor(num_pos, device=c.device)[..., None]
    else:
        order = np.argsort(-c, axis=-1, kind="stable")[..., :k]
        mass = np.take_along_axis(c, order, axis=-1)
        slot = np.arange(k)
        budget = np.asarray(num_pos)[..., None]
    keep = (mass > 0) & (slot < budget)
    return xp.where(keep, order, -1)


def diagonal_mask(diagonals, n: int, m: int):
    """D: ``(..., n, m)`` bool, j − i ∈ Δ, from ``diagonals`` ``(..., s)`` (``NO_DIAGONAL`` slots hold nothing).

    The offsets as columns of a table over j − i + n − 1 ∈ [0, n + m − 1) (``column_mask``: offsets no (i, j) has hold
    nothing), read at every (i, j): O(n·m), not the O(n·m·s) of comparing each entry with each offset."""
    xp = _ns(diagonals)
    dev = {"device": diagonals.device} if xp is torch else {}
    d = xp.arange(m, **dev)[None, :] - xp.arange(n, **dev)[:, None] + (n - 1)   # (n, m): j − i + n − 1
    return column_mask(diagonals + (n - 1), n + m - 1)[..., d]                    # (..., n, m)


@dataclass(frozen=True)
class Support:
    """S = B_{w,o} ∪ (rows × T) ∪ R for one head or a batch of heads (module docstring).

    w:        int or ``(...)``; ``FULL`` (−1) for a full head.
    offset:   int or ``(...)``: the band is |j − i − o| ≤ w.
    columns:  ``(..., g)`` key positions T; −1: empty slot.  Fixed positions (sinks) or the fit's choice.
    diagonals: ``(..., s)`` offsets Δ of single diagonals j − i = δ; ``NO_DIAGONAL``: empty slot.
    residual: s, the number of extra entries per row chosen from the scores at run time
              (``structured`` mechanism, LLM plans); the fit's residual is explicit, ``dense(residual=...)``.
    """

    w: Any = 0
    offset: Any = 0
    columns: Any = field(default_factory=lambda: np.zeros((0,), dtype=np.int64))
    residual: int = 0
    diagonals: Any = field(default_factory=lambda: np.zeros((0,), dtype=np.int64))

    @classmethod
    def full(cls) -> "Support":
        return cls(w=FULL)

    @property
    def num_pos(self) -> int:
        """g: column slots (including empty ones)."""
        return int(self.columns.shape[-1])

    def band(self, n: int, m: int):
        """B_{w,o}: ``(..., n, m)`` bool."""
        return band_of(n, m, self.w, self.offset, like=self.columns)

    def column_mask(self, m: int):
        """1[j ∈ T]: ``(..., m)`` bool."""
        return column_mask(self.columns, m)

    def dense(self, n: int, m: int, residual=None):
        """1[(i, j) ∈ S]: ``(..., n, m)`` bool; ``residual``: explicit R, bool broadcastable to it."""
        s = self.band(n, m) | self.column_mask(m)[..., None, :]
        if self.diagonals.shape[-1]:
            s = s | diagonal_mask(self.diagonals, n, m)
        return s if residual is None else s | residual

    def entries(self, n: int, m: int | None = None, allowed=None) -> Any:
        """|S ∩ allowed| without the residual (plus ``residual`` per row when s > 0): the cost in entries."""
        m = n if m is None else m
        s = self.dense(n, m)
        if allowed is not None:
            s = s & allowed
        count = s.sum((-2, -1))
        return count + self.residual * n if self.residual else count

    def mask_mod(self, device=None):
        """The FlexAttention predicate ``(b, h, q_idx, kv_idx) -> bool`` of band ∪ columns ∪ diagonals (torch).

        Per-head ``w``, ``offset`` of shape ``(H,)`` and ``columns`` / ``diagonals`` of shape ``(H, g)`` or
        ``(B, H, g)`` are indexed by ``h`` (and ``b``); the residual is data-dependent and not included.
        The tables are placed on ``device`` once, here (default: ``columns``' device if it is a tensor, else the
        CPU): the predicate itself moves nothing, as ``torch.compile`` lowers it into the kernel (a device copy
        inside it fails there: "Buffers cannot be created while lowering a pointwise subgraph").
        """
        if device is None:
            device = next((x.device for x in (self.columns, self.w, self.offset, self.diagonals)
                           if isinstance(x, torch.Tensor)), "cpu")

        def table(x):   # a scalar stays a Python int (a constant of the kernel), an array becomes a tensor on device
            if not isinstance(x, torch.Tensor) and np.ndim(x) == 0:
                return int(x)
            return torch.as_tensor(x, dtype=torch.long, device=device)

        w, o = table(self.w), table(self.offset)
        cols = torch.as_tensor(self.columns, dtype=torch.long, device=device)
        diags = torch.as_tensor(self.diagonals, dtype=torch.long, device=device)

        def per_head(x, b, h):
            if not isinstance(x, torch.Tensor) or x.dim() == 0:
                return x
            return x[h] if x.dim() == 1 else x[b, h]

        def fn(b, h, q, kv):
            w_h, o_h = per_head(w, b, h), per_head(o, b, h)
            ok = in_band(q, kv, w_h, o_h) | (w_h == FULL)
            if cols.shape[-1]:
                c_h = cols if cols.dim() == 1 else (cols[h] if cols.dim() == 2 else cols[b, h])  # (..., g)
                for t in range(c_h.shape[-1]):  # g slots, unrolled: FlexAttention's compiler lowers no reduction here
                    ok = ok | (c_h[..., t] == kv)
            if diags.shape[-1]:
                d_h = diags if diags.dim() == 1 else (diags[h] if diags.dim() == 2 else diags[b, h])  # (..., s)
                for t in range(d_h.shape[-1]):
                    ok = ok | (d_h[..., t] == kv - q)
            return ok

        return MaskMod(fn, f"support(w={self.w}, offset={self.offset}, g={self.num_pos})")

    def kernel_extra_idx(self, n: int, chunk: int):
        """The columns as the chunked kernel's extra keys: ``(…, T, g)`` with T = ⌈n/c⌉ chunks.

        Empty slots (−1) point at key 0 and are disowned with ``kernel_extra_own``.
        """
        cols = torch.as_tensor(self.columns, dtype=torch.long)
        T = -(-n // chunk)
        return cols.clamp_min(0)[..., None, :].expand(*cols.shape[:-1], T, cols.shape[-1])

    def kernel_extra_own(self):
        """Which column slots hold a key: ``(…, 1, 1, g)`` bool, broadcast over chunks and queries."""
        cols = torch.as_tensor(self.columns, dtype=torch.long)
        return (cols >= 0)[..., None, None, :]

    def kernel_diagonal_extras(self, n: int, m: int, chunk: int):
        """The diagonals as the chunked kernel's extra keys, one per (diagonal, query) of each chunk.

            slot x·c + a of chunk t:  key j = t·c + a + δ_x, owned by query a of the chunk only
        Returns ``extra_idx`` ``(…, T, s·c)`` (clamped into [0, m)), ``extra_own`` ``(1, 1, 1, c, s·c)``
        (query a owns the slots x·c + a) and ``extra_logit`` ``(…, T, s·c)``: 0, or −1e30 where j falls
        outside [0, m) or on a key ``columns`` already holds (each entry is read once).
        """
        diags = torch.as_tensor(self.diagonals, dtype=torch.long)                       # (…, s)
        T, s, c = -(-n // chunk), diags.shape[-1], chunk
        i = torch.arange(T * c, device=diags.device).view(T, 1, c)                        # (T, 1, c): query t·c + a
        j = i + diags[..., None, :, None]                                                 # (…, T, s, c)
        bad = (j < 0) | (j >= m) | (i >= n)
        idx = j.clamp(0, m - 1)
        if self.columns.shape[-1]:
            cols = torch.as_tensor(self.columns, dtype=torch.long, device=diags.device)
            held = column_mask(cols, m)                                                   # (…, m)
            bad = bad | torch.gather(held[..., None, :].expand(*held.shape[:-1], T, m), -1,
                                     idx.flatten(-2)).view(idx.shape)
        idx, bad = idx.flatten(-2), bad.flatten(-2)                                       # (…, T, s·c)
        own = torch.eye(c, dtype=torch.bool, device=diags.device).repeat(1, s).view(1, 1, 1, c, s * c)
        logit = torch.zeros(bad.shape, dtype=torch.float32, device=diags.device).masked_fill_(bad, NEG_INF)
        return idx, own, logit

    def to_dict(self) -> dict:
        """A plain (JSON/TOML) form: lists for arrays (``diagonals`` only when there are some)."""
        def plain(x):
            return x.tolist() if hasattr(x, "tolist") else x

        d = {"w": plain(self.w), "offset": plain(self.offset), "columns": plain(self.columns),
             "residual": int(self.residual)}
        if self.diagonals.shape[-1]:
            d["diagonals"] = plain(self.diagonals)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Support":
        unknown = set(d) - {"w", "offset", "columns", "residual", "diagonals"}
        if unknown:
            raise ValueError(f"support: unknown field(s) {sorted(unknown)}")
        return cls(
            w=np.asarray(d.get("w", 0), dtype=np.int64) if not isinstance(d.get("w", 0), int) else d.get("w", 0),
            offset=(np.asarray(d.get("offset", 0), dtype=np.int64) if not isinstance(d.get("offset", 0), int)
                    else d.get("offset", 0)),
            columns=np.asarray(d.get("columns", []), dtype=np.int64),
            residual=int(d.get("residual", 0)),
            diagonals=np.asarray(d.get("diagonals", []), dtype=np.int64),
        )

"""A layer's prefill parts as one FlexAttention ``BlockMask``: the tiles read, the tiles read whole, the predicate of
the rest.

For query tile a (rows I_a = [a·t, (a+1)·t) ∩ [0, n), first / last row a₀, a₁), key tile c (keys J_c, c₀, c₁), head h
and batch row β, with S_βh(i) the seam's support (``backend``: j ≤ i and i − j ≤ w_h ∨ j ∈ T_βh ∨ j − i ∈ Δ_βh ∨
⌊j/b⌋ ∈ U_βh(⌊i/b⌋) ∨ i ≥ n − R_h; a head with key blocks reads no diagonals, ``lines_of``):

    any[β,h,a,c]  = (I_a × J_c) ∩ S_βh ≠ ∅       the tile is read            (FlexAttention's kv_indices)
    full[β,h,a,c] = I_a × J_c ⊂ S_βh              read without the predicate  (full_kv_indices; a subset of any)
    mask_mod(β, h, i, j) = 1[(i, j) ∈ S_βh]       evaluated on the tiles of any ∖ full only

Each part's tiles are written straight from its indices, never by evaluating a predicate on the n × n grid:

    band   i − j ≤ w:   any ⇔ c₀ ≤ a₁ ∧ c₁ ≥ a₀ − w        full ⇔ c₁ ≤ a₀ ∧ c₀ ≥ a₁ − w
    tail   i ≥ n − R:   any ⇔ a₁ ≥ n − R ∧ c₀ ≤ a₁          full ⇔ a₀ ≥ n − R ∧ c₁ ≤ a₀
    column τ:           any ⇔ τ ∈ J_c ∧ τ ≤ a₁             (each key tile's smallest column: one scatter)
    diagonal δ:         any ⇔ c ∈ {⌊max(0, a₀+δ)/t⌋, ⌊(a₁+δ)/t⌋} ∧ a₁ + δ ≥ 0
                                                       (a line crosses ≤ 2 key tiles of a row tile)
    key block u of query block p (b | t): any at (⌊p·b/t⌋, ⌊u·b/t⌋) when u·b ≤ p's last row;
                                          full when b = t ∧ u < p

A full tile lies inside [0, n)² (the boundary tiles always go through the predicate).  The band and the tails are
the plan's own (w_h, R_h, n): their tiles are built once per (plan, n, t, device) and cached (``static_tiles``); a
layer without per-input parts reuses one cached BlockMask (``layer_block_mask``).  The predicate reads per-input
tables placed on the device once: 1[j ∈ T_βh] (B, H, N), 1[i − j ∈ −Δ_βh] (B, H, 2N), U_βh (B, H, N/b, K), N = ⌈n/t⌉·t.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from attnlab.llm.execution.backend import PrefillParts
from attnlab.llm.execution.profile_ranges import span
from attnlab.llm.plans.plan import FULL
from attnlab.support import NO_DIAGONAL, column_mask

__all__ = ["TILE", "block_mask_bytes", "dense_of", "head_limits", "layer_block_mask", "static_tiles",
           "tiles_to_block_mask"]

TILE = 128   # t: FlexAttention's query and key tile on CUDA (its kernels' default BLOCK_SIZE)


@lru_cache(maxsize=64)
def _rows(T: int, t: int, n: int, device):
    """First and last index of each of T tiles of t, the last clipped to n − 1: two (T,) long tensors (built once, read
    only)."""
    first = torch.arange(T, device=device) * t
    return first, (first + t - 1).clamp_max(n - 1)


def _inside(T: int, t: int, n: int, device):
    """(T,) bool: the tile holds t real positions (a boundary tile is never read whole)."""
    return (torch.arange(T, device=device) + 1) * t <= n


def head_limits(w, tails, n: int, none: int, device):
    """(w_run (H,), start (H,)) on ``device``: each head's band half-width as read (``none`` for FULL or a band that
    covers every row) and its first tail row (``none`` without a tail); built once per (plan, n), read only."""
    return _head_limits(tuple(w), tuple(tails), n, none, device)


@lru_cache(maxsize=256)
def _head_limits(w: tuple[int, ...], tails: tuple[int, ...], n: int, none: int, device):
    w_run = torch.tensor([none if x == FULL or x >= n - 1 else x for x in w], device=device)
    start = torch.tensor([n - min(r, n) if r > 0 else none for r in tails], device=device)
    return w_run, start


@lru_cache(maxsize=64)
def static_tiles(w: tuple[int, ...], tails: tuple[int, ...], n: int, t: int, device: str):
    """The plan's band ∪ tail rows ∩ causal as tiles: (any, full), each (H, T, T) bool, T = ⌈n/t⌉ — built once."""
    T = -(-n // t)
    a0, a1 = _rows(T, t, n, device)
    c0, c1 = a0, a1
    a0, a1, c0, c1 = a0[:, None], a1[:, None], c0[None, :], c1[None, :]                 # (T, 1), (1, T)
    inside = _inside(T, t, n, device)
    whole = inside[:, None] & inside[None, :]                                          # (T, T) tiles inside [0, n)²
    w_, start = (x.view(-1, 1, 1) for x in head_limits(w, tails, n, n, device))        # (H, 1, 1): band, first tail row
    any_ = ((c0 <= a1) & (c1 >= a0 - w_)) | ((a1 >= start) & (c0 <= a1))               # (H, T, T)
    full = (((c1 <= a0) & (c0 >= a1 - w_)) | ((a0 >= start) & (c1 <= a0))) & whole
    return any_, full


def column_tiles(columns, n: int, t: int):
    """Tiles holding a column some row of the row tile reads: columns (B, H, g) (−1: empty) → (B, H, T, T) bool."""
    B, H, _ = columns.shape
    T = -(-n // t)
    ok = (columns >= 0) & (columns < n)
    first = torch.full((B, H, T + 1), n, dtype=torch.long, device=columns.device)     # smallest column of each key tile
    first.scatter_reduce_(-1, torch.where(ok, columns // t, T), torch.where(ok, columns, n), "amin")
    _, a1 = _rows(T, t, n, columns.device)
    return first[:, :, None, :T] <= a1[:, None]                                         # (B, H, T, T)


def diagonal_tiles(diagonals, n: int, t: int):
    """Tiles a diagonal j − i = δ crosses on rows i with 0 ≤ i + δ: diagonals (B, H, s) → (B, H, T, T) bool."""
    B, H, s = diagonals.shape
    T = -(-n // t)
    dev = diagonals.device
    out = torch.zeros(B, H, T, T + 1, dtype=torch.bool, device=dev)
    if s == 0:
        return out[..., :T]
    a0, a1 = _rows(T, t, n, dev)
    d = diagonals[:, :, None, :]                                                         # (B, H, 1, s)
    ok = ((diagonals != NO_DIAGONAL)[:, :, None, :] & (a1[:, None] + d >= 0)           # (B, H, T, s)
          & (a0[:, None] + d <= n - 1))
    lo = ((a0[:, None] + d).clamp_min(0) // t).clamp_max(T - 1)
    hi = ((a1[:, None] + d).clamp(0, n - 1) // t)
    for c in (lo, hi):
        out.scatter_(-1, torch.where(ok, c, T), True)
    return out[..., :T]


@lru_cache(maxsize=64)
def _block_constants(counts: tuple[int, ...], P: int, K: int, n: int, b: int, t: int, device: str):
    """The constants of ``key_block_tiles`` at one (plan, n), built once: mine (H, K) the slots head h reads (its first
    counts[h]), last (P, 1) each query block's last row, base (P, K) its row tile's offset in (T, T + 1)."""
    T = -(-n // t)
    p = torch.arange(P, device=device)[:, None]                                          # (P, 1)
    mine = torch.arange(K, device=device) < torch.tensor(counts, device=device)[:, None]
    return mine, ((p + 1) * b - 1).clamp_max(n - 1), (p * b // t * (T + 1)).expand(P, K).contiguous()


def key_block_tiles(blocks, counts: tuple[int, ...], n: int, b: int, t: int):
    """Tiles of the key blocks each query block chose: blocks (B, H, ⌈n/b⌉, K) (−1: none; head h reads its first
    counts[h]) → (any, full), each (B, H, T, T) bool (full: None where b < t, no tile is read whole).  Needs b | t."""
    B, H, P, K = blocks.shape
    T = -(-n // t)
    dev = blocks.device
    any_ = torch.zeros(B, H, T, T + 1, dtype=torch.bool, device=dev)                     # [.., T]: the empty slots
    if K == 0:
        return any_[..., :T], None
    mine, last, base = _block_constants(tuple(counts), P, K, n, b, t, str(dev))
    ok = mine[:, None, :] & (blocks >= 0) & (blocks * b <= last)                          # (B, H, P, K)
    col = torch.where(ok, blocks * b // t, T)
    any_.view(B, H, -1).scatter_(-1, (base + col).flatten(-2), True)                     # (B, H, P·K) into (T, T + 1)
    if b < t:
        return any_[..., :T], None
    # b = t: a whole block of queries reads a whole earlier block of keys: the tile is read whole
    full = torch.zeros(B, H, T, T + 1, dtype=torch.bool, device=dev)
    p = torch.arange(P, device=dev)[:, None]
    inside = _inside(T, t, n, dev)
    whole = ok & (blocks < p) & inside[p] & inside[blocks.clamp_min(0)]
    full.view(B, H, -1).scatter_(-1, (base + torch.where(whole, col, T)).flatten(-2), True)
    return any_[..., :T], full[..., :T]


def _indices(tiles):
    """(B, H, T, T) bool → (num (B, H, T) int32, indices (B, H, T, T) int32): the tiles of each row first."""
    num = tiles.sum(-1, dtype=torch.int32)
    idx = torch.argsort(tiles.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)
    return num, idx


def tiles_to_block_mask(any_, full, mask_mod, n: int, t: int):
    """FlexAttention's ``BlockMask`` from tile sets (``BlockMask.from_kv_blocks``): partial = any ∖ full via the
    predicate."""
    from torch.nn.attention.flex_attention import BlockMask

    num, idx = _indices(any_ & ~full)
    fnum, fidx = _indices(full)
    return BlockMask.from_kv_blocks(num, idx, fnum, fidx, BLOCK_SIZE=t, mask_mod=mask_mod, seq_lengths=(n, n),
                                    compute_q_blocks=False)   # forward only: no transposed (q-tile) index


def support_mask_mod(parts: PrefillParts, n: int, t: int, device):
    """mask_mod(β, h, i, j) = 1[(i, j) ∈ S_βh] (module docstring), every table placed on ``device`` here, once."""
    B, H = parts.columns.shape[:2]
    T = -(-n // t)
    N = T * t                                                                        # FlexAttention may ask padded rows
    w_run, start = head_limits(parts.w, parts.tails, n, N, device)                   # (H,) each
    cols = parts.columns.to(device)
    colmap = column_mask(cols, N) if cols.shape[-1] else None                        # (B, H, N)
    diagmap = None
    lines = lines_of(parts)
    if lines.shape[-1] and bool((lines != NO_DIAGONAL).any()):
        d = lines.to(device)                                                         # δ = j − i: index i − j + N
        ok = (d != NO_DIAGONAL) & (d > -N) & (d < N)
        diagmap = torch.zeros(B, H, 2 * N + 1, dtype=torch.bool, device=device)
        diagmap.scatter_(-1, torch.where(ok, N - d, 2 * N), True)
        diagmap[..., 2 * N] = False
    K = max(parts.block_counts, default=0) if parts.blocks.shape[-1] else 0
    blocks = None
    b = parts.block
    if K:
        u = parts.blocks[..., :K].to(device)
        mine = torch.arange(K, device=device) < torch.tensor(parts.block_counts, device=device)[:, None]   # (H, K)
        u = torch.where(mine[:, None, :], u, -1)
        blocks = torch.full((B, H, N // b + 1, K), -1, dtype=torch.long, device=device)  # padded rows read none
        blocks[:, :, : u.shape[2]] = u

    def mask_mod(bb, h, i, j):
        ok = (i - j <= w_run[h]) | (i >= start[h])
        if colmap is not None:
            ok = ok | colmap[bb, h, j]
        if diagmap is not None:
            ok = ok | diagmap[bb, h, i - j + N]
        if blocks is not None:
            for x in range(K):   # K slots, unrolled: FlexAttention's compiler lowers no reduction here
                ok = ok | (blocks[bb, h, i // b, x] == j // b)
        return ok & (j <= i)

    return mask_mod


def lines_of(parts: PrefillParts):
    """The diagonals the heads read, (B, H, s): a head with key blocks (K_h > 0) reads none (the seam's contract)."""
    if not parts.diagonals.shape[-1] or not max(parts.block_counts, default=0):
        return parts.diagonals
    blocked = torch.tensor([k > 0 for k in parts.block_counts], device=parts.diagonals.device).view(1, -1, 1)
    return parts.diagonals.masked_fill(blocked, NO_DIAGONAL)


def layer_tiles(parts: PrefillParts, n: int, t: int, device):
    """(any, full) of a layer's parts, each (B, H, T, T) bool: the cached static tiles ∪ the per-input ones."""
    B = parts.columns.shape[0]
    s_any, s_full = static_tiles(tuple(parts.w), tuple(parts.tails), n, t, str(device))
    any_, full = s_any.expand(B, -1, -1, -1), s_full.expand(B, -1, -1, -1)
    if parts.columns.shape[-1]:
        any_ = any_ | column_tiles(parts.columns.to(device), n, t)
    if parts.diagonals.shape[-1]:
        any_ = any_ | diagonal_tiles(lines_of(parts).to(device), n, t)
    if parts.blocks.shape[-1] and max(parts.block_counts, default=0):
        k_any, k_full = key_block_tiles(parts.blocks.to(device), parts.block_counts, n, parts.block, t)
        any_ = any_ | k_any
        full = full if k_full is None else full | k_full
    return any_, full


_STATIC: dict = {}   # (w, tails, n, t, device) → the BlockMask of a layer without per-input parts


def has_input_parts(parts: PrefillParts) -> bool:
    """Does the layer have slots for anything chosen per input (columns, diagonals, key blocks)?  Read from the
    parts' shapes, never their values: no wait for the device, and a layer compiles whole (``torch.compile``)."""
    return bool(parts.columns.shape[-1] or parts.diagonals.shape[-1] or
                (parts.blocks.shape[-1] and max(parts.block_counts, default=0)))


def layer_block_mask(parts: PrefillParts, n: int, device, t: int = TILE):
    """The BlockMask of a layer's prefill at length n, tiles of t (``t`` a multiple of ``parts.block``)."""
    with span("attnlab.masks"):
        return _layer_block_mask(parts, n, device, t)


def _layer_block_mask(parts: PrefillParts, n: int, device, t: int):
    if t % parts.block:
        raise ValueError(f"flex tile {t} is not a multiple of the plan's key block {parts.block}")
    key = (tuple(parts.w), tuple(parts.tails), n, t, str(device))
    if not has_input_parts(parts):   # band and tails only: the plan's own, one BlockMask per (plan, n)
        def static():
            none = parts._replace(columns=parts.columns[:1, :, :0], diagonals=parts.diagonals[:1, :, :0],
                                  blocks=parts.blocks[:1, :, :, :0])
            any_, full = static_tiles(*key)
            return tiles_to_block_mask(any_[None], full[None], support_mask_mod(none, n, t, device), n, t)

        return _cached(key, static)
    def made():
        return tiles_to_block_mask(*layer_tiles(parts, n, t, device), support_mask_mod(parts, n, t, device), n, t)

    if parts.fixed is not None and not parts.diagonals.shape[-1]:   # the plan's own columns: once per plan
        return _cached((*key, parts.fixed, parts.columns.shape[0]), made)
    return made()


def _cached(key, make):
    """The BlockMask of ``key`` (the plan's part of a layer), made once by ``make()``; at most 64 kept."""
    if key not in _STATIC:
        if len(_STATIC) > 64:
            _STATIC.clear()
        _STATIC[key] = make()
    return _STATIC[key]


def dense_of(block_mask, B: int, H: int, n: int):
    """The entries a BlockMask reads, (B, H, n, n) bool: its full tiles whole, its partial tiles through its mask_mod
    (the test of every BlockMask against the dense support it stands for)."""
    t_q, t_k = block_mask.BLOCK_SIZE
    T = -(-n // t_q)
    dev = block_mask.kv_num_blocks.device

    def tiles(num, idx):
        num, idx = num.expand(B, H, -1), idx.expand(B, H, -1, -1)
        on = torch.arange(idx.shape[-1], device=dev) < num[..., None].long()
        out = torch.zeros(B, H, T, idx.shape[-1] + 1, dtype=torch.bool, device=dev)
        return out.scatter_(-1, torch.where(on, idx.long(), idx.shape[-1]), True)[..., :-1]

    part = tiles(block_mask.kv_num_blocks, block_mask.kv_indices)
    full = (tiles(block_mask.full_kv_num_blocks, block_mask.full_kv_indices)
            if block_mask.full_kv_num_blocks is not None else torch.zeros_like(part))
    grid = lambda x: x.repeat_interleave(t_q, 2).repeat_interleave(t_k, 3)[:, :, :n, :n]   # noqa: E731
    b = torch.arange(B, device=dev).view(B, 1, 1, 1)
    h = torch.arange(H, device=dev).view(1, H, 1, 1)
    i = torch.arange(n, device=dev).view(1, 1, n, 1)
    j = torch.arange(n, device=dev).view(1, 1, 1, n)
    pred = block_mask.mask_mod(b, h, i, j).expand(B, H, n, n)
    return grid(full) | (grid(part) & pred)


def block_mask_bytes(B: int, H: int, n: int, t: int = TILE, K: int = 0, b: int = 16) -> int:
    """Device bytes a layer's BlockMask and its tables take at length n: the tile sets (bool) and two index tables
    (int32) for the partial and the full tiles, the column and diagonal tables, the key blocks (the memory check)."""
    T = -(-n // t)
    N = T * t
    tiles = B * H * T * T * (3 * 1 + 2 * 4 * 2)   # any, full, partial; kv_indices + full_kv_indices (+ transposes)
    tables = B * H * (N + 2 * N + (N // b + 1) * K * 8)
    return tiles + tables

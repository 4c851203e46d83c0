"""Chunked sliding-window attention with extra keys: O(n·(2w+1+e)), never n×m.

    out_i = Σ_{j ∈ N(i)} α_ij v_j,   α_ij = exp(s_ij) / Σ_{j' ∈ N(i)} exp(s_ij'),
    s_ij = q_i·k_j / √d_k,           N(i) = {j allowed : |i − j| ≤ w} ∪ E(⌊i/c⌋)

where E(t) are e extra keys of query chunk t (global columns, BigBird's random
keys, structured columns and residual), each counted once.

How, in plain torch operations (autograd gives the backward, so models train
with it):

* Queries are cut into T = ⌈n/c⌉ chunks of c rows (c = max(w, 16) by default).
  Every key that chunk t's band needs lies in key chunks t−r … t+r, r = ⌈w/c⌉
  (r = 1 when c ≥ w), so the window of chunk t is those 2r+1 key chunks side by
  side — t−r … t only when causal — with the e extra keys in front:
  K_win(t) = [K_E(t); K_{t−r}; …; K_{t+r}]   ((e+(2r+1)c) × d; one copy of (2r+1)·K,
  cheaper than the score pass it feeds, and it keeps the matmuls contiguous).
* ONE batched matmul over all B·H·T chunks: S = Q_t K_win(t)ᵀ / √d_k.
* Masks are additive and small: one (c × (2r+1)c) band mask shared by every
  chunk (j − i = b − rc − a does not depend on t), the key-padding /
  out-of-range bias viewed through the same windows (one row per chunk,
  broadcast over queries and heads), and the (c × e) mask of the extra keys
  (off the band, causal, real, not repeated).  Then one fused softmax over
  band ∪ extras — exact — and one batched matmul P V_win.
* Work and memory O(n·H·((2r+1)c+e)) ≈ O(n·H·(3w+e)) instead of O(n²·H).  In
  inference the chunks are processed in blocks of ≈ BLOCK_SCORES scores (a
  Python loop over blocks of many chunks, not over chunks; each block slices
  and pads only its own rows of q, k, v) written into one output, so the
  extra memory is the output plus a constant; with gradients all chunks go at
  once and autograd keeps P and the windows (linear in n).

A query that may see no key gets 0 (as ``masked_softmax``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

NEG_INF = -1e30  # finite "−∞": exp underflows to 0, and 0·NEG_INF stays finite in gradients
MIN_CHUNK = 16
BLOCK_SCORES = 1 << 20  # scores per block of chunks in inference (≈ 4 MB float32)


def chunk_size(w: int) -> int:
    """Chunk length c: at least w (so [prev, self, next] covers the band), at least MIN_CHUNK."""
    return max(int(w), MIN_CHUNK)


def reach(w: int, c: int) -> int:
    """r = ⌈w/c⌉: chunk t's band lies in key chunks t−r, …, t+r."""
    return max(1, -(-int(w) // c))


def window_chunks(w: int, c: int, causal: bool) -> int:
    """Chunks in a window: t−r … t+r, or t−r … t when causal (the later keys are all masked)."""
    r = reach(w, c)
    return r + 1 if causal else 2 * r + 1


def band_bias(w: int, c: int, causal: bool, device=None, dtype=torch.float32) -> Tensor:
    """The one (c × (2r+1)c) additive band mask shared by every chunk: 0 in the band, NEG_INF outside.

    Query a of chunk t sits at i = tc + a, window key b at j = (t−r)c + b, so
    j − i = b − rc − a does not depend on t.  Causal: the window stops at chunk t,
    (c × (r+1)c).
    """
    # → (c, (r+1+r')c), r' = 0 if causal else r
    r = reach(w, c)
    a = torch.arange(c, device=device)[:, None]
    b = torch.arange(window_chunks(w, c, causal) * c, device=device)[None, :]
    delta = b - r * c - a
    ok = delta.abs() <= w
    if causal:
        ok = ok & (delta <= 0)
    return torch.zeros(c, b.shape[-1], device=device, dtype=dtype).masked_fill(~ok, NEG_INF)


def _rows(x: Tensor, lo: int, hi: int, fill: float = 0.0) -> Tensor:
    # x: (B, H, m, ·) → rows lo..hi−1 along the sequence axis, `fill` outside [0, m): (B, H, hi−lo, ·)
    m = x.shape[2]
    inside = x[:, :, max(lo, 0) : max(min(hi, m), max(lo, 0))]
    if lo >= 0 and hi <= m:
        return inside
    return F.pad(inside, (0, 0, max(0, -lo), hi - lo - inside.shape[2] - max(0, -lo)), value=fill)


def _windows(x: Tensor, tb: int, nw: int) -> Tensor:
    # x: (B, H|1, tb+nw−1, c, ·) chunks → (B, H|1, tb, nw·c, ·): window of chunk t = chunks t … t+nw−1
    return torch.cat([x[:, :, s : s + tb] for s in range(nw)], dim=3)


def _chunk_block(q, k, v, key_bias, band, k_e, v_e, e_bias, t0: int, t1: int, c: int, r: int, nw: int) -> Tensor:
    # q: (B, H, n, d), k: (B, H, m, d), v: (B, H, m, d_v); key_bias: (B|1, m); band: (c, nw·c);
    # k_e, v_e: (B, H, T, e, ·); e_bias: (B|1, H|1, T, c, e) → out (B, H, t1−t0, c, d_v) for query chunks t0..t1−1
    B, H, _, d = q.shape
    tb = t1 - t0
    scale = 1.0 / math.sqrt(d)
    qc = (_rows(q, t0 * c, t1 * c) * scale).view(B, H, tb, c, d)
    lo, hi = (t0 - r) * c, (t1 - r + nw - 1) * c  # keys of the windows of chunks t0..t1−1
    k_win = _windows(_rows(k, lo, hi).view(B, H, tb + nw - 1, c, d), tb, nw)  # (B, H, tb, nw·c, d)
    v_win = _windows(_rows(v, lo, hi).view(B, H, tb + nw - 1, c, -1), tb, nw)
    kb = _rows(key_bias[:, None, :, None], lo, hi, NEG_INF).view(-1, 1, tb + nw - 1, c, 1)
    mask = band + _windows(kb, tb, nw).transpose(-1, -2)  # (B|1, 1, tb, c, nw·c)
    if k_e is not None:
        k_win = torch.cat([k_e[:, :, t0:t1], k_win], dim=3)  # (B, H, tb, e + nw·c, d)
        v_win = torch.cat([v_e[:, :, t0:t1], v_win], dim=3)
        eb = e_bias[:, :, t0:t1]
        Bm, Hm = max(mask.shape[0], eb.shape[0]), eb.shape[1]
        mask = torch.cat([eb.expand(Bm, Hm, *eb.shape[2:]), mask.expand(Bm, Hm, *mask.shape[2:])], dim=-1)
    s = qc @ k_win.transpose(-1, -2)  # (B, H, tb, c, W)  S = Q K_winᵀ / √d_k
    s = s.add_(mask)
    p = torch.softmax(s, dim=-1)
    empty = (mask <= NEG_INF / 2).all(-1, keepdim=True)  # rows with no allowed key → 0, as masked_softmax
    if bool(empty.any()):
        p = p.masked_fill(empty, 0.0)
    return p @ v_win


def extra_allowed(
    extra_idx: Tensor,
    n: int,
    w: int,
    c: int,
    *,
    causal: bool,
    key_keep: Tensor | None,
    own: Tensor | None = None,
    unique: bool = False,
) -> Tensor:
    """Which extra keys each query may use: off its band, causal, real, counted once.

        allowed[b, h, t, a, x] = |i − j| > w ∧ (j ≤ i if causal) ∧ keep_{b,j} ∧ j ∉ {E(t)_y : y < x} ∧ own
    with i = t·c + a, j = E(t)_x.  ``own`` (broadcastable) restricts an extra key to some queries.
    """
    # extra_idx: (B|1, H|1, T, e) → (B|1, H|1, T, c, e) bool
    T, e = extra_idx.shape[-2:]
    i = (torch.arange(T, device=extra_idx.device)[:, None] * c + torch.arange(c, device=extra_idx.device))[..., None]  # (T, c, 1)
    j = extra_idx[..., None, :]  # (·, ·, T, 1, e)
    ok = (i - j).abs() > w
    if causal:
        ok = ok & (j <= i)
    first = torch.ones(extra_idx.shape, dtype=torch.bool, device=extra_idx.device)
    if e > 1 and not unique:  # keep only the first occurrence of a key in the chunk's list
        same = extra_idx[..., :, None] == extra_idx[..., None, :]  # (·, ·, T, e, e)
        earlier = torch.ones(e, e, dtype=torch.bool, device=extra_idx.device).tril(-1)
        first = ~(same & earlier).any(-1)
    ok = ok & first[..., None, :]
    if key_keep is not None:
        B = key_keep.shape[0]
        flat = extra_idx.expand(B, *extra_idx.shape[1:])
        keep = torch.gather(key_keep, 1, flat.reshape(B, -1)).view(flat.shape)  # (B, H|1, T, e)
        ok = ok & keep[..., None, :]
    if own is not None:
        ok = ok & own
    return ok


def sliding_window_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    w: int,
    *,
    causal: bool = False,
    key_keep: Tensor | None = None,
    extra_idx: Tensor | None = None,
    extra_own: Tensor | None = None,
    extra_logit: Tensor | None = None,
    unique: bool = False,
    chunk: int | None = None,
) -> Tensor:
    """Band attention of half-width w plus e extra keys per query chunk (module docstring).

    q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v); key_keep: (B, m) bool;
    extra_idx: (B|1, H|1, T, e) key positions for each chunk of c = ``chunk`` queries
    (T = ⌈n/c⌉); extra_own: bool broadcastable to (B, H, T, c, e), which queries
    of the chunk may use each extra key; extra_logit: (B|1, H|1, T, e) added to the
    extra keys' scores (a learned gate); ``unique``: the caller guarantees no
    query is given the same extra key twice (skips the de-duplication).
    Returns (B, H, n, d_v).
    """
    # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
    if w < 0:
        raise ValueError(f"w: band half-width must be >= 0, got {w}")
    B, H, n, d = q.shape
    m = k.shape[2]
    c = chunk or chunk_size(w)
    if c < 1:
        raise ValueError(f"chunk: must be >= 1, got {c}")
    if key_keep is None:
        key_bias = torch.zeros(1, m, dtype=q.dtype, device=q.device)
    else:
        key_bias = torch.zeros(B, m, dtype=q.dtype, device=q.device).masked_fill(~key_keep, NEG_INF)
    k_e = v_e = e_bias = None
    if extra_idx is not None and extra_idx.shape[-1] > 0:
        T, e = extra_idx.shape[-2:]
        if T != -(-n // c):
            raise ValueError(f"extra_idx: expected {-(-n // c)} chunks of {c} queries, got {T}")
        if int(extra_idx.max()) >= m or int(extra_idx.min()) < 0:
            raise ValueError(f"extra_idx: key positions must lie in [0, {m}), got {int(extra_idx.min())}..{int(extra_idx.max())}")
        idx = extra_idx.expand(B, H, T, e).reshape(B, H, T * e, 1)
        k_e = torch.gather(k, 2, idx.expand(B, H, T * e, d)).view(B, H, T, e, d)
        v_e = torch.gather(v, 2, idx.expand(B, H, T * e, v.shape[-1])).view(B, H, T, e, v.shape[-1])
        ok = extra_allowed(extra_idx, n, w, c, causal=causal, key_keep=key_keep, own=extra_own, unique=unique)
        e_bias = torch.zeros(ok.shape, dtype=q.dtype, device=q.device).masked_fill(~ok, NEG_INF)
        if extra_logit is not None:
            e_bias = e_bias + extra_logit[..., None, :]
    T = -(-n // c)
    r, nw = reach(w, c), window_chunks(w, c, causal)
    band = band_bias(w, c, causal, q.device, q.dtype)
    training = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    W = nw * c + (0 if k_e is None else k_e.shape[-2])
    tb = T if training else max(1, BLOCK_SCORES // (B * H * c * W))
    if tb >= T:
        out = _chunk_block(q, k, v, key_bias, band, k_e, v_e, e_bias, 0, T, c, r, nw)
    else:  # inference: blocks of chunks written into one output, transient memory O(BLOCK_SCORES)
        out = q.new_empty(B, H, T, c, v.shape[-1])
        for t0 in range(0, T, tb):
            out[:, :, t0 : t0 + tb] = _chunk_block(q, k, v, key_bias, band, k_e, v_e, e_bias, t0, min(T, t0 + tb), c, r, nw)
    return out.view(B, H, T * c, -1)[:, :, :n]


def dilated_sliding_window_attention(
    q: Tensor, k: Tensor, v: Tensor, w: int, dilation: int, *, causal: bool = False, key_keep: Tensor | None = None
) -> Tensor:
    """Dilated band j − i ∈ δ·{−w, …, w}: a plain band on each residue class i ≡ j (mod δ).

    The sequence is split into its δ interleaved sub-sequences (positions r, r+δ, …),
    folded into the batch axis, and each gets the plain band of half-width w.
    """
    # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
    if dilation == 1:
        return sliding_window_attention(q, k, v, w, causal=causal, key_keep=key_keep)
    B, H, n, d = q.shape
    m, d_v = k.shape[2], v.shape[-1]
    n2, m2 = -(-n // dilation), -(-m // dilation)

    def fold(x: Tensor, length: int, folded: int) -> Tensor:
        # (B, H, length, ·) → (B·δ, H, folded, ·): row r of class ρ is position r·δ + ρ
        x = F.pad(x, (0, 0, 0, folded * dilation - length))
        return x.view(B, H, folded, dilation, -1).permute(0, 3, 1, 2, 4).reshape(B * dilation, H, folded, -1)

    keep = torch.ones(B, m, dtype=torch.bool, device=q.device) if key_keep is None else key_keep
    keep = F.pad(keep, (0, m2 * dilation - m), value=False).view(B, m2, dilation).transpose(1, 2).reshape(B * dilation, m2)
    out = sliding_window_attention(fold(q, n, n2), fold(k, m, m2), fold(v, m, m2), w, causal=causal, key_keep=keep)
    out = out.view(B, dilation, H, n2, d_v).permute(0, 2, 3, 1, 4).reshape(B, H, n2 * dilation, d_v)
    return out[:, :, :n]

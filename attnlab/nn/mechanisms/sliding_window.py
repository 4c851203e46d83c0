"""Sliding-window attention with extra keys: O(n·(c+2w+e)), never n×m, trainable with O(n) memory.

    out_i = Σ_{j ∈ N(i)} α_ij v_j,   α_ij = exp(s_ij) / Σ_{j' ∈ N(i)} exp(s_ij'),
    s_ij = q_i·k_j / √d_k,           N(i) = {j allowed : |j − i − o| ≤ w} ∪ E(⌊i/c⌋)

where o is the band's offset (``attnlab.support.Support``) and E(t) are e extra
keys of query chunk t (key columns, BigBird's random keys, the structured
residual), each counted once.

How (float32, d_k a multiple of 16, a C compiler at hand — the default on CPU):

* ``native.band_forward`` (``band_kernel.c``, compiled on first use): query rows go 8 at a time,
  each tile against the union of its rows' bands (≤ 2w + 8 keys, 5 % of the work wasted at
  w = 64), Q Kᵀ, the softmax over band ∪ extras and P V fused in cache; returns O and the row
  log-sum-exp L.  ``native.band_backward``: the band's dq, dk, dv, flash style (P = exp(S − L)
  recomputed, never stored), threads taking whole heads; the extras' share is added here.
* Inference (no gradient asked) with key columns — the same keys for every chunk, each once: the kernel
  scores and masks the columns itself (``_native_columns``; sorted, so a causal tile reads only those up to
  its last row), with no (n, e) score or mask tensor.  ``band_heads_attention`` runs a group of an LLM
  layer's heads in place (their rows of q and of the output, GQA's KV heads, given to the kernel).

Otherwise (float64, bfloat16, other head sizes, ``NATIVE = False``), PyTorch's kernel on blocks:

* Queries are cut into T = ⌈n/c⌉ chunks of c rows (``kernel_chunk``).  The band keys of chunk t
  are the W consecutive keys starting at tc + o − w, W = c + 2w (causal:
  keys after the chunk's last query are never allowed, so W = c + min(o + w, 0) − (o − w)).
  The windows are ``as_strided`` views of the (once padded) keys and values:
  overlapping, never copied.  One small additive mask per chunk (c × W: the
  band, the causal triangle, the sequence ends, the key padding) — 0 or
  NEG_INF.
* The band part runs through PyTorch's fused CPU flash-attention kernel
  (``aten::_scaled_dot_product_flash_attention_for_cpu``) with the T chunks as
  its "heads": Q K_winᵀ, mask, online softmax and P V_win in cache, per chunk,
  returning the output O_band and the row log-sum-exp L_band.
* The e extra keys (gathered, e per chunk) are a second, small softmax
  (O_E, L_E); the two merge exactly:
      L = log(e^{L_band} + e^{L_E}),   O = e^{L_band − L} O_band + e^{L_E − L} O_E.
* Backward (``WindowAttention``, in ``window_autograd``, flash style): P is never stored.  Only O and
  L are kept; the flash kernel's backward recomputes P_band = exp(S − L) from
  the *merged* L (the gradient of a softmax over band ∪ extras restricted to
  the band keys is exactly what it computes given the merged O and L), the
  window gradients are folded back onto the keys (the windows overlap), and
  the extras' gradient (including the gate ``extra_logit``) is computed in
  place.  Memory in training: O(n·(d + c + 2w + e)) — linear in n.

On other devices (CUDA: the ``structured`` mechanism uses FlexAttention
there) or dtypes / head sizes the flash kernel does not take, the same
windows and masks go through plain differentiable torch operations.

A query that may see no key gets 0 (as ``masked_softmax``).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.masks import NEG_INF  # finite "−∞": exp underflows to 0, and 0·NEG_INF stays finite in gradients
from attnlab.nn.mechanisms import native
from attnlab.nn.mechanisms.window_autograd import WindowAttention, _padded, _windows

MIN_CHUNK = 16
MAX_CHUNK = 32
BLOCK_SCORES = 1 << 20  # scores per block of chunks in the plain-torch path's inference (≈ 4 MB float32)
FLASH = True  # False: the plain-torch path on CPU too (tests compare both)
NATIVE = True  # False: PyTorch's flash kernel for the band's forward even where the native kernel builds
# A causal band at least this wide runs its first w + 1 rows — where it holds every key j ≤ i — as SDPA's causal
# attention (band_heads_attention): the kernel's 8-row tile reads its ≈ w keys and values afresh, 2·w·d·4 bytes
# that outgrow a core's L2 here (one head of w = 6,144 at 8K: 110 → 72 ms as SDPA;
# docs/archive/earlier-results-speed.md)
WIDE_BAND = 2048
FLASH_DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def chunk_size(w: int) -> int:
    """max(w, MIN_CHUNK): BigBird's block of queries sharing their random keys (its c)."""
    return max(int(w), MIN_CHUNK)


def kernel_chunk(w: int) -> int:
    """The kernel's default chunk c = clamp(w, MIN_CHUNK, MAX_CHUNK): a window of c + 2w keys per c queries.

    Smaller c wastes less (c + 2w keys for 2w + 1 needed), larger c makes larger
    matrix products; for w = 64, c = 32 beat c = 64 and 128 in our measurements (``benchmarks/attention_speed.py``).
    """
    return max(MIN_CHUNK, min(int(w), MAX_CHUNK))


def band_window(w: int, offset: int, c: int, causal: bool) -> tuple[int, int]:
    """(lo, W): chunk t's band keys are tc + lo … tc + lo + W − 1.

    Query a of the chunk (i = tc + a) needs j ∈ [i + o − w, i + o + w] (and j ≤ i
    if causal): over a = 0 … c−1 that is [tc + o − w, tc + c − 1 + hi'] with
    hi' = o + w, or min(o + w, 0) when causal.  W ≤ 0: the band holds no key.
    """
    lo = offset - w
    hi = c - 1 + (min(offset + w, 0) if causal else offset + w)
    return lo, hi - lo + 1


def band_bias(w: int, offset: int, lo: int, W: int, c: int, causal: bool, n: int, key_ok: Tensor,
              dtype) -> tuple[Tensor, Tensor]:
    """The additive band mask of every chunk and which queries see a band key.

        bias[b, t, a, x] = 0 if |j − i − o| ≤ w ∧ (j ≤ i if causal) ∧ key_ok[b, j] else NEG_INF
    with i = tc + a, j = tc + lo + x (``band_window``); ``key_ok``: (B|1, m) bool (keys outside [0, m) are not ok).
    Returns bias (B|1, T, c, W) in ``dtype`` and any (B|1, T, c) bool.
    """
    T = -(-n // c)
    dev = key_ok.device
    a = torch.arange(c, device=dev)[:, None]
    x = torch.arange(W, device=dev)[None, :]
    delta = lo + x - a - offset  # j − i − o, the same for every chunk
    ok = delta.abs() <= w
    if causal:
        ok = ok & (lo + x - a <= 0)
    Bm, m = key_ok.shape
    front, back = max(0, -lo), max(0, (T - 1) * c + lo + W - m)
    keep = F.pad(key_ok, (front, back), value=False)  # (B|1, front + m + back): key j at column front + j
    keep_win = keep.as_strided((Bm, T, W), (keep.shape[1], c, 1), front + lo)  # keep of chunk t's window
    ok = ok & keep_win[:, :, None, :]  # (B|1, T, c, W)
    bias = torch.zeros(ok.shape, dtype=dtype, device=dev).masked_fill_(~ok, NEG_INF)
    return bias, ok.any(-1)


def band_reach(w: int, offset: int, c: int, causal: bool, T: int, m: int, device) -> Tensor:
    """Which queries have a band key, without the mask: any (1, T, c) bool, query i = tc + a.

        any_i = max(0, i + o − w) ≤ min(m − 1, i + o + w, i if causal)
    """
    i = torch.arange(T * c, device=device)
    first = (i + offset - w).clamp_min(0)
    last = (i + offset + w).clamp_max(m - 1)
    if causal:
        last = torch.minimum(last, i)
    return (first <= last).view(1, T, c)


@lru_cache(maxsize=16)
def _band_bias_cached(w, offset, lo, W, c, causal, n, m, dtype, device):
    return band_bias(w, offset, lo, W, c, causal, n, torch.ones(1, m, dtype=torch.bool, device=device), dtype)


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
    offset: int = 0,
) -> Tensor:
    """Which extra keys each query may use: off its band, causal, real, counted once.

        allowed[b, h, t, a, x] = |j − i − o| > w ∧ (j ≤ i if causal) ∧ keep_{b,j} ∧ own_x ∧ j ∉ {E(t)_y : y < x, own_y}
    with i = t·c + a, j = E(t)_x.  ``own`` (broadcastable) restricts an extra key to some queries.
    """
    # extra_idx: (B|1, H|1, T, e) → (B|1, H|1, T, c, e) bool
    T, e = extra_idx.shape[-2:]
    # (T, c, 1)
    i = (torch.arange(T, device=extra_idx.device)[:, None] * c + torch.arange(c, device=extra_idx.device))[..., None]
    j = extra_idx[..., None, :]  # (·, ·, T, 1, e)
    # |j − i − o| > w ⇔ j < i + o − w ∨ j > i + o + w: comparisons against (T, c, 1) bounds, no (·, T, c, e) differences
    ok = j < i + (offset - w)
    if causal:
        if offset + w < 0:  # keys right of the band can still be causal
            ok = ok | ((j > i + (offset + w)) & (j <= i))
        else:
            ok = ok & (j <= i)
    else:
        ok = ok | (j > i + (offset + w))
    if e > 1 and not unique:  # keep only the first occurrence of a key among the slots the query owns
        same = extra_idx[..., :, None] == extra_idx[..., None, :]  # (·, ·, T, e, e)
        earlier = same & torch.ones(e, e, dtype=torch.bool, device=extra_idx.device).tril(-1)
        if own is None:
            ok = ok & ~earlier.any(-1)[..., None, :]
        else:
            ok = ok & ~(earlier[..., None, :, :] & own[..., None, :]).any(-1)  # (·, ·, T, c, e)
    if key_keep is not None:
        B = key_keep.shape[0]
        flat = extra_idx.expand(B, *extra_idx.shape[1:])
        keep = torch.gather(key_keep, 1, flat.reshape(B, -1)).view(flat.shape)  # (B, H|1, T, e)
        ok = ok & keep[..., None, :]
    if own is not None:
        ok = ok & own
    return ok


def _gather_rows(x: Tensor, idx: Tensor) -> Tensor:
    # x: (B, H, m, d), idx: (B, H, r) → (B, H, r, d), rows x[b, h, idx[b, h, ·]]: one index_select over the flattened
    # rows (torch.gather with an index broadcast over d was 5× slower for the diagonals' per-chunk keys)
    B, H, m, d = x.shape
    flat = (idx + torch.arange(B * H, device=idx.device).view(B, H, 1) * m).reshape(-1)
    return x.reshape(B * H * m, d).index_select(0, flat).view(B, H, idx.shape[-1], d)


def _plain(q4, kp, vp, k_e, v_e, e_bias, bias, empty, T, c, start, W, scale):
    """The same computation in differentiable torch operations (other devices, dtypes, d_v ≠ d_k).

    In inference the chunks go in blocks of ≈ BLOCK_SCORES scores (transient memory O(BLOCK_SCORES)).
    """
    B, H, _, _, d = q4.shape
    P, d_v = kp.shape[2], vp.shape[-1]
    training = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (q4, kp, vp, e_bias))
    tb = T if training else max(1, BLOCK_SCORES // (B * H * c * W))
    outs = []
    for t0 in range(0, T, tb):
        t1 = min(T, t0 + tb)
        # (B, H, tb, W, d)
        k_w = _windows(kp.reshape(B * H, P, d), t1 - t0, c, start + t0 * c, W).view(B, H, t1 - t0, W, d)
        v_w = _windows(vp.reshape(B * H, P, d_v), t1 - t0, c, start + t0 * c, W).view(B, H, t1 - t0, W, d_v)
        s = (q4[:, :, t0:t1] @ k_w.transpose(-1, -2)) * scale + bias[:, None, t0:t1]  # (B, H, tb, c, W)
        if k_e is not None:
            te = slice(t0, t1) if k_e.shape[2] > 1 else slice(None)
            s_e = q4[:, :, t0:t1] @ k_e[:, :, te].transpose(-1, -2) * scale + e_bias[:, :, t0:t1]
            s = torch.cat([s_e, s], -1)
            v_w = torch.cat([v_e[:, :, te].expand(B, H, t1 - t0, *v_e.shape[-2:]), v_w], 3)
        outs.append(torch.softmax(s, -1) @ v_w)
    out = torch.cat(outs, 2) if len(outs) > 1 else outs[0]
    return out if empty is None else out.masked_fill(empty, 0.0)


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
    offset: int = 0,
    scale: float | None = None,
) -> Tensor:
    """Band attention |j − i − o| ≤ w plus e extra keys per query chunk (module docstring).

    q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v); key_keep: (B, m) bool;
    extra_idx: (B|1, H|1, T, e) key positions for each chunk of c = ``chunk`` queries
    (T = ⌈n/c⌉); extra_own: bool broadcastable to (B, H, T, c, e), which queries
    of the chunk may use each extra key; extra_logit: (B|1, H|1, T, e) added to the
    extra keys' scores (a learned gate); ``unique``: the caller guarantees no
    query is given the same extra key twice (skips the de-duplication);
    ``offset``: o, the band's diagonal offset (``Support.offset``); ``scale``: the
    factor of q·k (default 1/√d_k; an LLM's own ``scaling``).
    Returns (B, H, n, d_v).
    """
    # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v)
    if w < 0:
        raise ValueError(f"w: band half-width must be >= 0, got {w}")
    B, H, n, d = q.shape
    m, d_v = k.shape[2], v.shape[-1]
    c = chunk or kernel_chunk(w)
    if c < 1:
        raise ValueError(f"chunk: must be >= 1, got {c}")
    offset = int(offset)
    T = -(-n // c)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    lo, W = band_window(w, offset, c, causal)
    if W <= 0:  # the band holds no allowed key: one key, masked by the band test itself
        lo, W = 0, 1
    flash = _flash_takes(q, k, v)
    use_native = _native_takes(q, k, v)
    if use_native and key_keep is None:  # the kernel tests the band itself: only which queries reach a key is needed
        bias, band_any = None, band_reach(w, offset, c, causal, T, m, q.device)
    elif key_keep is None:  # the same for every call of this geometry: built once
        bias, band_any = _band_bias_cached(w, offset, lo, W, c, causal, n, m, q.dtype, q.device)
    else:
        bias, band_any = band_bias(w, offset, lo, W, c, causal, n, key_keep, q.dtype)  # (B, T, c, W), (B, T, c)
    any_key = band_any[:, None]  # (B|1, 1, T, c)
    k_e = v_e = e_bias = None
    if extra_idx is not None and extra_idx.shape[-1] > 0:
        e = extra_idx.shape[-1]
        if extra_idx.shape[-2] != T:
            raise ValueError(f"extra_idx: expected {T} chunks of {c} queries, got {extra_idx.shape[-2]}")
        if int(extra_idx.max()) >= m or int(extra_idx.min()) < 0:
            raise ValueError(f"extra_idx: key positions must lie in [0, {m}), "
                             f"got {int(extra_idx.min())}..{int(extra_idx.max())}")
        Te = 1 if T == 1 or extra_idx.stride(-2) == 0 else T  # the same keys for every chunk (columns): gathered once
        if (use_native and Te == 1 and unique and extra_logit is None and _per_slot(extra_own)
                and not _needs_grad(q, k, v)):
            return _native_columns(q, k, v, w, offset, causal, key_keep, extra_idx[..., 0, :], extra_own, scale)
        idx = extra_idx[..., :Te, :].expand(B, H, Te, e).reshape(B, H, Te * e, 1)
        k_e = _gather_rows(k, idx[..., 0]).view(B, H, Te, e, d)  # (B, H, T|1, e, d)
        v_e = _gather_rows(v, idx[..., 0]).view(B, H, Te, e, d_v)
        ok = extra_allowed(extra_idx, n, w, c, causal=causal, key_keep=key_keep, own=extra_own, unique=unique,
                           offset=offset)
        e_bias = torch.where(ok, torch.zeros((), dtype=q.dtype, device=q.device),
                             torch.full((), NEG_INF, dtype=q.dtype, device=q.device))
        if extra_logit is not None:
            e_bias = e_bias + extra_logit[..., None, :]
        any_key = any_key | ok.any(-1)
    empty = None if bool(any_key.all()) else ~any_key[..., None]  # (B|1, H|1, T, c, 1): queries that see nothing
    # pad: q to T·c rows; k, v so that every window lies inside (rows front + j hold key j)
    front, back = max(0, -lo), max(0, (T - 1) * c + lo + W - m)
    q4 = (q.contiguous() if T * c == n else F.pad(q, (0, 0, 0, T * c - n))).view(B, H, T, c, d)  # no copy when n = T·c
    if flash:
        band = (w, offset, causal, key_keep) if use_native else None
        out = WindowAttention.apply(q4, k, v, k_e, v_e, e_bias, bias, empty, T, c, front, back, lo, W, scale, band)
    else:
        kp, vp = _padded(k, front, back), _padded(v, front, back)
        out = _plain(q4, kp, vp, k_e, v_e, e_bias, bias, empty, T, c, front + lo, W, scale)
    return out.reshape(B, H, T * c, d_v)[:, :, :n]


def _per_slot(own: Tensor | None) -> bool:
    """``extra_own`` says only which slots hold a key (the same for every chunk and query), or is absent."""
    return own is None or (own.dim() == 5 and own.shape[2] == 1 and own.shape[3] == 1)


def _needs_grad(*xs: Tensor) -> bool:
    return torch.is_grad_enabled() and any(x.requires_grad for x in xs)


def _sorted_columns(idx: Tensor, m: int) -> Tensor:
    """The kernel's column positions: idx (N, g) (−1: empty) ascending with the empty slots last (the kernel reads
    their keys and values where k, v lie; a causal tile reads the columns up to its last row)."""
    idx = torch.where(idx < 0, torch.full_like(idx, m), idx).sort(-1).values            # empty slots last
    return torch.where(idx >= m, torch.full_like(idx, -1), idx)


def _native_columns(q, k, v, w, offset, causal, key_keep, idx, own, scale) -> Tensor:
    """Band ∪ key columns in one call of the native kernel, which scores and masks the columns itself (inference).

    idx: (B|1, H|1, e) the columns' key positions, own: (B|1, H|1, 1, 1, e) bool or None (False: an empty slot).
    The same rows as the general path (extras allowed off the band, causal, kept; unique), without its (n, e) score
    and mask tensors: ``band_heads_attention`` over every head, each reading its own k, v.  Returns (B, H, n, d_v).
    """
    B, H, n, _ = q.shape
    e = idx.shape[-1]
    idx = idx.expand(B, H, e)
    if own is not None:
        idx = torch.where(own[:, :, 0, 0, :].expand(B, H, e), idx, torch.full_like(idx, -1))
    out = q.new_empty(B, H, n, v.shape[-1])
    heads = torch.arange(H)
    band_heads_attention(q, k, v, w, heads, heads, out, columns=idx, offset=offset, causal=causal,
                         key_keep=key_keep, scale=scale)
    return out


def _flash_takes(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """PyTorch's CPU flash kernel takes these: CPU, one of its dtypes for all three, d_v = d_k."""
    return (FLASH and q.device.type == "cpu" and q.dtype in FLASH_DTYPES and q.shape[-1] == v.shape[-1]
            and all(x.dtype == q.dtype for x in (k, v)))


def _native_takes(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """The native kernel takes these (``_flash_takes``, float32, d_k a multiple of its vector) and is built here."""
    return (_flash_takes(q, k, v) and NATIVE and q.dtype == torch.float32 and q.shape[-1] % native.VEC == 0
            and native.available())


def native_heads_ready(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """``band_heads_attention`` can run: the native kernel takes q, k, v
    (``_native_takes``) and no gradient is asked."""
    return _native_takes(q, k, v) and not _needs_grad(q, k, v)


def band_heads_attention(q: Tensor, k: Tensor, v: Tensor, w: int, heads: Tensor, kv_heads: Tensor, out: Tensor, *,
                         columns: Tensor | None = None, blocks: Tensor | None = None, chunk: int = 0, offset: int = 0,
                         causal: bool = True,
                         key_keep: Tensor | None = None, scale: float, lse: Tensor | None = None) -> None:
    """Band |j − i − o| ≤ w ∪ key columns for the query heads ``heads`` of q, in place (inference, native kernel).

        o_i = Σ_{j ∈ N(i)} softmax_j(τ q_i·k_j) v_j,   N(i) = {j : |j − i − o| ≤ w} ∪ {j ∈ T : j off that band},
        every j ≤ i if causal and kept (``key_keep``)

    q, out: (B, H, n, d); k, v: (B, H_kv, m, ·) — each with rows of d contiguous floats at any head and row stride
    (transformers' (B, n, H, d) views are read and written in place); heads: (G,) query heads, kv_heads: (G,) the KV
    head each reads (GQA); columns: (B, G, g) key positions T per head, distinct (−1: empty); blocks: (B, G, ⌈n/c⌉, g_b)
    a key set per chunk of c = ``chunk`` rows (key blocks chosen per query block), distinct in each chunk (one that is a
    column is read once, as the column), in any order (the columns are read once per head, the blocks once per chunk);
    key_keep: (B, m) bool. Writes out[:, heads]; q, k, v are read where they lie (no copies) — the group's calls of
    ``sliding_window_attention`` without its gathers.  A causal band of w ≥ ``WIDE_BAND`` holds every key j ≤ i of its
    rows i ≤ w (i − w ≤ 0; a column there is inside the band): those rows are SDPA's causal attention, the kernel
    does the rest.  lse: (B, H, n) float32, contiguous, or None: L_i = log Σ_{j ∈ N(i)} e^{τ q_i·k_j} of the heads'
    rows written there (every row then goes through the kernel, SDPA gives no L).
    """
    B, H, n, d = q.shape
    H_kv, m = k.shape[1], k.shape[2]
    G = len(heads)
    if B > 1 and out.stride(0) != H * out.stride(1):   # (B, H) is not one axis of out's memory: a call per batch entry
        for i in range(B):
            band_heads_attention(q[i : i + 1], k[i : i + 1], v[i : i + 1], w, heads, kv_heads, out[i : i + 1],
                                 columns=None if columns is None else columns[i : i + 1],
                                 blocks=None if blocks is None else blocks[i : i + 1], chunk=chunk, offset=offset,
                                 causal=causal, key_keep=None if key_keep is None else key_keep[i : i + 1], scale=scale,
                                 lse=None if lse is None else lse[i : i + 1])
        return
    per_chunk = blocks is not None and blocks.shape[-1] > 0
    r0 = 0
    # rows i ≤ w: every causal key, SDPA
    if causal and offset == 0 and key_keep is None and w >= WIDE_BAND and lse is None:
        r0 = min(w + 1, n)
        if per_chunk:   # the kernel starts on a whole chunk (its first rows, i ≤ w, read every causal key all the same)
            r0 -= r0 % chunk if r0 < n else 0
        hq, hk = heads.to(q.device), kv_heads.to(q.device)
        out[:, hq, :r0] = F.scaled_dot_product_attention(q[:, hq, :r0], k[:, hk, :r0], v[:, hk, :r0], is_causal=True,
                                                         scale=scale)
        if r0 == n:
            return
    b = torch.arange(B)[:, None]
    h_q = (b * H + heads.cpu()[None]).reshape(-1)                                        # (B·G,) rows of q, out
    h_kv = (b * H_kv + kv_heads.cpu()[None]).reshape(-1)                                 # (B·G,) rows of k, v
    k2, v2 = k.reshape(B * H_kv, m, d), v.reshape(B * H_kv, m, v.shape[-1])
    cols = None
    if columns is not None and columns.shape[-1]:
        cols = _sorted_columns(columns.reshape(B * G, -1), m)
    L = q.new_empty(B * H, n) if lse is None else lse.view(B * H, n)
    native.band_forward(q.reshape(B * H, n, d), k2, v2, w, offset=offset, causal=causal, keep=key_keep,
                        heads_per_keep=G,
                        scale=scale, columns=cols,
                        blocks=blocks.reshape(B * G, blocks.shape[2], -1) if per_chunk else None,
                        chunk=chunk if per_chunk else 0, heads=(h_q, h_kv),
                        out=(out.view(B * H, n, -1), L), first_row=r0)


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
    keep = F.pad(keep, (0, m2 * dilation - m), value=False).view(B, m2, dilation).transpose(1, 2)
    keep = keep.reshape(B * dilation, m2)
    out = sliding_window_attention(fold(q, n, n2), fold(k, m, m2), fold(v, m, m2), w, causal=causal, key_keep=keep)
    out = out.view(B, dilation, H, n2, d_v).permute(0, 2, 3, 1, 4).reshape(B, H, n2 * dilation, d_v)
    return out[:, :, :n]

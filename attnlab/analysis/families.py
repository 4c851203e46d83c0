"""The thesis's families of structured attention matrices, as seeded generators.

Each head is modelled as

    A ≈ I_n P + Ẽ,     rows renormalised:  X = (P + Ẽ) / rowsum(P + Ẽ)

with P row-stochastic, drawn from one of three families, and Ẽ a sparse
non-negative error with a fixed density and entries 0 < e_ij ≤ ε:

  Σ1            identity (positional heads): p_ii = 1, or p_{i,i+o} = 1 for a
                shifted diagonal (o = −1 previous token, o = +1 next token).
  Σ2(w, p)      a band of half-width w (syntactic heads): random positive
                weights on |i − j| ≤ w, rows normalised, with each off-diagonal
                block of ``block × block`` band cells dropped with probability p
                (the diagonal is always kept).
  Σ3(T, W)      identity plus key columns t_1..t_k (rare-token heads): column
                t_i is attended by a window of w_i consecutive queries
                centred on t_i (rows t_i − ⌊(w_i−1)/2⌋ .. t_i + ⌊w_i/2⌋, moved
                inside 0..n−1 at the edges), random positive weights, rows
                normalised.

Because P is row-stochastic, rowsum(P + Ẽ) ≥ 1, so the error keeps |x_ij| ≤ ε
off the support of P.  Ẽ has exactly round(density·n·m) non-zero entries
per matrix.  For rectangular n×m matrices the identity is i = j: in Σ1 a row
whose (shifted) diagonal falls outside the keys attends to the nearest key
column; in Σ2 a row left without band cells (n > m + w) becomes uniform.

All generators take ``size`` (the batch shape) and ``rng`` (a seed or a
``numpy.random.Generator``) and are vectorised over the batch.
``planted_heads`` draws realistic heads (softmax of planted scores plus
Gaussian noise) like those of a trained translation encoder.
"""

from __future__ import annotations

import numpy as np

from attnlab.support import band_of, check_num_pos, check_w

__all__ = ["planted_heads", "sigma1", "sigma2", "sigma3", "sparse_error"]


def _rng(rng) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _shape(n: int, m: int | None, size) -> tuple[tuple[int, ...], int, int]:
    m = n if m is None else m
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n: expected an integer >= 1, got {n!r}")
    if not (isinstance(m, (int, np.integer)) and m >= 1):
        raise ValueError(f"m: expected an integer >= 1, got {m!r}")
    size = () if size is None else ((size,) if isinstance(size, (int, np.integer)) else tuple(size))
    return size, int(n), int(m)


def sparse_error(shape: tuple[int, ...], density: float, eps: float, rng=None) -> np.ndarray:
    """Ẽ of shape ``(..., n, m)``: exactly round(density·n·m) entries uniform in (0, ε], the rest 0."""
    # Ẽ: (..., n, m)
    if not 0 <= density <= 1:
        raise ValueError(f"density: expected a fraction in [0, 1], got {density!r}")
    if not eps >= 0:
        raise ValueError(f"eps: expected eps >= 0, got {eps!r}")
    rng = _rng(rng)
    n, m = shape[-2:]
    k = int(round(density * n * m))
    e = np.zeros(tuple(shape[:-2]) + (n * m,))
    if k == 0 or eps == 0:
        return e.reshape(shape)
    where = np.argsort(rng.random(e.shape), axis=-1)[..., :k]  # k distinct cells per matrix
    values = np.maximum(eps * (1.0 - rng.random(where.shape)), np.nextafter(0.0, 1.0))  # (0, eps],
                                                                                        # even for a subnormal eps
    np.put_along_axis(e, where, values, axis=-1)
    return e.reshape(shape)


def _compose(weights: np.ndarray, density: float, eps: float, rng, parts: bool):
    """P = weights / rowsum (empty rows uniform); X = (P + Ẽ) / rowsum(P + Ẽ)."""
    # weights: (..., n, m) non-negative, support of P
    row = weights.sum(-1, keepdims=True)
    p = np.where(row > 0, weights / np.where(row > 0, row, 1.0), 1.0 / weights.shape[-1])
    e = sparse_error(p.shape, density, eps, rng)
    x = p + e
    x = x / x.sum(-1, keepdims=True)
    return (x, p, e) if parts else x


def sigma1(n: int, m: int | None = None, *, size=(), offset: int = 0, density: float = 0.0, eps: float = 0.0, rng=None,
           parts: bool = False):
    """Σ1: (shifted) identity, p_{i,i+offset} = 1, plus Ẽ; shape ``(*size, n, m)``.

    With ``parts=True`` returns ``(X, P, Ẽ)``.
    """
    size, n, m = _shape(n, m, size)
    rng = _rng(rng)
    i = np.arange(n)[:, None]
    j = np.arange(m)[None, :]
    weights = np.broadcast_to((j == np.clip(i + offset, 0, m - 1)).astype(np.float64), size + (n, m))
    return _compose(weights, density, eps, rng, parts)


def sigma2(n: int, m: int | None = None, *, w: int, p: float = 0.0, block: int = 1, size=(), density: float = 0.0,
           eps: float = 0.0, rng=None, parts: bool = False):
    """Σ2(w, p): random weights on the band |i − j| ≤ w, blocks dropped with probability p, plus Ẽ.

    ``block``: side of the square tiles of band cells dropped together (1 = single cells).
    """
    size, n, m = _shape(n, m, size)
    w = check_w(w, max(n, m))
    if not 0 <= p <= 1:
        raise ValueError(f"p: expected a drop probability in [0, 1], got {p!r}")
    if not (isinstance(block, (int, np.integer)) and block >= 1):
        raise ValueError(f"block: expected an integer >= 1, got {block!r}")
    rng = _rng(rng)
    i = np.arange(n)[:, None]
    j = np.arange(m)[None, :]
    band = band_of(n, m, w)  # attnlab.support: B_w
    tiles = rng.random(size + (-(-n // block), -(-m // block))) >= p  # kept tiles
    keep = tiles[..., i // block, j // block]
    support = band & (keep | (i == j))
    weights = np.where(support, 1.0 - rng.random(size + (n, m)), 0.0)  # (0, 1] on the support
    return _compose(weights, density, eps, rng, parts)


def sigma3(n: int, m: int | None = None, *, num_pos: int = 1, T=None, W=None, size=(), density: float = 0.0,
           eps: float = 0.0, rng=None, parts: bool = False):
    """Σ3(T, W): identity plus columns t_i attended by windows of w_i queries, plus Ẽ.

    ``T``, ``W``: arrays ``(*size, k)`` (or ``(k,)``) of key columns and window
    sizes; when omitted, ``num_pos`` distinct columns and windows uniform in
    1..n are drawn.
    """
    size, n, m = _shape(n, m, size)
    rng = _rng(rng)
    if T is None:
        num_pos = check_num_pos(num_pos, m)
        T = np.argsort(rng.random(size + (m,)), axis=-1)[..., :num_pos]
    T = np.broadcast_to(np.asarray(T), size + np.shape(T)[-1:])
    if W is None:
        W = rng.integers(1, n + 1, size=T.shape)
    W = np.broadcast_to(np.asarray(W), T.shape)
    if T.size and ((T < 0).any() or (T >= m).any()):
        raise ValueError(f"T: key columns must lie in 0..{m - 1}")
    if W.size and ((W < 1).any() or (W > n).any()):
        raise ValueError(f"W: window sizes must lie in 1..{n}")
    r = np.arange(n)
    lo = np.clip(T - (W - 1) // 2, 0, n - W)[..., None]  # window of exactly w_i rows, kept inside 0..n-1
    hi = lo + W[..., None] - 1
    rows = (r >= lo) & (r <= hi)  # (*size, k, n)
    cols = T[..., None] == np.arange(m)  # (*size, k, m)
    support = np.einsum("...kn,...km->...nm", rows.astype(np.float64), cols.astype(np.float64)) > 0
    support = support | (r[:, None] == np.arange(m)[None, :])
    weights = np.where(support, 1.0 - rng.random(size + (n, m)), 0.0)
    return _compose(weights, density, eps, rng, parts)


_KINDS = ("positional", "previous", "syntactic", "rare", "next")


def planted_heads(
    num_heads: int = 8,
    n: int = 16,
    *,
    w: int = 3,
    num_pos: int = 2,
    sharpness: float = 3.0,
    noise: float = 1.5,
    rng=None,
) -> np.ndarray:
    """Realistic heads with planted structure, shape ``(num_heads, n, n)``.

        A = softmax(β·S + σ·G),   G_ij ~ N(0, 1)

    S is the planted pattern, cycling over the kinds of a translation encoder:
    positional (S = I), previous token (S_{i,i−1} = 1), syntactic (a band of
    half-width w with triangular profile 1 − |i−j|/(w+1), cells dropped with
    probability 0.3), rare token (0.6·I plus ``num_pos`` random columns
    attended by all queries), next token.  β = ``sharpness``, σ = ``noise``:
    unlike Σ1–Σ3 every entry is positive, as after a softmax.  The defaults
    (β = 3, σ = 1.5) put the random-search Min_distance of n = 16 heads in
    the range of the thesis's Tables 16/17 (about 16–23).
    """
    rng = _rng(rng)
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    kind = np.arange(num_heads) % len(_KINDS)  # (H,)
    s = np.zeros((len(_KINDS), num_heads, n, n))
    s[0] = (j == i)
    s[1] = (j == np.clip(i - 1, 0, n - 1))
    tri = np.clip(1.0 - np.abs(i - j) / (w + 1), 0.0, None)
    s[2] = tri * ((rng.random((num_heads, n, n)) >= 0.3) | (i == j))
    cols = np.argsort(rng.random((num_heads, n)), axis=-1)[:, :num_pos]
    in_t = np.zeros((num_heads, n), dtype=bool)
    np.put_along_axis(in_t, cols, True, axis=-1)
    s[3] = np.maximum(0.6 * (j == i), in_t[:, None, :])
    s[4] = (j == np.clip(i + 1, 0, n - 1))
    scores = (sharpness * np.take_along_axis(s, kind[None, :, None, None], axis=0)[0]
              + noise * rng.standard_normal((num_heads, n, n)))
    scores -= scores.max(-1, keepdims=True)
    a = np.exp(scores)
    return a / a.sum(-1, keepdims=True)

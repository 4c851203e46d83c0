"""Slash lines: diagonals j − i = δ chosen per input from the last queries (MInference's slash estimate), and
how the chunked kernel reads them beside a band and columns.

    σ_d = Σ_{r among the last queries} â_{r, p_r − d}          (d = −δ ≥ 0: the distance of the key before its query;
                                                                â_r: the causal softmax row of the query at
                                                                position p_r)
    Δ(x) = the s offsets δ = −d with d > w of largest σ_d > 0   (the band B_w holds d ≤ w;
                                                                a line of no mass is left empty)

One estimate serves both users: ``sparse_patterns.vertical_slash`` (MInference's vertical-slash pattern, on the
rows as they are) and ``attention.LayerRunner`` (a plan head's ``HeadPlan.slashes``, from the same last-query rows as
its dynamic columns, with the keys its columns hold set to 0: ``LayerRunner.choose_slashes``); both read the rows
â of ``last_query_rows``; the columns' estimate σ_t = Σ_r â_rt is ``last_query_mass`` (no rows held).
``kernel_extras`` turns a batch of heads' columns T and diagonals Δ into the extra keys of the chunked kernel
(``nn.mechanisms.sliding_window``): the columns as keys shared by a chunk, the diagonals as one key per
(diagonal, query) of the chunk (``Support.kernel_diagonal_extras``: a key a column already holds is read once).
"""

from __future__ import annotations

import torch

from attnlab.llm.plans.plan import LAST_Q
from attnlab.masks import hidden
from attnlab.nn.mechanisms import native
from attnlab.support import NO_DIAGONAL, Support

__all__ = ["SLASH_CHUNK", "kernel_extras", "last_query_mass", "last_query_rows", "slash_mass", "top_slashes"]

SLASH_CHUNK = 8    # queries per kernel chunk when diagonals are read:
                   # each diagonal costs c scores per query (one owned)


def last_query_rows(q, k, scaling: float, last_q: int = LAST_Q, kv=None):
    """a_it = softmax_{t ≤ i}(q_i·k_t · scaling) of the last ``last_q`` queries i (causal): ``(B, H, nq, m)``.

    q: (B, H, n, d_k), k: (B, H_kv, m, d_k); kv: (H,) the KV head of each query head, ascending (None: every head,
    query head h reading KV head h // (H / H_kv)) — the keys are not copied; the queries sit at positions m − n … m − 1.
    """
    B, H, n, d = q.shape
    H_kv, m = k.shape[1], k.shape[2]
    nq = min(last_q, n)
    if kv is None:   # every KV head's query heads stacked: one product for the layer
        qg = q[:, :, n - nq :].reshape(B, H_kv, (H // H_kv) * nq, d)
        return _causal_softmax(qg, k, scaling, nq).view(B, H, nq, m)
    return torch.cat([_causal_softmax(q[:, h0 : h0 + r, n - nq :].reshape(B, 1, r * nq, d), k[:, j : j + 1],
                                      scaling, nq).view(B, r, nq, m)
                      for j, h0, r in _kv_groups(kv, H, H_kv)], 1)


def last_query_mass(q, k, scaling: float, last_q: int = LAST_Q, kv=None):
    """σ_t = Σ_{i among the last ``last_q`` queries} a_it, the columns' estimate (MInference's vertical lines):
    ``(B, H, m)``.

    q, k, kv as ``last_query_rows``, summed over i one KV head at a time in one reused buffer: the (B, H, nq, m) rows
    are never held at once (at 8K they are 19 MB a layer, a fresh allocation each time).  On the CPU in float32 the
    softmax and the sum are the native ``column_mass`` (each row through the cache once: at 8K, 1.8 ms a KV head
    against PyTorch's softmax and sum, 3.2 ms); elsewhere PyTorch's, which stays its reference.
    """
    B, H, n, d = q.shape
    H_kv, m = k.shape[1], k.shape[2]
    nq = min(last_q, n)
    groups = _kv_groups(kv, H, H_kv)
    mass = q.new_empty(B, H, m)
    buf = q.new_empty(B * max(r for _, _, r in groups) * nq * m)
    fused = q.device.type == "cpu" and q.dtype == torch.float32 and native.available()
    for j, h0, r in groups:
        qg = q[:, h0 : h0 + r, n - nq :].reshape(B, 1, r * nq, d)                # (B, 1, r·nq, d):
                                                                                 # its query heads stacked
        s = buf[: B * r * nq * m].view(B, 1, r * nq, m)
        if fused:   # σ from the scores: the row's softmax and the sum over rows in one native pass
            native.column_mass(torch.matmul(qg * scaling, k[:, j : j + 1].transpose(-1, -2), out=s),
                               mass[:, h0 : h0 + r])
            continue
        a = _causal_softmax(qg, k[:, j : j + 1], scaling, nq, out=s)
        torch.sum(a.view(B, r, nq, m), -2, out=mass[:, h0 : h0 + r])
    return mass


def _kv_groups(kv, H: int, H_kv: int) -> list[tuple[int, int, int]]:
    """(j, h0, r): KV head j read by the r query heads h0 … h0 + r − 1 of q;
    kv (H,) ascending (None: h // (H / H_kv))."""
    kv = torch.arange(H) // (H // H_kv) if kv is None else kv.cpu()
    js, rs = (x.tolist() for x in torch.unique_consecutive(kv, return_counts=True))
    starts = [sum(rs[:x]) for x in range(len(rs))]
    return list(zip(js, starts, rs))


def _causal_softmax(qg, k, scaling: float, nq: int, out=None):
    """softmax_t(q_i·k_t · scaling) of stacked query rows qg (B, G, R, d) (R = r·nq: r heads' last nq queries at
    positions m − nq … m − 1) against k (B, G, m, d): ``(B, G, R, m)``, computed in ``out`` when given."""
    B, G, R, _ = qg.shape
    m = k.shape[2]
    s = torch.matmul(qg * scaling, k.transpose(-1, -2), out=out)               # (B, G, R, m);
                                                                               # the scale on the few queries
    a = torch.arange(nq, device=qg.device)
    # (nq, nq) key m − nq + b after query m − nq + a
    future = hidden(a[:, None], a[None, :])
    s.view(B, G, R // nq, nq, m)[..., m - nq :].masked_fill_(future, float("-inf"))
    return torch.softmax(s, dim=-1, out=s)                                       # in place:
                                                                                 # no second (B, G, R, m) tensor


def slash_mass(a):
    """σ (…, m): the mass of the last queries on each distance d = p_r − j, from their rows a (…, nq, m).

    The nq queries sit at the last positions p_r = m − nq + r; entries with j > p_r (masked, 0) add nothing.
    """
    *lead, nq, m = a.shape
    # (nq,) positions of the last queries
    p = torch.arange(m - nq, m, device=a.device)
    dist = p[:, None] - torch.arange(m, device=a.device)[None, :]                     # (nq, m): d = p_r − j
    vals = torch.where(dist >= 0, a, 0.0).reshape(*lead, nq * m)                      # (…, nq·m)
    idx = dist.clamp_min(0).reshape(-1).expand(*lead, nq * m)
    return torch.zeros(*lead, m, dtype=a.dtype, device=a.device).scatter_add_(-1, idx, vals)


def top_slashes(mass, w, s):
    """Δ (…, max s): the offsets δ = −d of the s distances d > w of largest mass σ_d > 0, ``NO_DIAGONAL`` elsewhere.

    mass (…, m) from ``slash_mass``; w: the band half-width, an int or (…); s: lines per head, an int or (…)
    (a head's slots beyond its own s are empty).  Largest first; ties to the nearest distance (``torch.topk``).
    """
    m = mass.shape[-1]
    d = torch.arange(m, device=mass.device)
    w_ = torch.as_tensor(w, device=mass.device)[..., None]
    s_ = torch.as_tensor(s, device=mass.device)[..., None]
    k = min(int(s_.max()) if s_.numel() else 0, m)
    if k == 0:
        return torch.zeros(*mass.shape[:-1], 0, dtype=torch.long, device=mass.device)
    top = torch.topk(mass.masked_fill(d <= w_, -1.0), k, -1)                           # (…, k):
                                                                                       # the band's distances never
    keep = (top.values > 0) & (torch.arange(k, device=mass.device) < s_)
    return torch.where(keep, -top.indices, torch.full_like(top.indices, NO_DIAGONAL))


def kernel_extras(support: Support, n: int, chunk: int):
    """The columns and diagonals of ``support`` (columns (…, g), diagonals (…, s), −1 / ``NO_DIAGONAL``: empty) as the
    kernel's extras at length n in chunks of c = ``chunk`` queries:

        extra_idx (…, T, g + s·c), extra_own (…, 1, c, g + s·c), extra_logit (…, T, g + s·c),   T = ⌈n / c⌉
    (a column slot owned by every query of its chunk, a diagonal slot x·c + a by query a; logit −1e30 where a
    diagonal's key is outside [0, n) or a column already holds it).
    """
    cols = torch.as_tensor(support.columns, dtype=torch.long)
    lead, g, c, T = cols.shape[:-1], cols.shape[-1], chunk, -(-n // chunk)
    c_idx = support.kernel_extra_idx(n, c)                                             # (…, T, g)
    c_own = support.kernel_extra_own().expand(*lead, 1, c, g)
    d_idx, d_own, d_logit = support.kernel_diagonal_extras(n, n, c)                    # (…, T, s·c), (1, 1, 1,
                                                                                       # c, s·c), (…, T, s·c)
    d_own = d_own.reshape(c, -1).expand(*lead, 1, c, d_own.shape[-1])
    idx = torch.cat([c_idx, d_idx.to(c_idx.device)], -1)
    own = torch.cat([c_own, d_own.to(c_own.device)], -1)
    logit = torch.cat([torch.zeros(*lead, T, g, device=d_logit.device), d_logit], -1)
    return idx, own, logit

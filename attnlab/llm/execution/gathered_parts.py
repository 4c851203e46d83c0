"""A layer's per-input keys gathered beside FlexAttention's band: the columns and the key blocks as dense parts,
merged with the band's softmax by their log-sum-exp (the flex backend's prefill, ``flex_backend``).

A tile kernel reads a whole t × t tile (t = 128) for any entry it needs in it.  A few scattered columns touch a tile
of keys each (64 columns over a 32K prefill: about 60 partial tiles on every row tile, more than the band itself),
and the key blocks of b = 16 keys chosen per query block of b rows as many again, each entry through the predicate.
Gathered, they cost what they hold.  S_h(i) (``backend``) splits into three disjoint parts:

    A_h(i) = band ∪ diagonals ∪ every causal key on a tail row (∩ causal)  FlexAttention, its BlockMask per (plan, n)
    C_h(i) = {j ∈ T_h : j ≤ i} ∖ A_h(i)                                    q_i · k_{T_h}: n × g scores per head
    K_h(i) = {j ∈ U_h(⌊i/b⌋) : j ≤ i} ∖ (A_h(i) ∪ T_h)                     q_{I_p} · k_{U_h(p)}: b × K·b per query block

and each part P gives its log-normaliser and its normalised output,

    ℓ_P(i) = log Σ_{j ∈ P(i)} exp(s_ij),   o_P(i) = Σ_{j ∈ P(i)} exp(s_ij − ℓ_P(i)) v_j,   s_ij = q_i·k_j · scaling,

so that the softmax over the union is exact:

    out_i = Σ_P exp(ℓ_P(i) − ℓ(i)) · o_P(i),   ℓ(i) = log Σ_P exp(ℓ_P(i))     (an empty part: ℓ_P = −∞, weight 0)

The dense parts' scores are accumulated and kept in fp32 (FlexAttention's are); GQA reads KV head ``kv_of[h]`` by
index, no copy of k or v beyond the gathered keys.  A layer without columns or key blocks is one FlexAttention call, as
before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.llm.execution.backend import PrefillParts
from attnlab.llm.execution.block_masks import TILE, head_limits, layer_block_mask, lines_of
from attnlab.llm.execution.profile_ranges import span
from attnlab.llm.plans.plan import FULL
from attnlab.support import NO_DIAGONAL, column_mask

__all__ = ["band_part", "block_part", "column_part", "flex_prefill", "gathered_prefill", "merge_parts"]


def _distinct(x):
    """x (..., g) sorted along the last axis, each value once: a repeat (and −1) set to −1 (a key is read once)."""
    x = x.sort(-1).values
    x[..., 1:] = x[..., 1:].masked_fill(x[..., 1:] == x[..., :-1], -1)
    return x


def _fp32_product(a, b):
    """a @ b in fp32: (..., m, d) @ (..., d, r) → (..., m, r) float32.  Half-precision inputs on CUDA go through
    ``bmm(out_dtype=float32)`` (products accumulated and written in fp32, as FlexAttention's scores are; no fp32 copy
    of the gathered keys); elsewhere the inputs are cast."""
    if a.dtype in (torch.float16, torch.bfloat16) and a.is_cuda and _BMM_FP32[0]:
        try:
            out = torch.bmm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]), out_dtype=torch.float32)
            return out.view(*a.shape[:-1], b.shape[-1])
        except (TypeError, RuntimeError, NotImplementedError):   # a torch without bmm(out_dtype=): cast from now on
            _BMM_FP32[0] = False
    return a.float() @ b.float()


_BMM_FP32 = [True]


def _soft(s, ok, values):
    """(o, ℓ) of scores s (..., m) fp32 over the allowed ok (..., m) with values (..., m, d_v): o (..., d_v) fp32,
    ℓ (...) (−∞ and o = 0 on a row with nothing allowed).  Half-precision values: the weights are rounded to their
    dtype before the product (FlexAttention's own choice), the sum accumulated in fp32."""
    s = s.masked_fill_(~ok, float("-inf"))
    lse = torch.logsumexp(s, -1)                                                          # (...,)
    p = torch.exp_(s.sub_(torch.where(torch.isfinite(lse), lse, 0.0)[..., None]))          # 0 where not allowed
    return _fp32_product(p.to(values.dtype) if values.dtype != torch.float32 else p, values), lse


def flex_prefill(parts: PrefillParts, q, k, v, scaling: float, tile: int = TILE):
    """q (B, H, n, d_k), k, v (B, H_kv, n, ·) → (B, H, n, d_v): each head over its S_h(i), one compiled FlexAttention
    call."""
    from attnlab.nn.mechanisms.flex import flex_attention_compiled

    n = q.shape[2]
    block_mask = layer_block_mask(parts, n, q.device, tile)
    with span("attnlab.kernel"):
        return flex_attention_compiled(q, k, v, block_mask, scale=scaling, enable_gqa=k.shape[1] != q.shape[1])


def band_part(parts: PrefillParts, q, k, v, scaling: float, t: int = TILE):
    """(o_A, ℓ_A): band, diagonals and tail rows through one FlexAttention call, its BlockMask cached per (plan, n)
    when the layer reads no diagonals; o_A (B, H, n, d_v) in q's dtype, ℓ_A (B, H, n) fp32."""
    from attnlab.nn.mechanisms.flex import flex_attention_lse

    n = q.shape[2]
    a = parts._replace(columns=parts.columns[..., :0], blocks=parts.blocks[..., :0])        # A: no columns, no blocks
    block_mask = layer_block_mask(a, n, q.device, t)
    with span("attnlab.kernel"):
        return flex_attention_lse(q, k, v, block_mask, scale=scaling, enable_gqa=k.shape[1] != q.shape[1])


def column_part(parts: PrefillParts, q, k, v, scaling: float):
    """(o_C, ℓ_C): every row over its head's columns T_h not in A_h(i); o_C (B, H, n, d_v), ℓ_C (B, H, n), fp32."""
    B, H, n, _ = q.shape
    dev = q.device
    cols = _distinct(parts.columns.to(dev))                                            # (B, H, g), −1: empty
    at = (torch.arange(B, device=dev)[:, None, None], parts.kv_of.to(dev)[None, :, None], cols.clamp_min(0))
    k_c, v_c = k[at], v[at]                                                            # (B, H, g, ·) k_{T_h}
    s = _fp32_product(q, k_c.transpose(-1, -2)).mul_(scaling)                          # (B, H, n, g)
    w_run, start = head_limits(parts.w, parts.tails, n, n, dev)   # (H,): FULL → n, no tail → n
    i = torch.arange(n, device=dev).view(1, 1, n, 1)
    j = cols[:, :, None, :]                                                            # (B, H, 1, g)
    ok = (j >= 0) & (j <= i) & (i - j > w_run.view(1, H, 1, 1)) & (i < start.view(1, H, 1, 1))
    lines = lines_of(parts).to(dev)                                                    # (B, H, s) δ, NO_DIAGONAL: none
    # a column on one of the head's diagonals is A's: 1[j − i ∈ Δ_h] read from a (B, H, 2n + 1) table
    if lines.shape[-1]:
        on = torch.zeros(B, H, 2 * n + 2, dtype=torch.bool, device=dev)
        real = (lines != NO_DIAGONAL) & (lines > -n) & (lines < n)
        on.scatter_(-1, torch.where(real, lines + n, 2 * n + 1), True)
        on[..., 2 * n + 1] = False
        ok &= ~torch.gather(on, 2, (j - i + n).clamp(0, 2 * n).flatten(2)).view_as(ok)
    return _soft(s, ok, v_c)


def block_part(parts: PrefillParts, q, k, v, scaling: float):
    """(o_K, ℓ_K, heads): every query block of b rows over the key blocks its head chose, less A_h(i) and T_h; for the
    heads with key blocks only: o_K (B, H_b, n, d_v), ℓ_K (B, H_b, n) fp32, heads (H_b,) their indices (None: none)."""
    counts = parts.block_counts
    hb = [h for h in range(len(counts)) if counts[h] > 0 and parts.w[h] != FULL]
    K = max((counts[h] for h in hb), default=0)
    if not hb or not parts.blocks.shape[-1]:
        return None, None, None
    B, H, n, d = q.shape
    b, dev = parts.block, q.device
    P = parts.blocks.shape[2]                                                      # ⌈n/b⌉ query (and key) blocks
    heads = torch.tensor(hb, device=dev)
    u = parts.blocks[:, hb, :, :K].to(dev)                                         # (B, H_b, P, K)
    mine = torch.arange(K, device=dev) < torch.tensor([counts[h] for h in hb], device=dev)[:, None]   # (H_b, K)
    u = _distinct(torch.where(mine[None, :, None, :], u, -1))                      # each block once
    pad = P * b - n
    q_b = F.pad(q[:, heads], (0, 0, 0, pad)).view(B, len(hb), P, b, d)             # (B, H_b, P, b, d_k) q_{I_p}
    k_b, v_b = (F.pad(x, (0, 0, 0, pad)).unflatten(2, (P, b)) for x in (k, v))     # (B, H_kv, P, b, ·)
    at = (torch.arange(B, device=dev).view(B, 1, 1, 1), parts.kv_of.to(dev)[heads].view(1, -1, 1, 1), u.clamp_min(0))
    k_u = k_b[at].flatten(3, 4)                                                    # (B, H_b, P, K·b, d_k) k_{U_h(p)}
    v_u = v_b[at].flatten(3, 4)
    s = _fp32_product(q_b, k_u.transpose(-1, -2)).mul_(scaling)                    # (B, H_b, P, b, K·b)
    j = (u[..., None] * b + torch.arange(b, device=dev)).flatten(-2)               # (B, H_b, P, K·b) key positions
    i = (torch.arange(P, device=dev)[:, None] * b + torch.arange(b, device=dev)).view(1, 1, P, b, 1)   # row positions
    w_run, start = head_limits(parts.w, parts.tails, n, n, dev)   # (H,): FULL → n, no tail → n
    in_columns = column_mask(parts.columns[:, hb].to(dev), P * b)                  # (B, H_b, P·b) 1[j ∈ T_h]
    jj = j.clamp_min(0)
    key_ok = ((u[..., None] >= 0).expand(*u.shape, b).flatten(-2) & (j < n)
              & ~torch.gather(in_columns, 2, jj.flatten(2)).view_as(j))
    ok = (key_ok[:, :, :, None, :] & (j[:, :, :, None, :] <= i)
          & (i - j[:, :, :, None, :] > w_run[heads].view(1, -1, 1, 1, 1)) & (i < start[heads].view(1, -1, 1, 1, 1)))
    o, lse = _soft(s, ok, v_u)                                                     # (B, H_b, P, b, d_v), (B, H_b, P, b)
    return o.flatten(2, 3)[:, :, :n], lse.flatten(2, 3)[:, :, :n], heads


def merge_parts(o_a, lse_a, more):
    """out = Σ_P exp(ℓ_P − ℓ) o_P over A and the parts ``more`` [(o_P, ℓ_P, heads or None: all)] (module docstring).
    ℓ_A is finite on every row (a row reads at least its own key), so every weight is."""
    lse = lse_a.float()
    acc = o_a.float()
    for o_p, l_p, heads in more:
        sel = slice(None) if heads is None else heads
        l_old = lse[:, sel]
        l_new = torch.logaddexp(l_old, l_p)                                               # ℓ of the union so far
        mixed = torch.addcmul(o_p * torch.exp(l_p - l_new)[..., None], acc[:, sel], torch.exp(l_old - l_new)[..., None])
        if heads is None:
            acc, lse = mixed, l_new
        else:
            acc, lse = acc.index_copy(1, heads, mixed), lse.index_copy(1, heads, l_new)
    return acc.to(o_a.dtype)


def gathered_prefill(parts: PrefillParts, q, k, v, scaling: float, t: int = TILE):
    """q (B, H, n, d_k), k, v (B, H_kv, n, ·) → (B, H, n, d_v): S_h(i) = A ⊔ C ⊔ K, merged (module docstring).

    Every column is gathered, sinks too: measured on an H200 (bf16, SmolLM2-135M's 9 / 3 heads of 64, n = 32,768, band
    w = 1,676; ``benchmarks/gpu_columns.py``, docs/results.md's gpu-check), the band alone took 0.64 ms, the band with
    4 sink columns in the BlockMask 4.33 ms, the same sinks gathered 1.56 ms.  A layer with neither columns nor key
    blocks is one FlexAttention call."""
    if not parts.columns.shape[-1] and not (parts.blocks.shape[-1] and max(parts.block_counts, default=0)):
        return flex_prefill(parts, q, k, v, scaling, t)
    o_a, lse_a = band_part(parts, q, k, v, scaling, t)
    more = []
    with span("attnlab.parts"):
        if parts.columns.shape[-1]:
            o_c, lse_c = column_part(parts, q, k, v, scaling)
            more.append((o_c, lse_c, None))
        o_k, lse_k, heads = block_part(parts, q, k, v, scaling)
        if heads is not None:
            more.append((o_k, lse_k, heads))
    with span("attnlab.merge"):
        return merge_parts(o_a, lse_a, more) if more else o_a

"""The band ∪ extras attention of ``sliding_window`` as an autograd Function, flash style (``WindowAttention``).

Forward: the band through PyTorch's fused CPU flash kernel over the strided windows of the padded keys (the T chunks
of c queries as its "heads"; or the native kernel, ``native.band_forward``), the e extra keys of each chunk as a
second small softmax, the two merged exactly by their row log-sum-exp:

    L = log(e^{L_band} + e^{L_E}),   O = e^{L_band − L} O_band + e^{L_E − L} O_E

Backward: P is never stored; the flash kernel's backward recomputes P_band = exp(S − L) from the merged L, the
window gradients are folded back onto the keys (the windows overlap, ``_fold_into``), in blocks of chunks of
≈ ``BACKWARD_BLOCK`` floats; the extras' gradient (the gate ``extra_logit`` too) is computed in place.
Memory in training: O(n·(d + c + 2w + e)).  The chunk products (``_chunk_mm`` …) serve the plain-torch path too.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.nn.mechanisms import native

BACKWARD_BLOCK = 1 << 21  # window-gradient floats per block of chunks in the backward (≈ 8 MB float32)

__all__ = ["WindowAttention"]


def _padded(x: Tensor, front: int, back: int) -> Tensor:
    # x: (B, H, m, d) → (B, H, front + m + back, d) contiguous, zero rows around x; only the new rows are
    # zeroed (F.pad fills the whole tensor first: a second pass over n × d)
    B, H, m, d = x.shape
    out = x.new_empty(B, H, front + m + back, d)
    out[:, :, :front].zero_()
    out[:, :, front + m :].zero_()
    out[:, :, front : front + m] = x
    return out


def _windows(x: Tensor, T: int, c: int, start: int, W: int) -> Tensor:
    # x: (N, P, d) contiguous → (N, T, W, d) view: window t = rows start + tc … start + tc + W − 1 (overlapping)
    N, P, d = x.shape
    return x.as_strided((N, T, W, d), (P * d, c * d, d, 1), x.storage_offset() + start * d)


def _fold_into(out: Tensor, g_win: Tensor, c: int, start: int) -> None:
    # out: (N, P, d) += the window gradients g_win: (N, T, W, d) (window t = rows start + tc …; windows overlap)
    N, P, d = out.shape
    W = g_win.shape[2]
    for s in range(0, W, c):  # slice s of every window: rows start + tc + s …, disjoint across t
        part = g_win[:, :, s : s + c]
        out.as_strided(part.shape, (P * d, c * d, d, 1), out.storage_offset() + (start + s) * d).add_(part)


def _flash(q4, k4, v4, bias, scale):
    # q4: (N, T, c, d), k4, v4: (N, T, W, d), bias: (1, T, c, W) → O (N, T, c, d), L (N, T, c) float32
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q4, k4, v4, attn_mask=bias, scale=scale)


def _chunk_mm(x: Tensor, y: Tensor) -> Tensor:
    # x: (B, H, T, c, a) @ y: (B, H, T|1, a, b) → (B, H, T, c, b); y shared by every chunk: one product per head
    B, H, T, c, a = x.shape
    if y.shape[2] == 1 and T > 1:
        return (x.reshape(B, H, T * c, a) @ y[:, :, 0]).view(B, H, T, c, -1)
    return x @ y


def _chunk_mm_add(out: Tensor, x: Tensor, y: Tensor, alpha: float = 1.0) -> None:
    # out += alpha · x @ y in place: out (B, H, T, c, b), x: (B, H, T, c, a), y: (B, H, T|1, a, b)
    B, H, T, c, a = x.shape
    b = out.shape[-1]
    if y.shape[2] == 1 and T > 1:
        out.view(B * H, T * c, b).baddbmm_(x.reshape(B * H, T * c, a), y.reshape(B * H, a, b), alpha=alpha)
    else:
        out.view(B * H * T, c, b).baddbmm_(x.reshape(B * H * T, c, a),
                                           y.expand(B, H, T, a, b).reshape(B * H * T, a, b), alpha=alpha)


def _chunk_tmm(x: Tensor, y: Tensor, shared: bool) -> Tensor:
    # xᵀ y per chunk: x: (B, H, T, c, a), y: (B, H, T, c, b) → (B, H, T, a, b), or Σ over chunks (B, H, 1, a,
    # b) if shared
    B, H, T, c, a = x.shape
    if shared:
        return (x.reshape(B, H, T * c, a).transpose(-1, -2) @ y.reshape(B, H, T * c, -1))[:, :, None]
    return x.transpose(-1, -2) @ y


def _extras_scores(q4, k_e, e_bias, scale):
    # q4: (B, H, T, c, d), k_e: (B, H, T|1, e, d), e_bias: (B|1, H|1, T, c, e) → S_E (B, H, T, c, e)
    return _chunk_mm(q4, k_e.transpose(-1, -2)).mul_(scale).add_(e_bias)


def _flash_forward(q4, k, v, bias, T, c, front, back, lo, W, scale):
    # PyTorch's flash kernel over the strided windows of the padded keys, one call per padded batch entry.
    # Returns O_band (B, H, T, c, d), L_band (B, H, T, c, 1).
    B, H, _, _, d = q4.shape
    kp, vp = _padded(k, front, back), _padded(v, front, back)
    P, start = kp.shape[2], front + lo
    O_parts, L_parts = [], []
    for b in range(B) if bias.shape[0] > 1 else [slice(None)]:
        bb = bias[b][None] if bias.shape[0] > 1 else bias
        qb = q4[b].reshape(-1, T, c, d)
        O_b, L_b = _flash(qb, _windows(kp[b].reshape(-1, P, d), T, c, start, W),
                          _windows(vp[b].reshape(-1, P, d), T, c, start, W), bb, scale)
        O_parts.append(O_b)
        L_parts.append(L_b)
    O = torch.cat(O_parts).view(B, H, T, c, d) if len(O_parts) > 1 else O_parts[0].view(B, H, T, c, d)
    L = torch.cat(L_parts).view(B, H, T, c, 1) if len(L_parts) > 1 else L_parts[0].view(B, H, T, c, 1)
    return O, L


def _flash_backward(q4, k, v, dO, O, L, bias, T, c, front, back, lo, W, scale):
    # PyTorch's flash backward over the strided windows, in blocks of chunks; the window gradients are
    # folded back onto the keys (the windows overlap).  Returns dq (B, H, T, c, d), dk, dv (B, H, m, d).
    kp, vp = _padded(k, front, back), _padded(v, front, back)  # the windows' rows:
                                                               # padded here, not kept since the forward
    B, H, _, _, d = q4.shape
    P, m, start = kp.shape[2], k.shape[2], front + lo
    dq = torch.empty_like(q4)
    dkp, dvp = torch.zeros_like(kp), torch.zeros_like(vp)
    L4 = L.view(B, H, T, c)
    tb = max(1, BACKWARD_BLOCK // (B * H * W * d))  # chunks per block: the window gradients (·, tb, W, d) stay small
    for b in range(B) if bias.shape[0] > 1 else [slice(None)]:  # as in the forward: one call per padded entry
        bb = bias[b][None] if bias.shape[0] > 1 else bias
        for t0 in range(0, T, tb):
            t1 = min(T, t0 + tb)
            k_w = _windows(kp[b].reshape(-1, P, d), t1 - t0, c, start + t0 * c, W)
            v_w = _windows(vp[b].reshape(-1, P, d), t1 - t0, c, start + t0 * c, W)
            dq_b, dk_w, dv_w = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                dO[b].reshape(-1, T, c, d)[:, t0:t1], q4[b].reshape(-1, T, c, d)[:, t0:t1], k_w, v_w,
                O[b].reshape(-1, T, c, d)[:, t0:t1], L4[b].reshape(-1, T, c)[:, t0:t1], 0.0, False,
                attn_mask=bb[:, t0:t1], scale=scale,
            )
            dq[b].reshape(-1, T, c, d)[:, t0:t1] = dq_b
            _fold_into(dkp[b].view(-1, P, d), dk_w, c, start + t0 * c)  # Σ the overlapping windows' gradients per key
            _fold_into(dvp[b].view(-1, P, d), dv_w, c, start + t0 * c)
    return dq, dkp[:, :, front : front + m], dvp[:, :, front : front + m]


class WindowAttention(torch.autograd.Function):
    """Band (flash kernel over strided windows) ∪ extras (small softmax), merged by log-sum-exp (module docstring)."""

    @staticmethod
    def forward(ctx, q4, k, v, k_e, v_e, e_bias, bias, empty, T, c, front, back, lo, W, scale, band=None):
        # q4: (B, H, T, c, d); k, v: (B, H, m, d) (padded by front/back rows for the windows: _padded);
        # k_e, v_e: (B, H, T|1, e, d) or None; e_bias: (B|1, H|1, T, c, e) or None; bias: (B|1, T, c, W);
        # empty: (B|1, 1, T, c, 1) bool or None;
        # band: (w, offset, causal, key_keep) for the native kernel, or None (PyTorch's flash kernel)
        B, H, _, _, d = q4.shape
        m = k.shape[2]
        ctx.geom = (T, c, front, back, lo, W, scale)
        ctx.band = band
        s_e = None if k_e is None else _extras_scores(q4, k_e, e_bias, scale)  # (B, H, T, c, e): τ q·k_E + b_E
        if band is not None:  # the fused C kernel (native.py):
                              # tiles of rows × their own band, extras in the same softmax
            w, offset, causal, key_keep = band
            e = None if k_e is None else k_e.shape[-2]
            extras = None if k_e is None else (s_e.view(B * H, T * c, e), v_e.reshape(B * H, k_e.shape[2], e, d), c)
            O, L = native.band_forward(
                q4.view(B * H, T * c, d), k.reshape(B * H, m, d), v.reshape(B * H, m, d),
                w, offset=offset, causal=causal, keep=key_keep, heads_per_keep=H, scale=scale, extras=extras,
            )
            O, L = O.view(B, H, T, c, d), L.view(B, H, T, c, 1)
        else:
            O, L = _flash_forward(q4, k, v, bias, T, c, front, back, lo, W, scale)
            if s_e is not None:  # merged in place: no n×d temporaries (each costs a fresh allocation on CPU)
                L_new = torch.logaddexp(L, torch.logsumexp(s_e, -1, keepdim=True))  # (B, H, T, c, 1)
                O.mul_(torch.exp(L - L_new).to(O.dtype))  # e^{L_band − L} O_band
                _chunk_mm_add(O, torch.exp(s_e - L_new).to(v_e.dtype), v_e)  # + P_E V_E
                L = L_new
        if empty is not None:
            O.masked_fill_(empty, 0.0)
        ctx.save_for_backward(q4, k, v, k_e, v_e, e_bias, bias, empty, O, L)
        return O

    @staticmethod
    def backward(ctx, dO):
        # Flash style: the kernel recomputes P_band = exp(S − L) from the merged L; P is never stored.
        q4, k, v, k_e, v_e, e_bias, bias, empty, O, L = ctx.saved_tensors
        T, c, front, back, lo, W, scale = ctx.geom
        B, H, _, _, d = q4.shape
        m = k.shape[2]
        if empty is not None:
            dO = dO.masked_fill(empty, 0.0)
        dO = dO.contiguous()
        D = torch.linalg.vecdot(dO, O)[..., None]  # (B, H, T, c, 1): rowsum(dO ∘ O)
        if ctx.band is not None:  # the native kernel: tiles of rows × their own band, P recomputed from L
            w, offset, causal, key_keep = ctx.band
            N = B * H
            dq, dk, dv = native.band_backward(
                q4.view(N, T * c, d), k.reshape(N, m, d), v.reshape(N, m, d), dO.view(N, T * c, d), L.view(N, T * c),
                D.view(N, T * c), w, offset=offset, causal=causal, keep=key_keep, heads_per_keep=H, scale=scale,
            )
            dq, dk, dv = dq.view(B, H, T, c, d), dk.view(B, H, m, d), dv.view(B, H, m, d)
        else:
            dq, dk, dv = _flash_backward(q4, k, v, dO, O, L, bias, T, c, front, back, lo, W, scale)
        dk_e = dv_e = de_bias = None
        if k_e is not None:  # the extras' softmax slice: dS = P (dO vᵀ − rowsum(dO ∘ O))
            p_e = torch.exp(_extras_scores(q4, k_e, e_bias, scale) - L)  # (B, H, T, c, e)
            shared = k_e.shape[2] == 1  # the same keys for every chunk: their gradients sum over chunks
            dS = p_e * (_chunk_mm(dO, v_e.transpose(-1, -2)) - D)
            _chunk_mm_add(dq, dS, k_e, alpha=scale)
            dk_e = (_chunk_tmm(dS, q4, shared) * scale).sum_to_size(k_e.shape)
            dv_e = _chunk_tmm(p_e.to(dO.dtype), dO, shared).sum_to_size(v_e.shape)
            if ctx.needs_input_grad[5]:
                de_bias = dS.sum_to_size(e_bias.shape)
        return dq, dk, dv, dk_e, dv_e, de_bias, None, None, None, None, None, None, None, None, None, None

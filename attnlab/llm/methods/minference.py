"""MInference (Jiang et al. 2024, "MInference 1.0: Accelerating Pre-filling for Long-Context LLMs via Dynamic Sparse Attention").

``minference`` — as published, vertical-slash: the prefill of every head reads v vertical lines (key
columns) and s slash lines (diagonals at any offset), both estimated per input from the last 64
queries; decoding reads the whole KV cache (MInference sparsifies the prefill only):

    â_rj   = softmax_{j ≤ p_r}(q_{p_r}·k_j · scaling),      p_r = n − 64 + r, r < 64   (the last queries)
    V      = top_v(Σ_r â_rj)            the first min(30, v) keys always (``vertical[..., :30] = inf``)
    Δ      = top_s(Σ_r â_{r, p_r + δ})  over offsets δ ≤ 0, the nearest min(100, s) always (``slash[..., -100:] = inf``)
    S_h(i) = {j ≤ i : j ∈ V} ∪ {j ≤ i : j − i ∈ Δ}

The always-kept nearest diagonals are run as the band B_w (w = min(100, s) − 1), the other slash
lines as ``Support.diagonals`` and the vertical lines as ``Support.columns``; the chunked kernel
executes them (``Support.kernel_diagonal_extras``).  Budget: v + s = β(n + 1)/2 keys per row, half
each (options ``vertical`` and ``slash`` set them), so the prefill reads ≈ β of the causal entries.
Not done here: MInference's offline per-head choice among its three patterns (Λ-shape,
vertical-slash, block-sparse); every head runs vertical-slash.

``minference-mass`` / ``minference-error`` — attnlab's round-2 variants: per head one of 6 candidate
patterns scaled to the budget (Λ-shape, vertical-slash ×4, block-sparse mapped to vertical-slash),
chosen on calibration text by captured mass or by the output error of the last queries, slash lines
as the contiguous band, and the cache evicted to what the pattern can read
(``attnlab.llm.baselines.minference``).
"""

from __future__ import annotations

import numpy as np
import torch

from attnlab.llm.methods import register
from attnlab.llm.methods.base import PlanMethod

__all__ = ["MInference", "MInferenceError", "MInferenceMass", "vertical_slash"]

LAST_Q = 64        # the queries that estimate the lines (MInference's last_q)
FIRST_COLUMNS = 30  # vertical[..., :30] = inf
NEAR_SLASHES = 100  # slash[..., -100:] = inf
VS_CHUNK = 8        # queries per kernel chunk: each slash line costs c scores per query (one owned)


def vertical_slash(q, k, scaling: float, v: int, s: int):
    """The lines of one head estimated from its last queries: q (B, n, d), k (B, n, d) → Support per batch row.

    Returns (w, columns (B, v), diagonals (B, s − w − 1)) with the forced lines included; offsets δ ≤ −w − 1.
    """
    from attnlab.support import NO_DIAGONAL

    B, n, d = q.shape
    nq = min(LAST_Q, n)
    p = torch.arange(n - nq, n, device=q.device)                                     # (nq,) positions of the last queries
    sc = (q[:, n - nq :].float() @ k.float().transpose(-1, -2)) * scaling             # (B, nq, n)
    j = torch.arange(n, device=q.device)
    sc = sc.masked_fill(j[None, None, :] > p[None, :, None], float("-inf"))
    a = torch.softmax(sc, -1)                                                         # (B, nq, n)
    vert = a.sum(1)                                                                   # (B, n)
    vert[:, : min(FIRST_COLUMNS, v)] = float("inf")
    cols = torch.topk(vert, min(v, n), -1).indices if v else vert.new_zeros(B, 0, dtype=torch.long)
    dist = (p[:, None] - j[None, :]).expand(B, nq, n)                                 # −δ = p_r − j ≥ 0 where allowed
    slash = torch.zeros(B, n, device=q.device).scatter_add_(-1, dist.clamp_min(0).reshape(B, -1),
                                                            torch.where(dist >= 0, a, 0.0).reshape(B, -1))  # (B, n): mass at distance −δ
    near = min(NEAR_SLASHES, s, n)
    w = max(near - 1, 0)
    far = max(0, min(s, n) - near)
    if far:
        slash[:, : w + 1] = -1.0                                                      # the band holds these
        top = torch.topk(slash, far, -1)
        diags = torch.where(top.values > 0, -top.indices, torch.full_like(top.indices, NO_DIAGONAL))
    else:
        diags = torch.zeros(B, 0, dtype=torch.long, device=q.device)
    return w, cols, diags


def _vs_runner(base, v: int, s: int):
    """The layer's runner whose prefill runs vertical-slash per head; decoding reads the whole cache."""
    import torch.nn.functional as F

    from attnlab.llm.attention import LayerRunner
    from attnlab.nn.mechanisms.sliding_window import sliding_window_attention
    from attnlab.support import Support

    class VerticalSlashRunner(LayerRunner):
        def prefill(self, q, k, v_, scaling):
            # q: (B, H, n, d_k), k, v_: (B, H_kv, n, ·) → (B, H, n, d_v)
            if self.sliding is not None:                     # a sliding layer reads its own window (the model's mask)
                return super().prefill(q, k, v_, scaling)
            B, H, n, _ = q.shape
            out = q.new_empty(B, H, n, v_.shape[-1])
            self.supports = []
            for h in range(H):
                g = int(self.kv_of[h])
                w, cols, diags = vertical_slash(q[:, h], k[:, g], scaling, v, s)
                sup = Support(w=w, columns=cols, diagonals=diags)
                self.supports.append(sup)
                if w >= n - 1:
                    out[:, h] = F.scaled_dot_product_attention(q[:, h], k[:, g], v_[:, g], is_causal=True, scale=scaling)
                    continue
                c = VS_CHUNK
                T = -(-n // c)
                c_idx = sup.kernel_extra_idx(n, c)[:, None]                               # (B, 1, T, v)
                c_own = sup.kernel_extra_own()[:, None].expand(B, 1, 1, c, cols.shape[-1])
                d_idx, d_own, d_logit = sup.kernel_diagonal_extras(n, n, c)                # (B, T, s·c), (1,1,1,c,s·c), (B, T, s·c)
                idx = torch.cat([c_idx, d_idx[:, None]], -1)
                own = torch.cat([c_own, d_own.expand(B, 1, 1, c, d_own.shape[-1])], -1)
                logit = torch.cat([torch.zeros(B, 1, T, cols.shape[-1], device=q.device), d_logit[:, None]], -1).to(q.dtype)
                out[:, h : h + 1] = sliding_window_attention(q[:, h : h + 1], k[:, g : g + 1], v_[:, g : g + 1], w, causal=True,
                                                             extra_idx=idx, extra_own=own, extra_logit=logit, unique=True,
                                                             chunk=c, scale=scaling)
            return out

    runner = VerticalSlashRunner.__new__(VerticalSlashRunner)
    runner.__dict__.update(base.__dict__)
    runner.supports = []
    return runner


@register
class MInference(PlanMethod):
    name = "minference"
    prefill = ("vertical-slash per head: the top v key columns and top s diagonals (any offset) of the last 64 "
               "queries' attention, v + s = β(n+1)/2 keys per row")
    decoding = "the whole KV cache is kept and read (MInference sparsifies the prefill only)"
    options = {"vertical": (int, 0, 10**7), "slash": (int, 1, 10**7)}

    def lines(self, n: int) -> tuple[int, int]:
        """(v, s): the options, else half of the β(n + 1)/2 keys per row each."""
        keys = max(2, int(round(self.budget * (n + 1) / 2)))
        return int(self.opts.get("vertical", keys // 2)), int(self.opts.get("slash", keys - keys // 2))

    def make_plan(self, model, n, calibration):
        from attnlab.llm.plan import Plan, model_shape

        return Plan.full(model_shape(model), n)

    def _install(self, model) -> None:
        from attnlab.llm.attention import attention_modules

        super()._install(model)
        v, s = self.lines(max(self.n, 1))
        for mod in attention_modules(model):
            mod.attnlab_layer = _vs_runner(mod.attnlab_layer, v, s)

    def new_cache(self, model):
        from transformers import DynamicCache

        return DynamicCache()

    def prefill_fraction(self, n: int) -> float:
        """Upper bound of β: (v + s) keys per row (fewer in the first rows) over the causal entries."""
        v, s = self.lines(n)
        i = np.arange(n)
        return float(np.minimum(i + 1, v + s).sum() / (n * (n + 1) / 2))


class _MInferenceRound2(PlanMethod):
    calibrated = True
    by = "mass"
    prefill = "per head its calibrated pattern: a band of slash lines + sink or per-input vertical columns"
    decoding = "the cache keeps what the pattern can still read (band + columns); the rest is evicted"

    def calibration_candidates(self, shape, n):
        from attnlab.llm import baselines

        return baselines.minference_candidates(self.budget, n, shape)

    def make_plan(self, model, n, calibration):
        from attnlab.llm import baselines

        return baselines.minference(calibration, self.budget, by=self.by)


@register
class MInferenceMass(_MInferenceRound2):
    name = "minference-mass"
    by = "mass"


@register
class MInferenceError(_MInferenceRound2):
    name = "minference-error"
    by = "error"

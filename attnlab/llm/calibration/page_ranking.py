"""How well a page summary ranks the pages a decoding query reads: Quest's bound against the page's mean key.

Read-back (``attnlab.llm.execution.pages``) reads, at a decoding query q_i, the K pages of 16 keys of largest score
among those its band misses.  Here full attention runs on a window of text (``rank_pages``); for each of its last R rows
i (the queries a decoding step asks), each head of each layer without a sliding window (read-back runs there only), the
candidate pages are those wholly before the band of w keys, past the first page (the sinks: a column, read anyway):

    U_P(q_i) = Σ_d max(q_d·m_{P,d}, q_d·M_{P,d})     Quest's bound, the order read-back chooses by
                                                     (``page_upper_bound``)
    μ_P(q_i) = q_i · k̄_P                              the page's mean key
    A_P(i)   = Σ_{j ∈ P} a_ij                          the mass full attention puts on P

    recall@K(score) = Σ_{P ∈ top_K score} A_P / Σ_{P ∈ top_K A} A_P    (1: the K pages hold what the best K hold)
    hit@K(score)    = [argmax_P A_P ∈ top_K score]                      (the page the head reads most is among them)

for score = U ("bound"), μ ("mean"), and "half": the K/2 pages of largest U,
then the K − K/2 of largest μ among the rest.

averaged over the (layer, head, row) whose candidates hold ≥ ``far`` of the row's mass (a head that reads far: the
rows that read nothing there rank noise).  ``benchmarks/page_ranking.py`` prints them on dev text; the calibration
keeps them on its own text (``Calibration.page_recall``), where ``attnlab-retrieval:page_score=calibrated`` reads
which choice to make (K by the bound, or the split, ``pages.choose_pages``).
"""

from __future__ import annotations

import torch

from attnlab.llm.execution.attention import LayerRunner, apply_plan, attention_modules, remove_plan
from attnlab.llm.execution.pages import PAGE, page_upper_bound
from attnlab.llm.plans.plan import Plan, model_shape

__all__ = ["RANKED", "add_page_ranking", "page_scores", "rank_layer", "rank_pages", "ranking_array", "ranking_row"]

RANKED = ("recall_bound", "recall_mean", "recall_half", "hit_bound", "hit_mean", "hit_half")


def ranking_array(row: dict):
    """``rank_pages``' row as the calibration keeps it (``Calibration.page_ranking``):
    [K, far_rows, *RANKED] (NaN: none)."""
    import numpy as np

    return np.asarray([row["K"], row["far_rows"], *(np.nan if row[k] is None else row[k] for k in RANKED)],
                      dtype=np.float64)


def ranking_row(a) -> dict:
    """``ranking_array``'s inverse: {"K", "far_rows", *RANKED} (None: not measured, NaN in the array)."""
    import math

    K, far, *ranked = (float(x) for x in a)
    return {"K": int(K), "far_rows": int(far), **{k: None if math.isnan(x) else x for k, x in zip(RANKED, ranked)}}


def add_page_ranking(cal, model, tokenizer, text_path, n: int, K: int) -> bool:
    """The calibration's page ranking (``Calibration.page_ranking``) at K on the first window of n tokens of its text,
    made unless it holds one at K already; whether it was made."""
    from attnlab.llm.models.text_windows import token_windows

    if not K or cal.page_ranking[0] == K:
        return False
    cal.page_ranking = ranking_array(rank_pages(model, token_windows(tokenizer, text_path, n, 1)[0], K=K))
    return True


class Recording(LayerRunner):
    """A full layer that keeps its last R queries and every key of its prefill
    (the seam's subclass of ``LayerRunner``)."""

    def __init__(self, *args, rows: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.R = rows

    def prefill(self, q, k, v, scaling):
        if self.sliding is None:
            # (B, H, R, d), (B, H_kv, n, d)
            self.seen = (q[:, :, -self.R :].float().contiguous(), k.float().contiguous(), scaling)
        return super().prefill(q, k, v, scaling)


def page_scores(q, k, page: int = PAGE):
    """U_P and μ_P of the keys k (H_kv, n, d) at positions 0 … n − 1 for the queries q (H, R, d) → (H, R, P) each, and
    the scores q·k (H, R, n) they come from (μ_P = q·k̄_P = the mean of its keys' scores)."""
    H, R, d = q.shape
    H_kv, n, _ = k.shape
    # GQA: h reads KV head h // r
    s = (q.reshape(H_kv, (H // H_kv) * R, d) @ k.transpose(-1, -2)).view(H, R, n)
    U = page_upper_bound(q[None], k[None], torch.arange(n).expand(1, H_kv, n), page)[0]     # (H, R, P)
    P = U.shape[-1]
    mu = torch.nn.functional.pad(s, (0, P * page - n)).view(H, R, P, page).sum(-1)
    return U, mu / torch.bincount(torch.arange(n) // page, minlength=P), s


def rank_layer(q, k, scaling: float, w: int, K: int, far: float, page: int = PAGE) -> dict:
    """The sums of recall@K and hit@K of each score (bound, mean, half) over one layer's (head, row) that read far, and
    their count: {name: (sum, count)}; q (H, R, d) its last R queries, k (H_kv, n, d) its keys."""
    H, R, _ = q.shape
    n = k.shape[1]
    i = torch.arange(n - R, n)                                                              # the rows' positions
    # (H, R, P), (H, R, P), (H, R, n)
    U, mu, s = page_scores(q, k, page)
    # (H, R, n) full attention
    a = torch.softmax((s * scaling).masked_fill(torch.arange(n) > i[:, None], float("-inf")), -1)
    P = -(-n // page)
    K = min(K, P)
    A = torch.nn.functional.pad(a, (0, P * page - n)).view(H, R, P, page).sum(-1)         # (H, R, P) A_P(i)
    start = torch.arange(P) * page
    # (R, P) before the band, not the sinks'
    cand = (start[None, :] + page - 1 < (i[:, None] - w)) & (start[None, :] > 0)
    A = A.masked_fill(~cand, 0.0)
    reads_far = A.sum(-1) >= far                                                            # (H, R)
    # (H, R) the best K pages' mass
    best = torch.topk(A, K, -1).values.sum(-1).clamp_min(1e-30)
    top_page = A.argmax(-1, keepdim=True)                                                   # (H, R, 1)

    def top(score, count):   # (H, R, P) bool: the ``count`` candidate pages of largest score
        chosen = torch.topk(score.masked_fill(~cand, float("-inf")), count, -1).indices
        return torch.zeros_like(A, dtype=torch.bool).scatter_(-1, chosen, True)

    out = {}
    by_bound = top(U, K // 2)
    # K/2 by the bound, the rest by the mean
    half = by_bound | top(mu.masked_fill(by_bound, float("-inf")), K - K // 2)
    for name, sel in (("bound", top(U, K)), ("mean", top(mu, K)), ("half", half)):
        sel = sel & cand                                                                   # (H, R, P)
        recall = (A * sel).sum(-1) / best
        hit = sel.gather(-1, top_page)[..., 0].float()
        out[f"recall_{name}"] = (float(recall[reads_far].sum()), int(reads_far.sum()))
        out[f"hit_{name}"] = (float(hit[reads_far].sum()), int(reads_far.sum()))
    out["rows"] = (int(reads_far.sum()), H * R)
    return out


@torch.no_grad()
def rank_pages(model, ids, rows: int = 32, w: int = 128, K: int = 16, far: float = 0.25) -> dict:
    """recall@K and hit@K of each page score over the layers without a sliding window of ``model`` (full attention) on
    the token window ``ids`` (1, n): {"n", "d", "layers", "rows", "band", "K", "page", "far", "far_rows", "all_rows",
    and ``RANKED``} (None: no (head, row) read far)."""
    n = ids.shape[-1]
    before = model.config._attn_implementation
    apply_plan(model, Plan.full(model_shape(model), n), runner=lambda *a, **kw: Recording(*a, rows=rows, **kw))
    try:
        runners = [mod.attnlab_layer for mod in attention_modules(model)]
        model(ids.to(model.device), use_cache=False, logits_to_keep=1)
        totals: dict[str, list[float]] = {}
        # the layers without a window
        seen = [r.seen for r in runners if hasattr(r, "seen")]
        for q, k, scaling in seen:
            for key, (x, c) in rank_layer(q[0], k[0], scaling, w, K, far).items():
                t = totals.setdefault(key, [0.0, 0])
                t[0] += x
                t[1] += c
    finally:
        remove_plan(model)
        model.set_attn_implementation(before)
    row = {"n": n, "d": int(seen[0][1].shape[-1]), "layers": len(seen), "rows": rows,
           "band": w, "K": K, "page": PAGE, "far": far, "far_rows": int(totals["rows"][0]),
           "all_rows": int(totals["rows"][1])}
    for key in RANKED:
        x, c = totals[key]
        row[key] = round(x / c, 4) if c else None
    return row

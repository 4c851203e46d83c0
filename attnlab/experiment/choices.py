"""Stage 6a: the automatic (w, num_pos) of every head, from the captured evaluation sentences.

For each kind (encoder, decoder, cross), the heads' matrices on S sentences
are padded into a batch (S, L, H, N, M) with their real lengths, and the
error–budget curve of the band + columns fit (no sparse residual: s = 0, the
support head surgery keeps) is computed over w = 0..10, num_pos = 0..4
(``attnlab.analysis.budget.error_budget_curve``).  Averaged over the
sentences, it gives per head

    (w*, num_pos*) = argmin { stored entries : lost mass ≤ target }

(``choose_budget``, metric "lost_mass" = 1 − Σ x_ij / Σ a_ij) and for the
whole model one (w, num_pos) shared by all heads (``choose_model_budget``,
heads on average).  ``kept`` is the fraction of the attention entries the
choice stores (mean stored entries / mean real entries).
"""

from __future__ import annotations

import numpy as np

from attnlab.analysis.attention_maps import AttentionMaps
from attnlab.analysis.budget import ErrorBudgetCurve, choose_budget, choose_model_budget, error_budget_curve
from attnlab.experiment.attention import load_maps
from attnlab.experiment.stages import Context
from attnlab.experiment.thesis_models import ThesisModel

__all__ = ["mean_curve", "kind_choices", "choices_stage", "WS", "NUM_POS"]

WS = range(0, 11)
NUM_POS = range(0, 5)


def mean_curve(maps: AttentionMaps, kind: str, ws=WS, num_pos=NUM_POS) -> tuple[ErrorBudgetCurve, float]:
    """The error–budget curve averaged over the sentences: batch shape (L, H); and the mean real entries."""
    a, q_len, k_len = maps.padded(kind)  # (S, L, H, N, M)
    N, M = a.shape[-2:]
    ws = [w for w in ws if w < max(N, M)]
    num_pos = [p for p in num_pos if p <= M]
    curve = error_budget_curve(a, ws, num_pos, s=0, lengths=q_len[:, None, None], key_lengths=k_len[:, None, None])
    mean = ErrorBudgetCurve(
        w=curve.w, num_pos=curve.num_pos, s=0,
        stored_entries=curve.stored_entries.mean(0), l1=curve.l1.mean(0),
        mean_error=curve.mean_error.mean(0), mass_captured=curve.mass_captured.mean(0),
    )
    return mean, float((q_len * k_len).mean())


def kind_choices(maps: AttentionMaps, kind: str, target: float) -> dict:
    """Per-head and per-model choices for one kind (JSON-ready)."""
    curve, entries = mean_curve(maps, kind)
    per_head = choose_budget(curve, target, metric="lost_mass")
    model = choose_model_budget(curve, target, metric="lost_mass", reduce="mean")
    L, H = per_head.w.shape
    return {
        "target_lost_mass": target,
        "w": per_head.w.tolist(), "num_pos": per_head.num_pos.tolist(), "reached": per_head.reached.tolist(),
        "lost_mass": np.where(per_head.reached, per_head.error, np.nan).tolist(),
        "kept": (np.where(per_head.reached, per_head.stored_entries, entries) / entries).tolist(),
        "model_w": int(model.w), "model_num_pos": int(model.num_pos),
        "model_kept": float(model.stored_entries / (entries * L * H)) if model.reached else 1.0,
        "mean_entries": entries,
        # the curve itself: lost mass (L, H, W, P) and stored fraction (L, H, W, P)
        "grid_w": curve.w.tolist(), "grid_num_pos": curve.num_pos.tolist(),
        "curve_lost_mass": (1.0 - curve.mass_captured).round(5).tolist(),
        "curve_kept": (curve.stored_entries / entries).round(5).tolist(),
    }


def choices_stage(models: list[ThesisModel]):
    def run(ctx: Context) -> dict:
        out = {"models": {}}
        for m in models:
            maps = load_maps(ctx, m.name, "eval")
            out["models"][m.name] = {kind: kind_choices(maps, kind, ctx.settings.target_lost_mass)
                                     for kind in maps.kinds}
        h8 = out["models"][models[-1].name]
        out["_note"] = "  ".join(f"{k}: w={v['model_w']}, num_pos={v['model_num_pos']}" for k, v in h8.items())
        return out

    return run

"""Stage 7: singular-value spectra of the heads (the thesis's "full rank with low ℓ2 norm").

For each model and kind, on the evaluation sentences (padding excluded):
σ_1 ≥ … ≥ σ_r of every head matrix, the spectral norm σ_1, the effective rank
exp(H(σ/Σσ)) and the 90 %-energy rank (``attnlab.analysis.spectrum``),
averaged over sentences per head.  The figure plots the mean normalised
spectrum σ_k/σ_1 of each head of the 16-token sentence.
"""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnlab.analysis.spectrum import spectrum
from attnlab.experiment.attention import load_maps
from attnlab.experiment.stages import Context
from attnlab.experiment.thesis_models import ThesisModel
from attnlab.viz.heatmap import save_figure

__all__ = ["spectra_stage", "plot_spectra"]


def plot_spectra(sigma: dict[str, np.ndarray], title: str) -> Figure:
    """One panel per kind: σ_k / σ_1 against k for every head (L·H curves)."""
    fig = Figure(figsize=(3.6 * len(sigma), 3.0), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(sigma), squeeze=False)[0]
    for ax, (kind, s) in zip(axes, sigma.items()):
        s = s.reshape(-1, s.shape[-1])  # (L·H, r)
        k = np.arange(1, s.shape[-1] + 1)
        for h, row in enumerate(s):  # drawing: one line per head
            ax.plot(k, row / max(row[0], 1e-12), marker="o", ms=2.5, lw=1.2, label=f"H{h}")
        ax.set_yscale("log")
        ax.set_xlabel("k")
        ax.set_ylabel("σ_k / σ_1")
        ax.set_title(kind, fontsize=9)
        ax.grid(alpha=0.3)
    if s.shape[0] > 1:
        axes[-1].legend(fontsize=6, ncol=2, loc="lower left")
    fig.suptitle(title, fontsize=10)
    return fig


def spectra_stage(models: list[ThesisModel]):
    def run(ctx: Context) -> dict:
        out = {"models": {}, "figures": {}}
        for m in models:
            ev, one = load_maps(ctx, m.name, "eval"), load_maps(ctx, m.name, "sentence")
            entry = {}
            for kind in ev.kinds:
                a, q_len, k_len = ev.padded(kind)  # (S, L, H, N, M)
                sp = spectrum(a, lengths=q_len[:, None, None], key_lengths=k_len[:, None, None])
                r = np.minimum(q_len, k_len)[:, None, None]  # real rank bound per sentence
                entry[kind] = {
                    "spectral_norm": sp.spectral_norm.mean(0).round(4).tolist(),        # (L, H)
                    "frobenius_norm": sp.frobenius_norm.mean(0).round(4).tolist(),
                    "effective_rank": sp.effective_rank.mean(0).round(3).tolist(),
                    "effective_rank_fraction": (sp.effective_rank / r).mean(0).round(3).tolist(),
                    "energy_rank_90": sp.energy_rank.mean(0).round(3).tolist(),
                    "energy_rank_90_fraction": (sp.energy_rank / r).mean(0).round(3).tolist(),
                }
            sigma = {k: spectrum(one.weights(0, k)).sigma for k in ("encoder", "cross")}
            fig = plot_spectra(sigma, f"{m.title}: singular values (16-token sentence)")
            png = save_figure(fig, ctx.path("figures", f"spectrum-{m.name}.png"))
            out["figures"][m.name] = str(png.relative_to(ctx.out))
            out["models"][m.name] = entry
        h = out["models"][models[-1].name]["encoder"]
        out["_note"] = f"encoder effective rank / n = {np.mean(h['effective_rank_fraction']):.2f}"
        return out

    return run

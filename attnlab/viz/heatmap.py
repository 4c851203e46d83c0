"""A head as a heatmap, and a layer × head grid of them (matplotlib, no display needed).

Cell (i, j) is the weight w_ij = softmax_j(q_i · k_j / √d_k) of query i (row,
token on the y axis) on key j (column, token on the x axis); the colour scale
runs from 0 to ``vmax`` (default: the head's own maximum, or with
``shared_scale`` one maximum for the whole grid, so heads can be compared).

Figures are built with ``matplotlib.figure.Figure`` (Agg canvas), never with
pyplot: nothing global changes, and it runs headless.  ``save_figure`` writes
PNG or SVG by the file suffix.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnlab.analysis.attention_maps import AttentionMaps
from attnlab.atomic import write_atomic
from attnlab.viz.labels import display_tokens

__all__ = ["plot_head", "plot_grid", "save_figure", "draw_head"]

CMAP = "viridis"


def draw_head(ax, w: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], *, vmax: float | None = None,
              title: str | None = None, labels: bool = True, xlabels: bool = True, ylabels: bool = True):
    """Draw one matrix ``w`` (n_q, n_k) on ``ax``; tokens on both axes. Returns the image."""
    # w: (n_q, n_k)
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or w.shape != (len(q_tokens), len(k_tokens)):
        raise ValueError(f"w: expected shape ({len(q_tokens)}, {len(k_tokens)}) for the tokens, got {w.shape}")
    im = ax.imshow(w, cmap=CMAP, vmin=0.0, vmax=vmax if vmax is not None else max(float(w.max()), 1e-12),
                   interpolation="nearest", aspect="auto")
    size = max(4.0, min(9.0, 300.0 / max(len(q_tokens), len(k_tokens), 1)))
    if labels and xlabels:
        ax.set_xticks(range(len(k_tokens)), display_tokens(k_tokens), rotation=90, fontsize=size)
    else:
        ax.set_xticks([])
    if labels and ylabels:
        ax.set_yticks(range(len(q_tokens)), display_tokens(q_tokens), fontsize=size)
    else:
        ax.set_yticks([])
    ax.tick_params(length=0)
    if title:
        ax.set_title(title, fontsize=9)
    return im


def _pick(maps: AttentionMaps, sentence: int, kind: str | None):
    if not 0 <= sentence < len(maps):
        raise ValueError(f"sentence: {sentence} is out of range (0..{len(maps) - 1})")
    kind = kind or maps.kinds[0]
    w = maps.weights(sentence, kind)  # (L, H, n_q, n_k)
    s = maps[sentence]
    return kind, w, s.query_tokens(kind), s.key_tokens(kind)


def plot_head(maps: AttentionMaps, sentence: int = 0, kind: str | None = None, layer: int = 0, head: int = 0,
              *, vmax: float | None = None) -> Figure:
    """Heatmap of one head: queries (rows) × keys (columns), tokens on both axes, with a colour bar."""
    kind, w, q_tok, k_tok = _pick(maps, sentence, kind)
    L, H = w.shape[:2]
    if not (0 <= layer < L and 0 <= head < H):
        raise ValueError(f"layer/head: ({layer}, {head}) out of range for {L} layers × {H} heads")
    side = 2.0 + 0.28 * max(len(q_tok), len(k_tok))
    fig = Figure(figsize=(min(side + 1.2, 30), min(side, 30)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    im = draw_head(ax, w[layer, head], q_tok, k_tok, vmax=vmax, title=f"{kind} · layer {layer} · head {head}")
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig


def plot_grid(maps: AttentionMaps, sentence: int = 0, kind: str | None = None, *, layers: Sequence[int] | None = None,
              heads: Sequence[int] | None = None, shared_scale: bool = True, labels: bool | None = None,
              max_tokens: int = 512) -> Figure:
    """Layer × head grid of heatmaps for one sentence and kind.

    ``shared_scale``: one colour scale (0 .. max over the grid) for all panels
    and one colour bar; otherwise each panel is scaled to its own maximum.
    Token labels (queries on the first column, keys on the last row) are
    drawn when the matrices are small (≤ 24 tokens) unless ``labels`` says
    otherwise.  Long inputs (more than ``max_tokens`` per side) are drawn
    pooled (``attnlab.viz.explorer.pool_tokens``: keys summed, queries averaged).
    """
    from attnlab.viz.explorer import pool_tokens

    kind, w, q_tok, k_tok = _pick(maps, sentence, kind)
    L, H = w.shape[:2]
    layers = list(range(L)) if layers is None else list(layers)
    heads = list(range(H)) if heads is None else list(heads)
    if not layers or not heads or min(layers + heads) < 0 or max(layers) >= L or max(heads) >= H:
        raise ValueError(f"layers/heads: must be within {L} layers × {H} heads")
    sub = w[np.ix_(layers, heads)]  # (len(layers), len(heads), n_q, n_k)
    sub, q_tok, k_tok, _, _ = pool_tokens(sub, q_tok, k_tok, max_tokens)
    labels = (max(len(q_tok), len(k_tok)) <= 24) if labels is None else labels
    vmax = float(sub.max()) if shared_scale else None
    cell = 1.9
    margin = 0.075 * max(len(t) for t in q_tok + k_tok) + 0.4 if labels else 0.2
    fig = Figure(figsize=(cell * len(heads) + margin + (0.8 if shared_scale else 0.0),
                          cell * len(layers) + margin + 0.5),
                 dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.asarray(fig.subplots(len(layers), len(heads), squeeze=False))
    for a, l in enumerate(layers):
        for b, h in enumerate(heads):  # drawing: one panel per head (matplotlib has no batched imshow)
            im = draw_head(axes[a, b], sub[a, b], q_tok, k_tok, vmax=vmax, title=f"L{l} H{h}", labels=labels,
                           xlabels=a == len(layers) - 1, ylabels=b == 0)
    fig.suptitle(f"{kind} attention — {maps[sentence].text[:80]}", fontsize=10)
    if shared_scale:
        fig.colorbar(im, ax=axes.ravel().tolist(), fraction=0.02, pad=0.01, label="weight (shared scale)")
    return fig


def save_figure(fig: Figure, path: str | os.PathLike) -> Path:
    """Save ``fig`` as PNG or SVG (by suffix); writes a temporary file, then renames."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise ValueError(f"path: expected a .png or .svg file, got {path.name}")
    metadata = {"Software": None} if fmt == "png" else {"Date": None}
    return write_atomic(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=fig.dpi, metadata=metadata))

"""What ``attnlab attention|roles|approximate --hf MODEL --file TEXT`` prints and writes for a ``LongAttention``.

    OUT/long-attention.safetensors   the statistics (``LongAttention.save``)
    OUT/summary.md, OUT/heads.json   one row per head: layer type, role (and, given the detectors, the
                                     detectors naming it and its label), entropy, far share, top key
                                     columns, chosen (w, num_pos) for the target mass; heads.json in the
                                     format of ``attnlab heads`` (``attnlab.llm.heads.heads_file``), with
                                     the detectors' tables copied in when given (and
                                     ``meta.detectors_file``: which heads file)
    OUT/band-profiles.png            layer × head grid: mass by distance i − j (log–log)
    OUT/explorer.html                the long-input explorer (``attnlab.viz.long_explorer``): heads grid,
                                     pooled overview that zooms into the exact window and tiles, fit, plan
    OUT/pooled/grid.png              grid PNG of the pooled maps (overview)
    OUT/window/grid.png              grid PNG of the exact window of rows
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from attnlab.atomic import write_text_atomic
from attnlab.llm.heads.heads_file import detector_tables, head_label, named_by
from attnlab.llm.heads.long_capture import LongAttention
from attnlab.llm.models.memory import gib
from attnlab.viz.labels import display_token

__all__ = ["capture_heads_document", "head_rows", "summary", "summary_markdown", "write_long_attention", "LOCAL_WS"]

LOCAL_WS = (64, 256, 1024)  # "a band" for the share of heads needing more than band + 4 columns


def head_rows(res: LongAttention, target: float = 0.95, k: int = 4, detectors=None) -> list[dict]:
    """One dict per head (layer, head order); ``detectors`` (``DetectorScores`` or None) add ``named_by`` and
    ``label``."""
    far_d = res.far_distance()
    far = res.far_share(far_d)  # (L, H)
    reach = res.reach()
    cols, share = res.top_columns(k)
    w, num_pos, entries = res.choose(target)
    causal = res.n * (res.n + 1) / 2
    out = []
    for x, role in enumerate(res.roles):
        l, h = divmod(x, res.profile.shape[1])
        out.append({
            "layer": role.layer, "head": role.head, "layer_type": res.layer_types[l], "role": role.role,
            "label": head_label(detectors, role.layer, role.head, role.role),
            "named_by": [{"detector": d, "score": round(v, 4), "threshold": th}
                         for d, v, th in named_by(detectors, role.layer, role.head)],
            "entropy": round(float(res.entropy[l, h]), 3), f"far>{far_d}": round(float(far[l, h]), 4),
            "reach": int(reach[l, h]),
            "columns": [[int(j), display_token(res.tokens[j]), round(float(s), 4)]
                        for j, s in zip(cols[l, h], share[l, h])],
            "w": int(w[l, h]), "num_pos": int(num_pos[l, h]),
            "entries": round(float(entries[l, h]) / causal, 4) if entries[l, h] >= 0 else None,
            "positional": role.positional, "offset": role.offset, "sink": role.sink,
            "sink_token": display_token(role.sink_token),
        })
    return out


def summary(res: LongAttention, target: float = 0.95, max_num_pos: int = 4) -> dict:
    """Run figures and the share of heads that need more than a band + ``max_num_pos`` columns for ``target``."""
    far_d = res.far_distance()
    far = res.far_share(far_d)
    need = {}
    for W in LOCAL_WS:
        if W in res.fit.ws:
            w, _, _ = res.choose(target, max_num_pos=max_num_pos, max_w=W)
            need[f"w<={W}"] = round(float((w < 0).mean()), 4)
    types = np.array(res.layer_types)
    by_type = {}
    for t in sorted(set(res.layer_types)):
        sel = types == t
        by_type[t] = {"layers": int(sel.sum()), f"far>{far_d} mean": round(float(far[sel].mean()), 6),
                      f"far>{far_d} max": round(float(far[sel].max()), 6),
                      f"far>{far_d} min": round(float(far[sel].min()), 6)}
    inferred = res.inferred_layer_types()
    agree = [(i.startswith("windowed") == t.startswith("sliding")) for i, t in zip(inferred, res.layer_types)]
    roles = {}
    for r in res.roles:
        roles[r.role] = roles.get(r.role, 0) + 1
    return {
        "model": res.name, "tokens": res.n, "layers": len(res.layers), "heads": int(res.profile.shape[1]),
        "seconds": round(res.seconds, 1), "cpu_seconds": res.meta.get("cpu_seconds"), "peak": gib(res.peak_bytes),
        "peak_bytes": res.peak_bytes,
        "estimate": gib(res.estimate_bytes), "block_rows": res.block_rows, "threads": res.meta.get("threads"),
        "target": target, f"share needing more than band + {max_num_pos} columns": need,
        "layer types": by_type, "roles": roles,
        "inferred layer types": dict(zip(map(str, res.layers), inferred)),
        "inferred types agree with the config": f"{sum(agree)}/{len(agree)} layers",
    }


def summary_markdown(res: LongAttention, target: float = 0.95, detectors=None) -> str:
    s = summary(res, target)
    far_d = res.far_distance()
    lines = [f"# {res.name}: {res.n} tokens, {s['layers']} layers × {s['heads']} heads", "",
             f"time {s['seconds']} s (CPU {s['cpu_seconds']} s, {s['threads']} thread(s)) · peak memory {s['peak']} "
             f"(estimated {s['estimate']}) · block {res.block_rows} rows", "",
             "| layer type | layers | far>{0} mean | min | max |".format(far_d), "|---|---|---|---|---|"]
    for t, v in s["layer types"].items():
        lines.append(f"| {t} | {v['layers']} | {v[f'far>{far_d} mean']:.4f} | {v[f'far>{far_d} min']:.4f} | "
                     f"{v[f'far>{far_d} max']:.4f} |")
    lines += ["", "layer types inferred from the data (reach = largest distance with mass > 0): "
              + ", ".join(f"L{l} {t}" for l, t in s["inferred layer types"].items())
              + f"; agree with the config: {s['inferred types agree with the config']}"]
    if detectors is not None:
        lines += ["", f"head detectors: {detectors.source or 'given'} ({len(detectors.named)} named heads at "
                  f"n = {detectors.n}); a head's label is the first detector naming it, else its role on this text"]
    lines += ["", f"share of heads needing more than band + 4 columns for {target:.0%} of the mass: "
              + ", ".join(f"{k}: {v:.1%}" for k, v in s["share needing more than band + 4 columns"].items()), "",
              "| layer | head | type | role (detectors) | entropy | far>%d | top columns "
              "(share) | w | num_pos | entries |" % far_d,
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in head_rows(res, target, detectors=detectors):
        cols = ", ".join(f"{j}:{t!r} {sh:.3g}" for j, t, sh in r["columns"][:3])
        ent = "" if r["entries"] is None else f"{r['entries']:.3f}"
        w = "full" if r["w"] < 0 else r["w"]
        role = r["role"] + "".join(f", {x['detector']} {x['score']:.2f}" for x in r["named_by"])
        lines.append(f"| {r['layer']} | {r['head']} | {r['layer_type'].split('_')[0]} | {role} | {r['entropy']} | "
                     f"{r[f'far>{far_d}']:.4f} | {cols} | {w} | {'' if r['w'] < 0 else r['num_pos']} | {ent} |")
    return "\n".join(lines) + "\n"


def capture_heads_document(res: LongAttention, target: float = 0.95, detectors=None) -> dict:
    """The capture's ``heads.json`` (the one format of ``attnlab.llm.heads.heads_file``; the detectors' document of
    ``attnlab heads`` is ``heads_report.heads_document``)."""
    from attnlab.schemas.heads_file import FORMAT

    doc = {"format": FORMAT, "model": res.name, "n": res.n, **detector_tables(detectors),
           "heads": head_rows(res, target, detectors=detectors), "summary": summary(res, target)}
    if detectors is not None and detectors.source:   # which heads file named the heads (a redraw names it again)
        doc["meta"] = {"detectors_file": detectors.source}
    return doc


def _profiles_figure(res: LongAttention):
    """One image: a row per head (grouped by layer), log-spaced distance bins,
    colour = log10 share of mass per unit distance."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    d = res.distance_profile()  # (L, H, n)
    L, H = d.shape[:2]
    edges = np.unique(np.concatenate([[0], np.round(np.logspace(0, np.log10(res.n), 80)).astype(int), [res.n]]))
    density = np.add.reduceat(d, edges[:-1], axis=-1) / np.diff(edges)  # (L, H, bins) mass per unit distance
    density = density / np.maximum(d.sum(-1, keepdims=True), 1e-30)
    img = np.log10(np.maximum(density.reshape(L * H, -1), 1e-12))  # (L·H, bins)
    fig = Figure(figsize=(9, 2 + 0.09 * L * H), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    im = ax.imshow(img, aspect="auto", cmap="viridis", vmin=max(img.min(), -9), vmax=img.max(), interpolation="nearest")
    marks = [t for t in (1, 4, 16, 64, 256, 512, 1024, 4096, 16384) if t < res.n]
    ax.set_xticks([int(np.searchsorted(edges[:-1], t, side="right")) - 1 for t in marks], [str(t) for t in marks],
                  fontsize=7)
    ax.set_xlabel("distance i − j (log-spaced bins)")
    ax.set_yticks([l * H + H / 2 - 0.5 for l in range(L)],
                  [f"L{res.layers[l]} {res.layer_types[l].split('_')[0]}" for l in range(L)], fontsize=6)
    for l in range(1, L):
        ax.axhline(l * H - 0.5, color="white", lw=0.3)
    if res.sliding_window:
        k = int(np.searchsorted(edges, res.sliding_window))
        ax.axvline(k - 0.5, color="red", lw=0.8)
    fig.colorbar(im, ax=ax, fraction=0.04, label="log10 share of the head's mass per unit distance")
    fig.suptitle(f"{res.name}: band profiles, {res.n} tokens (rows: heads of each "
                 f"layer{'; red: sliding window' if res.sliding_window else ''})",
                 fontsize=9)
    return fig


def _maps(res: LongAttention, weights: np.ndarray, tokens: list[str], special: list[bool], text: str):
    from attnlab.analysis.attention_maps import AttentionMaps, SentenceAttention

    return AttentionMaps([SentenceAttention(text=text, target=None, tokens={"tgt": tokens}, special={"tgt": special},
                                            weights={"decoder": weights.astype(np.float32)})],
                         {"name": res.name, "source": "transformers", "layers": res.layers})


def write_long_attention(res: LongAttention, out: str | os.PathLike, target: float = 0.95, *, detectors=None,
                         plan=None) -> list[Path]:
    """Write the folder of the module docstring; returns the paths.

    ``detectors`` (``attnlab.llm.heads.heads_file.DetectorScores``) and ``plan`` (``Plan``, checked with
    ``attnlab.viz.long_explorer.check_plan``) are drawn in the explorer.
    """
    from attnlab.viz.heatmap import plot_grid, save_figure
    from attnlab.viz.long_explorer import write_long_explorer

    out = Path(out)
    if out.exists() and not out.is_dir():
        from attnlab.errors import UserError

        raise UserError(f"--out: {out} exists and is not a folder")
    heads = capture_heads_document(res, target, detectors)
    written = [res.save(out / "long-attention.safetensors"),
               write_text_atomic(out / "summary.md", summary_markdown(res, target, detectors)),
               write_text_atomic(out / "heads.json", json.dumps(heads, indent=1)),
               save_figure(_profiles_figure(res), out / "band-profiles.png")]
    if res.pooled is not None:
        g = res.pool
        labels = [res.tokens[a] if g == 1
                  else f"{display_token(res.tokens[a])}…{display_token(res.tokens[min(a + g, res.n) - 1])}"
                  for a in range(0, res.n, g)]
        maps = _maps(res, res.pooled, labels, [False] * len(labels), f"{res.n} tokens pooled by {g}")
        written += [save_figure(plot_grid(maps, 0, shared_scale=False), out / "pooled" / "grid.png")]
    if res.window_maps is not None:
        a, b = res.window
        maps = _maps(res, res.window_maps, res.tokens[a:b], res.special[a:b], f"rows {a}:{b} (keys {a}:{b})")
        written += [save_figure(plot_grid(maps, 0, labels=b - a <= 48, shared_scale=False),
                                out / "window" / "grid.png")]
    written.append(write_long_explorer(res, out / "explorer.html", detectors, plan, target=target))
    return written

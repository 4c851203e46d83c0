"""The long-input explorer: one self-contained offline HTML file for a ``LongAttention`` capture.

``long_explorer_payload(res, detectors=None, plan=None)`` → a JSON-ready dict; ``write_long_explorer``
renders ``long_explorer.html`` with ``long_explorer.css``/``.js`` and the payload inlined.  The page:

* a layers × heads grid (every layer) of the heads' names — given the head detectors' ``heads.json``
  (``attnlab.llm.heads.heads_file``) the detector naming a head (``DetectorScores.label``), else the capture's
  role on this text — or coloured by a chosen score: the capture's statistics (sink mass, band mass
  within w = 64, fitted w, far share, entropy, positional) and the detectors' scores; a click chooses
  the head, whose badge is its name, with the capture's role beside it when they differ; the header names the
  heads file (``detectors_file``: ``--heads`` or the one attnlab ships for the model);
* the pooled overview (g tokens per cell, log colour scale by default, or linear) with the head's
  fitted structure drawn on it (band |i − j| ≤ w, the argmax diagonal i + offset, the fitted key
  columns) and, given a plan (``attnlab.llm.plans.plan.Plan``), the plan's support;
* a zoom: a region selected on the overview is drawn token by token from the rows kept exactly at
  capture time — the middle window (``--rows``) and each head's zoom tiles
  (``attnlab.llm.heads.zoom_tiles``) — with the tokens' text on its axes and on hover; a click on the
  overview snaps to the captured region nearest to it; cells never captured are hatched and the page
  says so;
* the band profile (mass by distance i − j, log–log) and the column mass (mass by key) as small plots.

Every map and profile is stored as log-quantised bytes, deflated (``attnlab.viz.log_bytes``):
≈ ±3.7 % per value, which the page states.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from attnlab.atomic import write_text_atomic
from attnlab.errors import UserError
from attnlab.viz.labels import display_token, display_tokens
from attnlab.viz.log_bytes import encode_log_bytes

__all__ = ["long_explorer_payload", "render_long_explorer", "write_long_explorer", "check_plan", "FORMAT",
           "PROFILE_EXACT", "COLUMN_BINS", "BAND_W"]

FORMAT = "attnlab.long_explorer"
PROFILE_EXACT = 64    # distances 0..64 one bin each, then log-spaced bins
COLUMN_BINS = 1024    # key positions pooled into at most this many bins for the column plot
BAND_W = 64           # "band mass": the share of a head's mass within |i − j| ≤ BAND_W
MAX_BYTES = 20 * 10**6  # the file's limit: above it the overview is pooled further (by 2, 4, ...)


def model_layers(res) -> int:
    """Layers of the captured model (the capture's meta; older files: the last captured layer + 1)."""
    return int(res.meta.get("num_layers") or (max(res.layers) + 1))


def check_plan(plan, res, name: str = "--plan"):
    """UserError (one line) unless ``plan`` was made for the captured model and length."""
    H = int(res.profile.shape[1])
    got = {"num_layers": model_layers(res), "num_heads": H,
           "num_kv_heads": int(res.meta.get("num_kv_heads") or plan.num_kv_heads)}
    mine = plan.shape()
    diff = [f"{k} {mine[k]} vs {got[k]}" for k in mine if mine[k] != got[k]]
    if diff:
        raise UserError(f"{name}: made for another model ({', '.join(diff)} in the capture of {res.name})")
    if plan.windows is not None:
        want = [res.sliding_window if t.startswith("sliding") else None for t in res.layer_types]
        if [plan.windows[l] for l in res.layers] != want:
            raise UserError(f"{name}: made for another model (sliding windows {plan.windows} vs the capture's layer "
                            "types)")
    if plan.n and plan.n != res.n:
        raise UserError(f"{name}: made for {plan.n} tokens; this capture has {res.n} (plan one for --tokens {res.n})")
    return plan


def _grid(values) -> list:
    return [[None if v is None or (isinstance(v, float) and not math.isfinite(v)) else round(float(v), 5) for v in row]
            for row in np.asarray(values, dtype=np.float64).tolist()]


def _profile_bins(n: int) -> np.ndarray:
    """Edges of the distance bins: 0, 1, ..., PROFILE_EXACT, then log-spaced up to n."""
    tail = np.round(np.logspace(np.log10(PROFILE_EXACT + 1), np.log10(max(n, PROFILE_EXACT + 2)), 96)).astype(int)
    return np.unique(np.concatenate([np.arange(PROFILE_EXACT + 1), tail, [n]]).clip(0, n))


def _fit(res, target: float):
    """Per head the fit for ``target`` of the mass: w, num_pos, its columns and the mass it captures."""
    w, num_pos, _ = res.choose(target)  # (L, H)
    L, H = w.shape
    ws, nps = list(res.fit.ws), list(res.fit.num_pos)
    out = [[None] * H for _ in range(L)]
    for l in range(L):
        for h in range(H):
            if w[l, h] < 0:
                out[l][h] = {"w": -1, "num_pos": 0, "columns": [], "mass": None}
                continue
            a, b = ws.index(int(w[l, h])), nps.index(int(num_pos[l, h]))
            cols = [int(c) for c in res.fit.columns[l, h, a, : int(num_pos[l, h])] if c >= 0]
            out[l][h] = {"w": int(w[l, h]), "num_pos": int(num_pos[l, h]), "columns": cols,
                         "mass": round(float(res.fit.mass_captured[l, h, a, b]), 4)}
    return out


def long_explorer_payload(res, detectors=None, plan=None, *, target: float = 0.95, overview_factor: int = 1) -> dict:
    """The page's data (module docstring).  ``detectors``: ``DetectorScores`` or None; ``plan``: a checked ``Plan`` or
    None; ``overview_factor`` f pools the capture's pooled map further, f × f groups per cell (``pool_tokens``: rows
    keep their sum)."""

    L, H, n = res.column.shape
    roles = [[None] * H for _ in range(L)]
    row_of = {l: k for k, l in enumerate(res.layers)}
    for r in res.roles:
        roles[row_of[r.layer]][r.head] = r.to_dict()
    fit = _fit(res, target)
    far_d = res.far_distance()
    ws = list(res.fit.ws)
    band = res.fit.mass_captured[:, :, ws.index(BAND_W), 0] if BAND_W in ws else res.fit.mass_captured[:, :, -1, 0]
    reach = res.reach()
    top_cols, top_share = res.top_columns(4)
    scores = {
        "sink": {"label": "sink mass (mean share on the best sink token)",
                 "values": _grid([[r["sink"] for r in row] for row in roles])},
        "band": {"label": f"band mass within |i − j| ≤ {BAND_W if BAND_W in ws else ws[-1]}", "values": _grid(band)},
        "w": {"label": f"fitted band w for {target:.0%} of the mass (log; full = n)", "log": True,
              "values": _grid([[n if f["w"] < 0 else f["w"] for f in row] for row in fit])},
        "far": {"label": f"share of mass beyond distance {far_d}", "values": _grid(res.far_share(far_d))},
        "entropy": {"label": "entropy / ln(keys seen) (1: uniform)",
                    "values": _grid([[r["entropy_norm"] for r in row] for row in roles])},
        "positional": {"label": "positional (share of rows whose argmax is at the head's offset)",
                       "values": _grid([[r["positional"] for r in row] for row in roles])},
    }
    named = []
    if detectors is not None:
        for name, a in detectors.scores.items():
            th = detectors.thresholds.get(name)
            scores["det:" + name] = {"label": f"detector {name}" + (f" (threshold {th:g})" if th is not None else ""),
                                     "values": _grid(a[res.layers]), "threshold": th, "detector": True}
        named = [x for x in detectors.named if x.get("layer") in row_of]
    heads = [[{**{k: roles[l][h][k] for k in ("role", "offset", "sink", "sink_token", "positional", "entropy",
                                              "entropy_norm", "confidence")},
               "sink_token": display_token(roles[l][h]["sink_token"]), "fit": fit[l][h], "reach": int(reach[l, h]),
               "label": (roles[l][h]["role"] if detectors is None
                         else detectors.label(res.layers[l], h, roles[l][h]["role"])),
               "named_by": ([] if detectors is None
                            else [[d, round(v, 4), th] for d, v, th in detectors.named_by(res.layers[l], h)]),
               "top_columns": [[int(j), round(float(s), 4)] for j, s in zip(top_cols[l, h], top_share[l, h])]}
              for h in range(H)] for l in range(L)]
    if plan is not None:
        for k, l in enumerate(res.layers):
            for h in range(H):
                hp = plan.heads[l][h]
                heads[k][h]["plan"] = {"w": hp.w, "columns": hp.columns, "dynamic": int(hp.dynamic), "full": hp.is_full}

    total = np.maximum(res.column.sum(-1, keepdims=True), 1e-30)  # (L, H, 1): n for softmax rows
    edges = _profile_bins(n)
    dist = res.distance_profile()  # (L, H, n)
    profile = np.add.reduceat(dist, edges[:-1], axis=-1) / total  # (L, H, bins) share of mass per bin
    cg = math.ceil(n / COLUMN_BINS)
    col = np.pad(res.column, [(0, 0), (0, 0), (0, (-n) % cg)]).reshape(L, H, -1, cg).sum(-1) / total  # (L, H, ⌈n/cg⌉)
    blobs = {"profile": encode_log_bytes(profile, lo=-12.0), "columns": encode_log_bytes(col, lo=-12.0)}
    tiles = None
    pool = res.pool or 1
    if res.pooled is not None:
        pooled = res.pooled  # (L, H, G, G)
        if overview_factor > 1:
            from attnlab.viz.explorer import pool_tokens

            G = pooled.shape[-1]
            pooled = pool_tokens(pooled, [""] * G, [""] * G, math.ceil(G / overview_factor))[0]  # (L, H, ⌈G/f⌉, ⌈G/f⌉)
            pool *= overview_factor
        blobs["pooled"] = encode_log_bytes(pooled)
    if res.window_maps is not None:
        blobs["window"] = encode_log_bytes(res.window_maps)  # (L, H, b − a, b − a)
    if res.tiles is not None:
        blobs["tiles"] = encode_log_bytes(res.tiles)  # (L, H, K, T, T)
        tiles = res.tile_pos.tolist()  # (L, H, K, 2)
    return {
        "format": FORMAT, "version": 1,
        "model": res.name, "n": n, "layers": list(res.layers), "num_heads": H, "num_layers": model_layers(res),
        "layer_types": list(res.layer_types), "sliding_window": res.sliding_window, "target": target,
        "tokens": display_tokens(res.tokens),
        "pool": pool, "window": list(res.window) if res.window else None,
        "tile": None if res.tiles is None else int(res.tiles.shape[-1]), "tile_pos": tiles,
        "profile_edges": edges.tolist(), "column_group": cg,
        "heads": heads, "scores": scores, "named": named,
        "detectors": [] if detectors is None else sorted(detectors.scores),
        "detectors_file": None if detectors is None else detectors.source,   # which heads file named the heads
        "plan": None if plan is None else {"method": plan.method, "budget": plan.budget, "n": plan.n},
        "blobs": blobs,
    }


def render_long_explorer(payload: dict) -> str:
    """The HTML page with CSS, renderer and ``payload`` inlined (deterministic text)."""
    from attnlab.viz.explorer import render_explorer

    return render_explorer(payload, "long_explorer")


def write_long_explorer(res, path: str | os.PathLike, detectors=None, plan=None, *, target: float = 0.95,
                        max_bytes: int = MAX_BYTES) -> Path:
    """Write the long-input explorer of ``res`` to one HTML file (atomic), at most ``max_bytes``: above it the
    overview is pooled by 2, 4, ... (the zoom tiles and window stay exact)."""
    f = 1
    while True:
        html = render_long_explorer(long_explorer_payload(res, detectors, plan, target=target, overview_factor=f))
        G = 0 if res.pooled is None else math.ceil(res.pooled.shape[-1] / f)
        if len(html.encode("utf-8")) <= max_bytes or G <= 16:
            return write_text_atomic(Path(path), html)
        f *= 2

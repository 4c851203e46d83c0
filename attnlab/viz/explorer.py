"""A self-contained HTML attention explorer: one file, JavaScript inlined, no network.

Two separate parts:

* ``explorer_payload(maps, roles)`` → a JSON-ready dict (the data).  Weights
  of each (sentence, kind) are quantised to uint16, q = round(65535 · w_ij)
  (error ≤ 7.7e-6), and stored as base64 little-endian bytes of the
  (L, H, n_q, n_k) array; ids are deterministic (``s0``, ``s0/encoder``,
  ...), keys sorted, so the same maps give the same bytes (snapshot-testable).
  Long inputs: above ``max_tokens`` tokens, consecutive tokens are pooled in
  groups of g = ⌈n / max_tokens⌉ — keys summed, queries averaged, so every row
  still sums to 1 — and labelled ``first…last``.  Labels show the tokens'
  text, not the tokenizer's markers (``attnlab.viz.labels.display_token``).
* ``render_explorer(payload)`` → the HTML text: the template ``explorer.html``
  with ``explorer.css``, ``explorer.js`` (the renderer) and the payload
  inlined.  ``write_explorer(maps, path, roles)`` does both and writes the file.

The page: choose sentence, kind, layer, head; a heatmap (hover shows the two
tokens and the weight), a lines view (bertviz's head view), a layer × head
grid coloured by role with the chosen head's role badge and scores; large
matrices scroll.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np

from attnlab.analysis.attention_maps import KIND_SIDES, AttentionMaps
from attnlab.atomic import write_text_atomic
from attnlab.viz.labels import display_tokens

__all__ = ["explorer_payload", "render_explorer", "write_explorer", "pool_tokens"]

FORMAT = "attnlab.explorer"


def pool_tokens(w: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], max_tokens: int):
    """Downsample a long (…, n_q, n_k) matrix to at most ``max_tokens`` per side.

    With g = ⌈n / max_tokens⌉ per side, block (I, J) gets
        w'_IJ = (1/|I|) Σ_{i∈I} Σ_{j∈J} w_ij
    (queries averaged, keys summed: rows keep their sum).  Returns
    (w', q labels, k labels, g_q, g_k).
    """
    # w: (..., n_q, n_k)
    if max_tokens < 1:
        raise ValueError(f"max_tokens: must be ≥ 1, got {max_tokens}")
    n_q, n_k = w.shape[-2:]
    g_q, g_k = math.ceil(n_q / max_tokens), math.ceil(n_k / max_tokens)
    if g_q == 1 and g_k == 1:
        return w, list(q_tokens), list(k_tokens), 1, 1
    N_q, N_k = math.ceil(n_q / g_q), math.ceil(n_k / g_k)
    pad = [(0, 0)] * (w.ndim - 2) + [(0, N_q * g_q - n_q), (0, N_k * g_k - n_k)]
    wp = np.pad(w, pad).reshape(*w.shape[:-2], N_q, g_q, N_k, g_k)  # (..., N_q, g_q, N_k, g_k)
    rows = np.minimum(g_q, n_q - np.arange(N_q) * g_q)  # real queries per block: (N_q,)
    pooled = wp.sum((-3, -1)) / rows[:, None]

    def labels(toks, g):
        return [toks[a] if g == 1 or a == min(a + g, len(toks)) - 1 else f"{toks[a]}…{toks[min(a + g, len(toks)) - 1]}"
                for a in range(0, len(toks), g)]

    return pooled, labels(list(q_tokens), g_q), labels(list(k_tokens), g_k), g_q, g_k


def _encode(w: np.ndarray) -> str:
    """base64 of round(65535 · w) as little-endian uint16."""
    q = np.round(np.clip(w, 0.0, 1.0) * 65535.0).astype("<u2")
    return base64.b64encode(q.tobytes()).decode("ascii")


def explorer_payload(maps: AttentionMaps, roles=None, *, max_tokens: int = 160) -> dict:
    """The explorer's data: tokens, quantised weights, shapes and roles (see module docstring).

    ``roles``: the ``HeadRole`` list of ``attnlab.analysis.roles.head_roles``
    (or None: no badges).
    """
    sentences, weights = [], {}
    for s, sent in enumerate(maps):
        entry: dict = {"id": f"s{s}", "text": sent.text, "target": sent.target, "tokens": {}}
        pooled_by = 1
        for kind in maps.kinds:
            q_side, k_side = KIND_SIDES[kind]
            w, q_tok, k_tok, g_q, g_k = pool_tokens(sent.weights[kind], display_tokens(sent.tokens[q_side]),
                                                    display_tokens(sent.tokens[k_side]), max_tokens)
            entry["tokens"][q_side], entry["tokens"][k_side] = q_tok, k_tok
            pooled_by = max(pooled_by, g_q, g_k)
            weights[f"s{s}/{kind}"] = _encode(w)
        if pooled_by > 1:
            entry["pooled"] = pooled_by
        sentences.append(entry)
    role_table = None
    if roles:
        role_table = {}
        for kind in maps.kinds:
            L, H = maps.shape(kind)
            grid: list[list[dict | None]] = [[None] * H for _ in range(L)]
            for r in roles:
                if r.kind == kind:
                    grid[r.layer][r.head] = r.to_dict()
            role_table[kind] = grid
    return {
        "format": FORMAT,
        "version": 1,
        "model": {k: v for k, v in maps.model.items() if isinstance(v, (str, int, float, bool)) or v is None},
        "kinds": list(maps.kinds),
        "shape": {k: list(maps.shape(k)) for k in maps.kinds},
        "sentences": sentences,
        "weights": weights,
        "roles": role_table,
    }


def _asset(name: str) -> str:
    return resources.files("attnlab.viz").joinpath(name).read_text(encoding="utf-8")


def render_explorer(payload: dict, page: str = "explorer") -> str:
    """The HTML page ``page``.html with its .css, ``dom.js`` + its .js renderer (and the scripts its ``/*JS:name.js*/``
    lines name) and ``payload`` inlined (deterministic text)."""
    data = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    data = data.replace("</", "<\\/").replace("<!--", "<\\!--")  # cannot close the <script> element
    # a page's further scripts
    html = re.sub(r"/\*JS:([\w.]+)\*/", lambda m: _asset(m.group(1)), _asset(f"{page}.html"))
    return (html.replace("/*CSS*/", _asset(f"{page}.css"))
            .replace("/*DOM*/", _asset("dom.js"))
            .replace("/*JS*/", _asset(f"{page}.js"))
            .replace("/*DATA*/", data))


def write_explorer(maps: AttentionMaps, path: str | os.PathLike, roles=None, *, max_tokens: int = 160) -> Path:
    """Write the explorer for ``maps`` (with role badges when ``roles`` are given) to one HTML file."""
    path = Path(path)
    html = render_explorer(explorer_payload(maps, roles, max_tokens=max_tokens))
    return write_text_atomic(path, html)

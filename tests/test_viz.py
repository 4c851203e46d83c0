"""Heatmaps (PNG/SVG, grids, shared scale) and the explorer's payload and HTML (deterministic, self-contained)."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

from attnlab.analysis.attention_maps import AttentionMaps, SentenceAttention
from attnlab.analysis.roles import head_roles
from attnlab.viz import explorer_payload, plot_grid, plot_head, render_explorer, save_figure, write_explorer
from attnlab.viz.explorer import pool_tokens


def toy_maps(n=6, m=4, L=2, H=3, seed=0):
    rng = np.random.default_rng(seed)
    src = [f"s{i}" for i in range(n - 1)] + ["</s>"]
    tgt = ["<s>"] + [f"t{j}" for j in range(m - 1)]
    def rows(*shape):
        return rng.dirichlet(np.ones(shape[-1]), size=shape[:-1]).astype(np.float32)
    w = {"encoder": rows(L, H, n, n), "decoder": np.tril(rows(L, H, m, m)), "cross": rows(L, H, m, n)}
    w["decoder"] /= w["decoder"].sum(-1, keepdims=True)
    sent = SentenceAttention(text=" ".join(src[:-1]), target=" ".join(tgt[1:]), tokens={"src": src, "tgt": tgt},
                             special={"src": [False] * (n - 1) + [True], "tgt": [True] + [False] * (m - 1)}, weights=w)
    return AttentionMaps([sent, sent], {"name": "toy"})


def test_heatmaps_png_svg(tmp_path):
    maps = toy_maps()
    png = save_figure(plot_head(maps, 0, "cross", layer=1, head=2), tmp_path / "h.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = save_figure(plot_head(maps, 0, "encoder"), tmp_path / "h.svg").read_text()
    assert "<svg" in svg and "s3" in svg  # tokens on the axes
    fig = plot_grid(maps, 0, "encoder", shared_scale=True)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 6 and len({im.get_clim() for im in images}) == 1
    assert images[0].get_clim()[1] == pytest.approx(float(maps.weights(0, "encoder").max()))
    own = [ax.images[0].get_clim() for ax in plot_grid(maps, 0, "encoder", shared_scale=False).axes if ax.images]
    assert len(set(own)) == 6
    with pytest.raises(ValueError, match="png or .svg"):
        save_figure(fig, tmp_path / "x.jpg")
    with pytest.raises(ValueError, match="layer/head"):
        plot_head(maps, 0, "encoder", layer=5)


def decode(payload, key, shape):
    q = np.frombuffer(base64.b64decode(payload["weights"][key]), dtype="<u2").reshape(shape)
    return q / 65535.0


def test_payload_values_and_roles():
    maps = toy_maps()
    roles = head_roles(maps)
    p = explorer_payload(maps, roles)
    assert p["kinds"] == ["encoder", "decoder", "cross"] and p["shape"]["cross"] == [2, 3]
    assert [s["id"] for s in p["sentences"]] == ["s0", "s1"]
    for kind in maps.kinds:
        w = maps.weights(0, kind)
        np.testing.assert_allclose(decode(p, f"s0/{kind}", w.shape), w, atol=1 / 65535)
    assert p["roles"]["encoder"][1][2]["role"] == next(r.role for r in roles if (r.kind, r.layer, r.head) == ("encoder", 1, 2))
    json.dumps(p)  # JSON-ready


def test_pooling_long_inputs():
    rng = np.random.default_rng(3)
    w = rng.dirichlet(np.ones(10), size=(2, 7))  # (2, 7, 10)
    pooled, q, k, g_q, g_k = pool_tokens(w, [f"q{i}" for i in range(7)], [f"k{j}" for j in range(10)], 4)
    assert (g_q, g_k) == (2, 3) and pooled.shape == (2, 4, 4)
    np.testing.assert_allclose(pooled.sum(-1), 1.0)  # rows still sum to 1
    np.testing.assert_allclose(pooled[0, 0, 0], w[0, :2, :3].sum() / 2)
    np.testing.assert_allclose(pooled[1, 3, 3], w[1, 6:, 9:].sum())
    assert q == ["q0…q1", "q2…q3", "q4…q5", "q6"] and k[-1] == "k9"


def test_html_self_contained_and_deterministic(tmp_path):
    maps = toy_maps()
    a = render_explorer(explorer_payload(maps, head_roles(maps)))
    b = render_explorer(explorer_payload(toy_maps(), head_roles(toy_maps())))
    assert a == b  # snapshot-stable: same maps, same bytes
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", a)  # nothing fetched from a network
    assert "/*JS*/" not in a and "/*DATA*/" not in a and "function viridis" in a
    for id_ in ("sel-sentence", "sel-kind", "sel-layer", "sel-head", "heatmap", "lines", "tooltip", "head-grid", "role"):
        assert f'id="{id_}"' in a
    data = json.loads(re.search(r'<script id="attnlab-data" type="application/json">(.*?)</script>', a, re.S).group(1))
    assert data["model"]["name"] == "toy"
    # the payload cannot close its <script> element
    evil = toy_maps()
    evil.sentences[0] = SentenceAttention(text="</script><b>x", tokens=evil[0].tokens, special=evil[0].special,
                                          weights=evil[0].weights, target=None)
    html = render_explorer(explorer_payload(evil))
    assert html.count("</script>") == 2
    path = write_explorer(maps, tmp_path / "e.html")
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")

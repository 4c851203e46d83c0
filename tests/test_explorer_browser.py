"""The HTML explorer in a real headless browser (Debian chromium driven by Playwright).

Needs /usr/bin/chromium (``apt-get install -y chromium``) or $ATTNLAB_CHROMIUM; ``make test``
installs it (.ci/browser-setup).  When it is missing the test FAILS with the install line,
unless ATTNLAB_SKIP_BROWSER is set (not "0"): ``make test`` sets it to the one-line reason
chromium could not be installed, and the tests skip with that reason (``tests/chromium_page``).
"""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.analysis.attention_maps import AttentionMaps, SentenceAttention
from attnlab.analysis.roles import head_roles
from attnlab.viz import write_explorer
from tests.chromium_page import chromium_page

pytestmark = pytest.mark.browser


def toy_maps(n: int, m: int, L: int, H: int) -> AttentionMaps:
    """Random rows (Dirichlet) for the three kinds; source ends with </s>, target starts with <s>."""
    rng = np.random.default_rng(0)
    src = [f"s{i}" for i in range(n - 1)] + ["</s>"]
    tgt = ["<s>"] + [f"t{j}" for j in range(m - 1)]
    w = {k: rng.dirichlet(np.ones(nk), size=(L, H, nq)).astype(np.float32)
         for k, (nq, nk) in {"encoder": (n, n), "decoder": (m, m), "cross": (m, n)}.items()}
    sent = SentenceAttention(text=" ".join(src[:-1]), target=" ".join(tgt[1:]), tokens={"src": src, "tgt": tgt},
                             special={"src": [False] * (n - 1) + [True], "tgt": [True] + [False] * (m - 1)}, weights=w)
    return AttentionMaps([sent], {"name": "toy"})


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    maps = toy_maps(n=9, m=5, L=2, H=3)
    path = write_explorer(maps, tmp_path_factory.mktemp("explorer") / "explorer.html", head_roles(maps))
    with chromium_page() as (pg, errors, requests):
        pg.goto(path.as_uri())
        pg.wait_for_selector("#heatmap[data-cell]")
        yield pg, maps, errors, requests


def test_loads_without_errors(page):
    pg, maps, errors, requests = page
    assert errors == [] and requests == []
    assert pg.locator("#sel-head option").count() == 3 and pg.locator("#sel-kind option").count() == 3
    assert pg.locator("#role-badge").inner_text() in {"positional", "syntactic", "rare-token", "sink", "broad", "other"}


def test_other_head_changes_drawing(page):
    pg, *_ = page
    before = pg.evaluate("document.getElementById('heatmap').toDataURL()")
    lines_before = pg.inner_html("#lines-g")
    pg.select_option("#sel-head", "2")
    after = pg.evaluate("document.getElementById('heatmap').toDataURL()")
    assert pg.get_attribute("#heatmap", "data-head") == "encoder-0-2"
    assert after != before and pg.inner_html("#lines-g") != lines_before
    pg.click("#cell-encoder-1-1")  # the role grid selects heads too
    assert pg.get_attribute("#heatmap", "data-head") == "encoder-1-1"
    assert pg.input_value("#sel-layer") == "1" and pg.input_value("#sel-head") == "1"


@pytest.mark.parametrize("kind, layer, head, i, j", [("encoder", 1, 2, 3, 5), ("cross", 0, 1, 4, 8)])
def test_hover_shows_the_value(page, kind, layer, head, i, j):
    pg, maps, errors, _ = page
    pg.select_option("#sel-kind", kind)
    pg.select_option("#sel-layer", str(layer))
    pg.select_option("#sel-head", str(head))
    d = pg.evaluate("({...document.getElementById('heatmap').dataset})")
    left, top, cell = float(d["left"]), float(d["top"]), float(d["cell"])
    pg.hover("#heatmap", position={"x": left + (j + 0.5) * cell, "y": top + (i + 0.5) * cell})
    tip = pg.inner_text("#tooltip")
    s = maps[0]
    expected = float(maps.weights(0, kind)[layer, head, i, j])
    assert f"“{s.query_tokens(kind)[i]}”" in tip and f"“{s.key_tokens(kind)[j]}”" in tip
    assert tip.endswith(f"{expected:.4f}"), (tip, expected)
    assert errors == []

"""The long-input explorer in headless Chromium, on a capture of a tiny random Gemma-3 (a sliding and a full layer).

Clicking a head, zooming a region (captured and not), a click near a tile snapping to it, the tokens' text on
the zoom's axes, hovering the tokens, switching colour scale and the grid's score, the heads named by the
detectors in the grid and the badge, every layer of a 30-layer model visible, the plan drawn; no console error,
no request, load time measured (``tests/chromium_page``).
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from tests.chromium_page import chromium_page

pytestmark = pytest.mark.browser
pytest.importorskip("transformers")

DETECTORS = ("previous-token", "duplicate-token", "induction", "sink", "retrieval")


@pytest.fixture(scope="module")
def capture():
    from attnlab.llm.heads.long_capture import capture_long
    from tests.test_llm_stream import random_text, tiny, word_tokenizer

    model = tiny("gemma")
    return model, capture_long(model, random_text(599, seed=5), tokenizer=word_tokenizer(), rows=(300, 364), pool="auto",
                               tiles=(32, 3))


def detector_file(path, L: int, H: int):
    """Scores below the thresholds but for induction at 1.2 (and a weaker duplicate-token there) and previous-token at 0.1."""
    rng = np.random.default_rng(1)
    scores = {d: rng.uniform(0, 0.3, (L, H)).round(4).tolist() for d in DETECTORS}
    scores["induction"][1][2], scores["duplicate-token"][1][2], scores["previous-token"][0][1] = 0.97, 0.6, 0.9
    path.write_text(json.dumps({"model": "tiny-gemma", "n": 600, "detectors": scores, "thresholds": {d: 0.5 for d in DETECTORS},
                                "named": [{"layer": 1, "head": 2, "detector": "induction", "score": 0.97},
                                          {"layer": 1, "head": 2, "detector": "duplicate-token", "score": 0.6},
                                          {"layer": 0, "head": 1, "detector": "previous-token", "score": 0.9}]}))
    return path


@pytest.fixture(scope="module")
def page(capture, tmp_path_factory):
    from attnlab.llm.heads.heads_file import read_detector_scores
    from attnlab.llm.plans.plan import HeadPlan, Plan, model_shape
    from attnlab.support import Support
    from attnlab.viz.long_explorer import check_plan, write_long_explorer

    model, res = capture
    tmp = tmp_path_factory.mktemp("long-explorer")
    detectors = read_detector_scores(detector_file(tmp / "heads.json", 2, 4), 2, 4)
    plan = Plan.uniform(model_shape(model), HeadPlan(support=Support(w=16, columns=np.array([0, 5])), dynamic=2), "test", 0.5, res.n)
    path = write_long_explorer(res, tmp / "explorer.html", detectors, check_plan(plan, res))
    with chromium_page() as (pg, errors, requests):
        t0 = time.perf_counter()
        pg.goto(path.as_uri())
        pg.wait_for_selector("body[data-ready]")
        load_s = time.perf_counter() - t0
        yield pg, res, errors, requests, load_s


def overview_png(pg) -> str:
    return pg.evaluate("document.getElementById('overview').toDataURL()")


def click_token(pg, i: int, j: int):
    """Click the overview at query i, key j (token coordinates)."""
    d = pg.evaluate("({...document.getElementById('overview').dataset})")
    s = float(d["size"]) / pg.evaluate("JSON.parse(document.getElementById('attnlab-data').textContent).n")
    pg.click("#overview", position={"x": float(d["left"]) + (j + 0.5) * s, "y": float(d["top"]) + (i + 0.5) * s})


def test_loads_offline_fast_and_without_errors(page):
    pg, res, errors, requests, load_s = page
    ready_ms = int(pg.get_attribute("body", "data-ready"))
    print(f"long explorer: loaded in {load_s:.2f} s (page ready at {ready_ms} ms)")
    assert errors == [] and requests == []
    assert load_s < 3 and ready_ms < 3000
    assert pg.locator("#head-grid td.gcell").count() == 2 * 4
    assert "no roles" not in pg.inner_text("#head-grid") + pg.inner_text("#head-info")
    assert pg.locator("#sel-score option").count() == 1 + 6 + len(DETECTORS)
    assert pg.input_value("#sel-score") == "role"  # the grid starts on the heads' names (the detectors', else the roles)


def test_click_a_head(page):
    pg, res, errors, *_ = page
    before = overview_png(pg)
    pg.click("#cell-1-2")
    assert pg.get_attribute("#overview", "data-head") == "1-2" and pg.get_attribute("#profile", "data-head") == "1-2"
    assert pg.input_value("#sel-layer") == "1" and pg.input_value("#sel-head") == "2"
    assert overview_png(pg) != before
    assert pg.inner_text("#role-badge") == "induction"  # the detectors' name, not the capture's role
    assert pg.inner_text("#capture-badge") == "on this text: " + res.roles[1 * 4 + 2].role
    info = pg.inner_text("#head-info")
    assert "plan (test" in info and "detector: induction" in info and "0.9700 ✓" in info
    assert "named by\ninduction 0.9700 ≥ 0.5000, duplicate-token 0.6000 ≥ 0.5000" in info
    assert "chosen" in pg.get_attribute("#cell-1-2", "class")
    assert errors == []


def test_zoom_into_a_captured_tile_shows_exact_tokens(page):
    pg, res, errors, *_ = page
    pg.click("#cell-1-2")
    r0, c0 = (int(x) for x in res.tile_pos[1, 2, 0])
    click_token(pg, r0 + 5, c0 + 5)
    assert pg.get_attribute("#zoom", "data-region") == f"{r0}:{r0 + 32},{c0}:{c0 + 32}"
    assert pg.get_attribute("#zoom", "data-captured") == "1.0000"
    d = pg.evaluate("({...document.getElementById('zoom').dataset})")
    a, b = 7, 3
    pg.hover("#zoom", position={"x": float(d["left"]) + (b + 0.5) * float(d["cell"]), "y": float(d["top"]) + (a + 0.5) * float(d["cell"])})
    tip = pg.inner_text("#tooltip")
    from attnlab.viz.labels import display_token

    assert f"query {r0 + a} “{display_token(res.tokens[r0 + a])}”" in tip and f"key {c0 + b} “{display_token(res.tokens[c0 + b])}”" in tip
    value = float(tip.split("≈ ")[1].split("\n")[0])
    assert value == pytest.approx(float(res.tiles[1, 2, 0, a, b]), rel=0.04)
    assert errors == []


def test_drag_a_region_and_a_region_outside_the_captured_rows(page):
    pg, res, errors, *_ = page
    pg.click("#cell-1-0")
    d = pg.evaluate("({...document.getElementById('overview').dataset})")
    s = float(d["size"]) / res.n
    x0, y0 = float(d["left"]), float(d["top"])
    pg.mouse.move(x0 + 0, y0 + 0)  # page coordinates of the canvas
    box = pg.locator("#overview").bounding_box()
    pg.mouse.move(box["x"] + x0 + 300.5 * s, box["y"] + y0 + 310.5 * s)
    pg.mouse.down()
    pg.mouse.move(box["x"] + x0 + 340.5 * s, box["y"] + y0 + 350.5 * s, steps=4)
    pg.mouse.up()
    region = pg.get_attribute("#zoom", "data-region")
    (a, b), (c, e) = [tuple(int(v) for v in part.split(":")) for part in region.split(",")]
    assert abs(a - 310) <= 2 and abs(b - 351) <= 2 and abs(c - 300) <= 2 and abs(e - 341) <= 2
    assert float(pg.get_attribute("#zoom", "data-captured")) == 1.0  # inside the window 300:364
    assert "missing" not in (pg.get_attribute("#zoom-note", "class") or "")
    # far below the diagonal, away from the window and this head's tiles: nothing exact there
    taken = [(int(p[0]), int(p[1])) for p in res.tile_pos[1, 0] if p[0] >= 0]
    i, j = next((i, j) for i in range(560, 600, 8) for j in range(100, 300, 8)
                if not any(r <= i + dy < r + 32 and c <= j + dx < c + 32 for r, c in taken for dy in (-16, 15) for dx in (-16, 15)))
    click_token(pg, i, j)
    assert "outside the captured rows" in pg.inner_text("#zoom-note") and "--rows" in pg.inner_text("#zoom-note")
    assert pg.get_attribute("#zoom", "data-captured") == "0.0000"
    assert errors == []


def test_switch_colour_scale(page):
    pg, res, errors, *_ = page
    assert pg.get_attribute("#overview", "data-scale") == "log"  # the default for long inputs
    click_token(pg, 330, 320)  # inside the window 300:364: an exact zoom
    assert pg.get_attribute("#zoom", "data-captured") == "1.0000"
    before, zoom_before = overview_png(pg), pg.evaluate("document.getElementById('zoom').toDataURL()")
    pg.check("#scale-linear")
    assert pg.get_attribute("#overview", "data-scale") == "linear" and pg.get_attribute("#zoom", "data-scale") == "linear"
    assert overview_png(pg) != before and pg.evaluate("document.getElementById('zoom').toDataURL()") != zoom_before
    assert "linear colour" in pg.inner_text("#overview-note")
    pg.check("#scale-log")
    assert overview_png(pg) == before and "log colour" in pg.inner_text("#overview-note")
    assert errors == []


def test_grid_colours_by_the_chosen_score(page):
    pg, res, errors, *_ = page
    cell = "document.getElementById('cell-1-2').style.background"
    induction = pg.evaluate(cell)
    assert "underline" in pg.evaluate("getComputedStyle(document.getElementById('cell-1-2')).textDecorationLine")
    pg.select_option("#sel-score", "det:induction")
    assert pg.evaluate(cell) != induction
    pg.select_option("#sel-score", "sink")
    assert "sink mass" in pg.inner_text("#grid-legend")
    assert errors == []


def test_badges_and_grid_agree_with_the_detectors(page, tmp_path):
    """Every head's grid cell and badge carry the detectors' name where one names it, else the capture's role."""
    pg, res, errors, *_ = page
    from attnlab.llm.heads.heads_file import read_detector_scores

    det = read_detector_scores(detector_file(tmp_path / "heads.json", 2, 4), 2, 4)
    pg.select_option("#sel-score", "role")
    for k, l in enumerate(res.layers):
        for h in range(4):
            want = det.label(l, h, res.roles[k * 4 + h].role)
            assert pg.get_attribute(f"#cell-{l}-{h}", "data-label") == want
    assert pg.inner_text("#cell-1-2") == "I" and pg.inner_text("#cell-0-1") == "←"  # capitals: named by a detector
    assert "induction 1" in pg.inner_text("#grid-legend") and "previous-token 1" in pg.inner_text("#grid-legend")
    pg.click("#cell-0-1")
    assert pg.inner_text("#role-badge") == "previous-token"
    pg.click("#cell-0-0")  # named by none: the capture's role, no second badge
    assert pg.inner_text("#role-badge") == res.roles[0].role and pg.locator("#capture-badge").count() == 0
    assert errors == []


def test_a_click_near_a_tile_snaps_to_it_and_the_axes_show_the_tokens(page):
    pg, res, errors, *_ = page
    from attnlab.viz.labels import display_tokens

    pg.click("#cell-1-2")
    d = pg.evaluate("({...document.getElementById('overview').dataset})")
    s = float(d["size"]) / res.n  # pixels per token
    regions = [(300, 300, 64)] + [(int(r), int(c), 32) for r, c in res.tile_pos[1, 2] if r >= 0]
    near = None
    for r0, c0, size in regions[1:]:  # a point outside a tile, within 10 px of it and nearer to it than to any other region
        i, j = r0 - int(6 / s), c0 + size // 2
        dist = [max(max(r - i, 0, i - (r + z - 1)), max(c - j, 0, j - (c + z - 1))) for r, c, z in regions]
        if i >= 0 and min(dist) == dist[regions.index((r0, c0, size))] > 0 and sorted(dist)[1] > dist[regions.index((r0, c0, size))]:
            near = (i, j, r0, c0)
            break
    assert near is not None, "no tile to miss"
    i, j, r0, c0 = near
    click_token(pg, i, j)
    assert pg.get_attribute("#zoom", "data-region") == f"{r0}:{r0 + 32},{c0}:{c0 + 32}"  # snapped: the tile, all of it exact
    assert pg.get_attribute("#zoom", "data-captured") == "1.0000"
    assert int(pg.get_attribute("#zoom", "data-step")) == 1  # a tile: every token's text on both axes
    tokens = display_tokens(res.tokens)
    assert json.loads(pg.get_attribute("#zoom", "data-row-tokens")) == tokens[r0 : r0 + 32]
    assert json.loads(pg.get_attribute("#zoom", "data-col-tokens")) == tokens[c0 : c0 + 32]
    ink = pg.evaluate("""(() => { const c = document.getElementById('zoom'), d = c.dataset, r = window.devicePixelRatio || 1;
        const px = c.getContext('2d').getImageData(0, Math.round(+d.top * r), Math.round((+d.left - 4) * r), Math.round(32 * +d.cell * r)).data;
        let k = 0; for (let x = 3; x < px.length; x += 4) k += px[x] > 0; return k; })()""")
    assert ink > 200  # the row labels are drawn, not only listed
    buttons = pg.locator("#regions button.region")
    assert buttons.count() == len(regions) and "on" in (buttons.nth(regions.index((r0, c0, 32))).get_attribute("class") or "")
    buttons.nth(0).click()  # the window's button
    assert pg.get_attribute("#zoom", "data-region") == "300:364,300:364"
    assert errors == []


def test_every_layer_of_a_30_layer_model_is_visible(page, tmp_path):
    """SmolLM2 and Gemma have 30 layers: the grid shows all of them, none scrolled out of sight."""
    import torch
    import transformers

    from attnlab.llm.heads.long_capture import capture_long
    from attnlab.viz.long_explorer import write_long_explorer
    from tests.test_llm_stream import WORDS, random_text, word_tokenizer

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(WORDS) + 3, hidden_size=72, intermediate_size=32, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=512)
    res = capture_long(transformers.LlamaForCausalLM(cfg).eval(), random_text(299, seed=1), tokenizer=word_tokenizer(), pool="auto")
    path = write_long_explorer(res, tmp_path / "explorer.html")
    pg, errors = page[0].context.new_page(), []  # a second tab of the module's browser
    pg.on("pageerror", lambda e: errors.append(str(e)))
    try:
        pg.goto(path.as_uri())
        pg.wait_for_selector("body[data-ready]")
        assert pg.locator("#head-grid td.gcell").count() == 30 * 9
        grid = pg.locator("#head-grid").bounding_box()
        last = pg.locator("#cell-29-8").bounding_box()
        assert last["y"] + last["height"] <= grid["y"] + grid["height"] + 1  # inside the grid's box: not cut off
        assert pg.evaluate("document.getElementById('head-grid').scrollHeight <= document.getElementById('head-grid').clientHeight + 1")
        pg.click("#cell-29-8")
        assert pg.get_attribute("#overview", "data-head") == "29-8"
        assert errors == []
    finally:
        pg.close()

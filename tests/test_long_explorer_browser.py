"""The long-input explorer in headless Chromium, on a capture of a tiny random Gemma-3 (a sliding and a full layer).

Clicking a head, zooming a region (captured and not), hovering the tokens, switching colour scale and the
grid's score, the plan drawn; no console error, no request, load time measured (``tests/chromium_page``).
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
    rng = np.random.default_rng(1)
    scores = {d: rng.uniform(0, 1, (L, H)).round(4).tolist() for d in DETECTORS}
    scores["induction"][1][2] = 0.97
    path.write_text(json.dumps({"model": "tiny-gemma", "n": 600, "detectors": scores, "thresholds": {d: 0.5 for d in DETECTORS},
                                "named": [{"layer": 1, "head": 2, "detector": "induction", "score": 0.97}]}))
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
    assert pg.input_value("#sel-score") == "det:induction"  # detectors given: the grid starts on induction


def test_click_a_head(page):
    pg, res, errors, *_ = page
    before = overview_png(pg)
    pg.click("#cell-1-2")
    assert pg.get_attribute("#overview", "data-head") == "1-2" and pg.get_attribute("#profile", "data-head") == "1-2"
    assert pg.input_value("#sel-layer") == "1" and pg.input_value("#sel-head") == "2"
    assert overview_png(pg) != before
    assert pg.inner_text("#role-badge") == res.roles[1 * 4 + 2].role
    info = pg.inner_text("#head-info")
    assert "plan (test" in info and "detector: induction" in info and "0.9700 ✓" in info
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
    pg.select_option("#sel-score", "role")
    assert pg.evaluate(cell) != induction
    pg.select_option("#sel-score", "sink")
    assert "sink mass" in pg.inner_text("#grid-legend")
    assert errors == []

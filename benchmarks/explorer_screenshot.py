"""A screenshot of the long-input explorer (``OUT/explorer.html`` of ``attnlab attention --file``) with one head chosen
and its best zoom tile open, in headless Chromium (the browser tests' ``tests/chromium_page``), and what the page
shows for it printed: the head's badge, the grid's labels, the zoom's region and the tokens on its axes.

    python benchmarks/explorer_screenshot.py runs/explorer-8k/explorer.html --head 18.6 --out docs/img/explorer-8k.png

The PNG is reduced to a 256-colour palette (Pillow) to stay small.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page", type=Path, help="an explorer.html of `attnlab attention --file`")
    ap.add_argument("--head", default="0.0", help="LAYER.HEAD to choose (default 0.0)")
    ap.add_argument("--tile", type=int, default=1, help="which of the head's captured regions to zoom into (buttons, 0: the window)")
    ap.add_argument("--out", type=Path, required=True, help="the PNG to write")
    ap.add_argument("--width", type=int, default=1560, help="viewport width in pixels")
    ap.add_argument("--height", type=int, default=1400, help="viewport height in pixels")
    a = ap.parse_args(argv)
    if not a.page.is_file():
        print(f"explorer_screenshot: {a.page}: no such file", file=sys.stderr)
        return 2
    try:
        layer, head = (int(x) for x in a.head.split("."))
    except ValueError:
        print(f"explorer_screenshot: --head {a.head!r}: expected LAYER.HEAD, e.g. 18.6", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from PIL import Image

    from tests.chromium_page import chromium_page

    with chromium_page(viewport=(a.width, a.height)) as (pg, errors, _):
        t0 = time.perf_counter()
        pg.goto(a.page.resolve().as_uri())
        pg.wait_for_selector("body[data-ready]", timeout=120_000)
        print(f"page {a.page} ({a.page.stat().st_size / 1e6:.1f} MB) ready in {time.perf_counter() - t0:.1f} s")
        if pg.locator(f"#cell-{layer}-{head}").count() == 0:
            print(f"explorer_screenshot: --head {a.head}: no such head on this page", file=sys.stderr)
            return 2
        pg.click(f"#cell-{layer}-{head}")
        buttons = pg.locator("#regions button.region")
        if buttons.count() > a.tile:
            buttons.nth(a.tile).click()
        labels = Counter(pg.evaluate("[...document.querySelectorAll('#head-grid td.gcell')].map(td => td.dataset.label)"))
        print("grid labels:", ", ".join(f"{k} {v}" for k, v in labels.most_common()))
        print("badge:", pg.inner_text("#role-badge"), "|", pg.inner_text("#capture-badge") if pg.locator("#capture-badge").count() else "")
        z = pg.evaluate("({...document.getElementById('zoom').dataset})")
        print(f"zoom: region {z['region']}, captured {z['captured']}, a token's text every {z['step']} rows and keys")
        print("rows:", " ".join(json.loads(z["rowTokens"])[:16]), "…")
        print("keys:", " ".join(json.loads(z["colTokens"])[:16]), "…")
        print("zoom note:", pg.inner_text("#zoom-note"))
        png = pg.screenshot(full_page=False)
        if errors:
            print("page errors:", errors, file=sys.stderr)
    img = Image.open(io.BytesIO(png)).convert("RGB").quantize(256)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    img.save(a.out, optimize=True)
    print(f"wrote {a.out} ({a.out.stat().st_size / 1e3:.0f} KB, {img.width} × {img.height})")
    return 1 if errors else 0   # the page said errors (printed above): the screenshot is not of a working explorer


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

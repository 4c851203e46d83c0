"""One headless Chromium page on a local HTML file, for the browser tests (Debian chromium driven by Playwright).

``chromium_page(path)`` yields ``(page, errors, requests)``: console errors and page errors as text, and
every request that is not a file: or data: URL (an offline page makes none).  Skips with the reason when
ATTNLAB_SKIP_BROWSER is set (not "0"); FAILS with the install line when chromium is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("ATTNLAB_CHROMIUM", "/usr/bin/chromium")


def require_chromium() -> None:
    reason = os.environ.get("ATTNLAB_SKIP_BROWSER", "")
    if reason not in ("", "0"):
        pytest.skip("ATTNLAB_SKIP_BROWSER=1" if reason == "1" else f"chromium could not be installed: {reason}")
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        pytest.fail(f"chromium not found at {CHROMIUM}: install it (apt-get install -y chromium) "
                    "or set ATTNLAB_SKIP_BROWSER=1 to skip the browser tests", pytrace=False)


@contextlib.contextmanager
def chromium_page(viewport=(1400, 1000)):
    """A fresh page (not yet navigated) and the lists its listeners fill."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            tempfile.mkdtemp(prefix="attnlab-chromium-"), executable_path=CHROMIUM, headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            viewport={"width": viewport[0], "height": viewport[1]},
        )
        try:
            pg = ctx.new_page()
            pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:", "blob:")) else None)
            yield pg, errors, requests
        finally:
            ctx.close()

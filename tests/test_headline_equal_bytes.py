"""The headline figure at equal KV bytes: x is each method's resident + stored bytes over full attention's resident
bytes on the same prompts, on both models' panels, and the caption and axis say so (benchmarks/headline_figure.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.headline_figure import XLABEL, draw, panel_data, points  # noqa: E402
from benchmarks.results_summary import tally_rows  # noqa: E402
from tests.test_first_results import _folders  # noqa: E402


def test_x_is_resident_plus_stored_over_full_on_both_models(tmp_path):
    cells = tally_rows(_folders(tmp_path))
    for model, (resident, stored, snapkv) in {"smollm2-135m": (20, 70, 10), "gemma3-270m": (50, 50, 30)}.items():
        tallies, fulls, _, _ = panel_data(cells, model)
        xs = points(tallies, fulls)
        assert xs["attnlab"] == pytest.approx(((resident + stored) / 100, resident / 100))   # (x, hollow point)
        assert xs["snapkv"] == pytest.approx((snapkv / 100, snapkv / 100))                    # nothing stored aside
        assert xs["full"] == pytest.approx((1.0, 1.0))


def test_caption_and_axis_say_what_x_is(tmp_path):
    caption = draw(tally_rows(_folders(tmp_path)), tmp_path / "h.png")
    assert (tmp_path / "h.png").is_file()
    assert "at equal KV bytes" in caption and "resident after the prefill plus what it stores aside" in caption
    assert "Wilson" in caption and "hollow point: the resident bytes alone" in caption
    assert "resident + stored aside" in XLABEL

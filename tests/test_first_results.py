"""The headline of the results: the Wilson interval, the summary a row per method, the figure, the header."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlab.llm.eval.wilson import interval_text, separated, wilson  # noqa: E402
from benchmarks import results  # noqa: E402
from benchmarks.results_headline import BEGIN, END, headline, in_readme, models_line  # noqa: E402
from benchmarks.results_summary import method_tallies, summary_table, tally_rows, verdict  # noqa: E402

# --- the Wilson interval -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, n, lo, hi", [
    (81, 263, 0.2553, 0.3662),        # Newcombe (1998), Table I, method 3: 81/263 → 0.2553–0.3662
    (8, 10, 0.4902, 0.9433),          # scipy.stats.binomtest(8, 10).proportion_ci(method="wilson")
    (10, 10, 0.7225, 1.0),
    (0, 10, 0.0, 0.2775),
])
def test_wilson_against_known_values(k, n, lo, hi):
    got = wilson(k, n)
    assert got == pytest.approx((lo, hi), abs=5e-5)


def test_wilson_narrows_with_prompts_and_holds_the_estimate():
    for k, n in [(3, 10), (30, 100), (300, 1000)]:
        lo, hi = wilson(k, n)
        assert lo < k / n < hi
    widths = [hi - lo for lo, hi in (wilson(3, 10), wilson(30, 100), wilson(300, 1000))]
    assert widths[0] > widths[1] > widths[2]


def test_wilson_refuses_what_is_not_a_count():
    with pytest.raises(ValueError):
        wilson(1, 0)
    with pytest.raises(ValueError):
        wilson(11, 10)


def test_interval_text_and_separation():
    assert interval_text(8, 10) == "8/10 [49–94 %]"
    assert interval_text(10, 10) == "10/10 [72–100 %]"
    assert not separated((10, 10), (8, 10))          # 10/10 against 8/10: noise at 10 prompts
    assert separated((100, 100), (60, 100))


# --- the summary, from rows made here ---------------------------------------------------------------------------

def _rows(method: str, found: int, prompts: int, kv: int, store: int = 0, task: str = "niah", n: int = 2048) -> list:
    return [{"kind": "answer", "key": f"{method}|{task}|{n}|{i}", "method": method, "budget": 0.1, "task": task, "n": n,
             "depth": 0.5, "score": 1.0 if i < found else 0.0, "kv_bytes": kv, "kv_store_bytes": store}
            for i in range(prompts)]


def _folders(tmp_path: Path) -> list:
    smol = tmp_path / "niah-test"
    gemma = tmp_path / "gemma-test"
    dev = tmp_path / "niah-dev"
    rows_s = _rows("full", 30, 40, 100) + _rows("attnlab", 38, 40, 20, 70) + _rows("snapkv", 5, 40, 10)
    rows_g = _rows("full", 8, 10, 100) + _rows("attnlab", 7, 10, 50, 50) + _rows("snapkv", 2, 10, 30)
    rows_d = _rows("full", 0, 10, 100) + _rows("attnlab", 10, 10, 20)            # dev: never in the headline
    return [(smol, {"model": "smollm2-135m"}, rows_s, []), (gemma, {"model": "gemma3-270m"}, rows_g, []),
            (dev, {"model": "smollm2-135m"}, rows_d, [])]


def test_tallies_pool_test_rows_and_compare_on_the_same_prompts(tmp_path):
    cells = tally_rows(_folders(tmp_path))
    assert len(cells) == 2                                                      # the -dev folder is left out
    every = method_tallies(cells)
    mine, full = every["attnlab"]
    assert (mine.found, mine.prompts, full.found, full.prompts) == (45, 50, 38, 50)
    assert mine.kv_bytes / full.kv_bytes == pytest.approx((40 * 20 + 10 * 50) / (50 * 100))
    smol = method_tallies(cells, "smollm2-135m")["snapkv"]
    assert (smol[0].found, smol[0].prompts) == (5, 40)
    assert verdict(*every["snapkv"]) == "**below**, intervals apart"
    assert verdict(*every["attnlab"]).startswith("above")


def test_summary_table_has_a_row_per_method_with_intervals(tmp_path):
    cells = tally_rows(_folders(tmp_path))
    ppl = {("smollm2-135m", 4096): {"full": (20.0, 20.0), "attnlab": (22.0, 20.0)}}
    speed = {"attnlab": [("smollm2-135m", 8192, 2, 2.5, 1.25)]}
    table = summary_table(cells, ppl, speed, ["full", "attnlab", "snapkv"])
    lines = table.strip().splitlines()
    assert len(lines) == 2 + 3
    attnlab = next(line for line in lines if line.startswith("| `attnlab`"))
    assert "45/50 [" in attnlab and "38/40 [" in attnlab and "7/10 [" in attnlab and "38/50 [" in attnlab
    assert "SmolLM2 4K +10.0 %" in attnlab and "2.50×, 1.25×" in attnlab
    assert "26.0 % (3.85× less)" in attnlab and "+ 66.0 %" in attnlab          # resident and stored side by side
    snapkv = next(line for line in lines if line.startswith("| `snapkv`"))
    assert "kvpress" in snapkv                                                # the reference beside the baseline


def test_headline_draws_the_figure_and_links_it(tmp_path):
    image = tmp_path / "docs" / "img" / "headline.png"
    text = headline(_folders(tmp_path), [], image, tmp_path / "docs")
    assert image.is_file() and image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first = image.read_bytes()
    assert "](img/headline.png)" in text and "](glossary.md)" in text
    assert "SmolLM2-135M-Instruct (Q4_1)" in text and "Gemma-3-270M (Q4_K_M)" in text and "dequantised" in text
    headline(_folders(tmp_path), [], image, tmp_path / "docs")
    assert image.read_bytes() == first                                        # the same records, the same file


def test_models_line_names_the_quantisation():
    line = models_line(["smollm2-135m", "gemma3-270m"])
    assert "Q4_1" in line and "Q4_K_M" in line and "float32" in line


def test_readme_block_is_replaced_between_its_markers():
    readme = f"top\n{BEGIN}\nold\n{END}\nbottom\n"
    assert in_readme(readme, "new\n") == f"top\n{BEGIN}\nnew\n{END}\nbottom\n"
    assert in_readme("no markers\n", "new\n") == "no markers\n"


def test_committed_headline_is_the_generated_one():
    """docs/results.md and the README show the headline the committed records give (nothing typed by hand)."""
    runs, recipes = ROOT / "docs" / "records", ROOT / "benchmarks" / "recipes"
    doc = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert results.headline(runs, recipes, ROOT / "docs") in doc
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert BEGIN in readme and in_readme(readme, results.headline(runs, recipes, ROOT, docs=ROOT / "docs")) == readme
    assert (ROOT / "docs" / "img" / "headline.png").is_file() and "](docs/img/headline.png)" in readme

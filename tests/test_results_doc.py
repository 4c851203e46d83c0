"""benchmarks/results.py: docs/results.md generated from run folders (attnlab eval's rows, the speed benchmark's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import results  # noqa: E402

RECIPE = """#!/bin/bash
# Single needle at 2,048 tokens on the tiny model; full and streaming-llm at beta 10 %.
cd "$(dirname "$0")/../.."
.venv/bin/attnlab eval --hf tiny --task niah --lengths 2048 --depths 2 --samples 1 \\
  --method streaming-llm --budget 0.1 --out ${RUNS:-runs}/niah-tiny
"""


def answer(method: str, budget: float, depth: float, score: float, beta: float, kv: int) -> dict:
    """One line of results.jsonl exactly as attnlab eval writes it (eval_grid.run_eval's emit)."""
    key = f"{method}|{budget:g}|niah|2048|{depth:.4f}|0"
    return {"key": key, "kind": "answer", "method": method, "budget": budget, "task": "niah", "n": 2048, "depth": depth,
            "sample": 0, "score": score, "answer": " 1234567." if score else " 12.", "expected": ["1234567"],
            "prompt_tokens": 2048, "prefill_s": 1.5, "reused_tokens": 0, "decode_s": 0.25, "new_tokens": 8, "beta": beta,
            "kv_tokens": kv, "kv_bytes": kv * 1024, "kv_read_tokens": None, "kv_store_tokens": None, "kv_store_bytes": None}


def config(**settings) -> dict:
    """An eval folder's config.json as attnlab eval writes it (full attention on niah at 2048, 2 depths, 1 sample)."""
    from dataclasses import asdict

    from attnlab.llm.eval.eval_settings import EvalSettings

    return {"format": "attnlab-eval/1", **asdict(EvalSettings(model="tiny", depths=2, samples=1, haystack="noise")),
            **settings}


def speed(method: str, prefill: float, tok_s: float, kv: int) -> dict:
    """One line of speed.jsonl as benchmarks/llm_structured.py speed writes it."""
    return {"n": 8192, "method": method, "budget": 0.1, "threads": 2, "prefill_s": prefill, "peak_rss_mib": 900.0,
            "rss_before_mib": 700.0, "kv_bytes_after_prefill": kv, "kv_bytes_end": kv, "decode_tokens": 32,
            "decode_tok_s": tok_s, "fraction": 0.1, "store_bytes_end": 0, "read_tokens": 0.0}


def write_lines(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def tree(tmp_path):
    """recipes/, runs/ (as a recipe leaves them, with a calibration that must not be copied) and docs/records/."""
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "niah-tiny.sh").write_text(RECIPE)
    (recipes / "speed-tiny.sh").write_text("#!/bin/bash\n# Prefill and decoding speed at 8K.\npython benchmarks/llm_structured.py speed --n 8192\n")
    run = tmp_path / "runs" / "niah-tiny"
    write_lines(run / "results.jsonl", [answer("full", 1.0, 0.0, 1.0, 1.0, 2048), answer("full", 1.0, 1.0, 1.0, 1.0, 2048),
                                        answer("streaming-llm", 0.1, 0.0, 0.0, 0.098, 204),
                                        answer("streaming-llm", 0.1, 1.0, 1.0, 0.098, 204),
                                        {"key": "ppl|full|1|2048|1", "kind": "ppl", "method": "full", "budget": 1.0, "n": 2048,
                                         "ppl": 28.153, "windows": 1, "beta": 1.0, "seconds": 3.0}])
    write_lines(run / "wall.jsonl", [{"started": "2026-01-05T10:00:00Z", "seconds": 42.5, "rows": 5, "reuse": True}])
    (run / "config.json").write_text(json.dumps(config()))
    (run / "calibration-2048.npz").write_bytes(b"\0" * 64)
    write_lines(tmp_path / "runs" / "speed-tiny" / "speed.jsonl",
                [speed("sdpa", 100.0, 7.0, 360 << 20), speed("attnlab", 50.0, 14.0, 72 << 20),
                 speed("sdpa", 110.0, 7.0, 360 << 20), speed("attnlab", 50.0, 14.0, 72 << 20)])
    write_lines(tmp_path / "runs" / "elsewhere" / "results.jsonl", [answer("full", 1.0, 0.0, 1.0, 1.0, 2048)])  # no recipe
    return tmp_path


def run_main(tree: Path, *extra: str) -> int:
    return results.main(["--runs", str(tree / "docs" / "records"), "--recipes", str(tree / "recipes"),
                         "--out", str(tree / "results.md"), "--readme", str(tree / "README.md"), *extra])


def test_collect_then_regenerate(tree, capsys):
    assert run_main(tree, "--collect", str(tree / "runs")) == 0
    published = tree / "docs" / "records"
    assert sorted(p.relative_to(published).as_posix() for p in published.rglob("*") if p.is_file()) == [
        "niah-tiny/config.json", "niah-tiny/results.jsonl", "niah-tiny/wall.jsonl", "speed-tiny/speed.jsonl"]
    doc = (tree / "results.md").read_text()
    assert "## niah-tiny" in doc and "## speed-tiny" in doc and "elsewhere" not in doc
    assert "--method streaming-llm --budget 0.1 --out ${RUNS:-runs}/niah-tiny" in doc           # the recipe's command beside
    assert "Single needle at 2,048 tokens on the tiny model" in doc                              # what it measures
    # the eval table: full 2/2, streaming-llm 1/2 = 50 %, on full's 2 cells: 50 % of full; β measured; perplexity
    assert "| niah | 2048 | full | 1 | 1.000 | 2048 |" in doc
    assert "| niah | 2048 | streaming-llm | 0.1 | 0.098 | 204 | – | – | 2 | 50.0 % | 2/2 | 50.0 | 50 |" in doc
    assert "| 28.153 |" in doc and "grid wall time: 42.5 s" in doc and "Incomplete" not in doc
    # the speed table: means over the alternated runs and the ratios to SDPA (105 s / 50 s = 2.10×, 14/7 = 2.00×, KV 5.00×)
    assert "| 8192 | sdpa | 0.1 | 2 | 2 | 105.0 (100.0–110.0) | 1.00× |" in doc
    assert "| 8192 | attnlab | 0.1 | 2 | 2 | 50.0 (50.0–50.0) | 2.10× | 14.00 (14.00–14.00) | 2.00× | 72.0 | 5.00× |" in doc
    # from the committed files alone (a clean clone): the same document, byte for byte
    (tree / "runs" / "niah-tiny" / "results.jsonl").unlink()
    before = doc
    assert run_main(tree) == 0
    assert (tree / "results.md").read_text() == before


def test_an_incomplete_grid_is_said(tree):
    """A run stopped before its grid was measured: the rows it has, and a line saying how many prompts each lacks."""
    run = tree / "runs" / "niah-tiny"
    rows = results.read_lines(run / "results.jsonl")
    write_lines(run / "results.jsonl", [r for r in rows if not (r["method"] == "streaming-llm" and r["depth"] == 1.0)])
    assert run_main(tree, "--collect", str(tree / "runs")) == 0
    doc = (tree / "results.md").read_text()
    assert "**Incomplete run**: streaming-llm β=0.1 (niah, n = 2048) 1 of 2 prompts." in doc
    # a method of the config with no row yet is named too
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "tasks": ["niah"], "lengths": [2048], "methods": ["streaming-llm", "snapkv"],
                                                 "budgets": [0.1]}))
    assert run_main(tree, "--collect", str(tree / "runs")) == 0
    assert "1 of 2 prompts; snapkv β=0.1 (niah, n = 2048) not measured." in (tree / "results.md").read_text()
    assert "Incomplete" not in doc.split("## niah-tiny")[1].split("## speed-tiny")[1]


def test_figures_follow_the_runs(tree):
    """A changed result line changes the document: the figures are read, not written down."""
    assert run_main(tree, "--collect", str(tree / "runs")) == 0
    published = tree / "docs" / "records" / "niah-tiny" / "results.jsonl"
    rows = results.read_lines(published)
    rows[2]["score"] = 1.0                                                       # streaming-llm now finds both
    write_lines(published, rows)
    assert run_main(tree) == 0
    assert "| niah | 2048 | streaming-llm | 0.1 | 0.098 | 204 | – | – | 2 | 100.0 % | 2/2 | 100.0 | 100 |" in (tree / "results.md").read_text()


def refused(tree: Path, capsys, *extra: str) -> str:
    assert run_main(tree, *extra) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("results.py: error: ")
    assert not (tree / "results.md").exists()
    return err


def test_no_runs_is_one_line(tree, capsys):
    (tree / "docs" / "records").mkdir(parents=True)
    assert "no runs" in refused(tree, capsys)
    assert "no such folder" in refused(tree, capsys, "--runs", str(tree / "nothing"))


def test_run_without_recipe_and_torn_line(tree, capsys):
    published = tree / "docs" / "records"
    write_lines(published / "elsewhere" / "results.jsonl", [answer("full", 1.0, 0.0, 1.0, 1.0, 2048)])
    assert "no recipe" in refused(tree, capsys)
    (published / "elsewhere" / "results.jsonl").unlink()
    (tree / "recipes" / "elsewhere.sh").write_text("#!/bin/bash\n# x\ntrue\n")
    (published / "elsewhere" / "results.jsonl").write_text(json.dumps(answer("full", 1.0, 0.0, 1.0, 1.0, 2048)) + "\n{\"key\": \"torn")
    assert "results.jsonl:2: not a JSON line" in refused(tree, capsys)


def test_collect_refuses_a_torn_run_before_copying(tree, capsys):
    with open(tree / "runs" / "niah-tiny" / "results.jsonl", "a") as f:
        f.write('{"key": "full|1|niah')
    assert "results.jsonl:6" in refused(tree, capsys, "--collect", str(tree / "runs"))
    assert not (tree / "docs" / "records").exists()


def test_command_line_no_traceback(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "results.py"), "--runs", str(tmp_path), "--out", str(tmp_path / "r.md"),
                          "--readme", str(tmp_path / "README.md")],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert not (tmp_path / "r.md").exists()


def test_published_document_is_generated():
    """docs/results.md is what the script writes from the committed docs/records/ (when both are there)."""
    doc, runs = ROOT / "docs" / "results.md", ROOT / "docs" / "records"
    if not runs.is_dir():
        pytest.skip("no docs/records/ in this checkout")
    assert doc.read_text(encoding="utf-8") == results.document(runs, ROOT / "benchmarks" / "recipes", here=ROOT / "docs")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert results.in_readme(readme, results.glance(runs)) == readme      # the README's table is the generated one


def test_collect_a_folder_not_named_after_its_recipe(tree, capsys):
    """SRC=RECIPE/PART: a recipe that writes several folders of other names (e.g. one per prompt format)."""
    (tree / "recipes" / "formats.sh").write_text("#!/bin/bash\n# Retrieval on two prompt formats.\ntrue\n")
    src = tree / "runs" / "elsewhere"
    assert run_main(tree, "--collect", f"{src}=formats/plain", "--collect", str(tree / "runs")) == 0
    assert (tree / "docs" / "records" / "formats" / "plain" / "results.jsonl").exists()
    doc = (tree / "results.md").read_text()
    assert "## formats" in doc and "formats/plain/results.jsonl" in doc
    # an unknown recipe in one spec: nothing of the other specs copied either
    import shutil
    shutil.rmtree(tree / "docs")
    (tree / "results.md").unlink()
    assert "no recipe" in refused(tree, capsys, "--collect", str(tree / "runs"), "--collect", f"{src}=nosuch/x")
    assert not (tree / "docs").exists()


def test_a_torchrun_grid_not_folded_yet(tree):
    """results.rank{r}.jsonl (torchrun ranks, before rank 0 folds them): one table of every rank's rows, by key."""
    run = tree / "runs" / "niah-tiny"
    rows = results.read_lines(run / "results.jsonl")
    (run / "results.jsonl").unlink()
    write_lines(run / "results.rank0.jsonl", rows[:3])
    write_lines(run / "results.rank1.jsonl", rows[2:])                       # one row in both: counted once
    assert run_main(tree, "--collect", str(tree / "runs")) == 0
    doc = (tree / "results.md").read_text()
    assert "niah-tiny/results.rank0.jsonl, results.rank1.jsonl" in doc
    assert "| niah | 2048 | streaming-llm | 0.1 | 0.098 | 204 | – | – | 2 | 50.0 % | 2/2 | 50.0 | 50 |" in doc
    assert "| key | kind |" not in doc and "Incomplete" not in doc             # no second, generic table of the rank files


def test_at_a_glance_reads_every_test_run(tree):
    """The first table: a row per format of every committed eval run (dev checks left out), full and the default first."""
    dev = tree / "runs" / "niah-tiny" / "niah-tiny-dev"            # a dev check in a sub-folder of the same recipe
    write_lines(dev / "results.jsonl", [answer("full", 1.0, 0.0, 0.0, 1.0, 2048)])
    (tree / "runs" / "niah-tiny" / "niah-tiny-test").mkdir()
    for name in ("results.jsonl", "wall.jsonl", "config.json"):
        (tree / "runs" / "niah-tiny" / name).rename(tree / "runs" / "niah-tiny" / "niah-tiny-test" / name)
    rows = results.read_lines(tree / "runs" / "niah-tiny" / "niah-tiny-test" / "results.jsonl")
    write_lines(tree / "runs" / "niah-tiny" / "niah-tiny-test" / "results.jsonl",
                rows + [answer("attnlab", 0.1, d, 1.0, 0.1, 300) for d in (0.0, 1.0)]
                + [answer("attnlab-retrieval:pages=8", 0.1, 0.0, 0.0, 0.1, 300)])
    assert run_main(tree, "--collect", str(tree / "runs")) == 0
    doc = (tree / "results.md").read_text()
    glance = doc.split("## At a glance")[1].split("## niah-tiny")[0]
    assert "pages=8" not in glance and "attnlab-retrieval:pages=8" in doc   # a written-out configuration: its section only
    assert "| `full` | `attnlab` | `streaming-llm` |" in glance
    assert "| tiny | niah | noise | auto | 2048 | 2/2 [34–100 %] | 2/2 [34–100 %] | 1/2 [9–91 %] | 2/2 | 100 % |" in glance
    assert "niah-tiny-dev" not in glance and "niah-tiny-dev" in doc     # its own table stays in the section
    assert "| tiny | 2048 | 28.153, KV 2048 |" in glance                        # full's perplexity, from the run that scored it


def test_the_question_first_is_its_own_row(tree):
    """A run with ``--question before`` is another format: its own row, its template cell says the question comes first."""
    other = tree / "runs" / "niah-tiny" / "question-first"
    write_lines(other / "results.jsonl", [answer("full", 1.0, 0.0, 1.0, 1.0, 2048), answer("full", 1.0, 1.0, 0.0, 1.0, 2048)])
    (other / "config.json").write_text(json.dumps(config(template="none", question="before")))
    assert run_main(tree, "--collect", str(tree / "runs")) == 0
    glance = (tree / "results.md").read_text().split("## At a glance")[1].split("## niah-tiny")[0]
    rows = [line for line in glance.splitlines() if line.startswith("| tiny | niah |")]
    assert len(rows) == 2
    assert any(r.startswith("| tiny | niah | noise | none, question first | 2048 | 1/2 [9–91 %] |") for r in rows)
    assert any(r.startswith("| tiny | niah | noise | auto | 2048 | 2/2 [34–100 %] |") for r in rows)


def test_the_perplexity_row_of_a_length_merges_its_runs(tree):
    """Two test runs at one (model, n) scoring different methods on the same text: one perplexity row with all of them."""
    other = tree / "runs" / "niah-tiny" / "second"
    write_lines(other / "results.jsonl", [answer("full", 1.0, 0.0, 1.0, 1.0, 2048), answer("snapkv", 0.1, 0.0, 0.0, 1.0, 204),
                                          {"key": "ppl|full|1|2048|1", "kind": "ppl", "method": "full", "budget": 1.0,
                                           "n": 2048, "ppl": 28.153, "windows": 1, "beta": 1.0, "seconds": 3.0},
                                          {"key": "ppl|snapkv|0.1|2048|1", "kind": "ppl", "method": "snapkv", "budget": 0.1,
                                           "n": 2048, "ppl": 30.968, "windows": 1, "beta": 1.0, "seconds": 3.0}])
    (other / "config.json").write_text(json.dumps(config()))
    assert run_main(tree, "--collect", str(tree / "runs")) == 0
    glance = (tree / "results.md").read_text().split("## At a glance")[1].split("## niah-tiny")[0]
    ppl_rows = [line for line in glance.split("Perplexity")[1].splitlines() if line.startswith("| tiny | 2048 |")]
    assert len(ppl_rows) == 1 and "28.153, KV 2048" in ppl_rows[0] and "30.968 (+10.00 %)" in ppl_rows[0]


def test_the_band_plan_is_a_perplexity_column_only(tree):
    """attnlab-band (the band plan alone, the perplexity target's reference): a column of the perplexity table, none
    in the retrieval grid; its answers stay in its folder's section."""
    run = tree / "runs" / "niah-tiny"
    rows = results.read_lines(run / "results.jsonl")
    write_lines(run / "results.jsonl", rows + [answer("attnlab-band", 0.1, 0.0, 1.0, 0.1, 250),
                                               {"key": "ppl|attnlab-band|0.1|2048|1", "kind": "ppl", "method": "attnlab-band",
                                                "budget": 0.1, "n": 2048, "ppl": 42.2295, "windows": 1, "beta": 0.1,
                                                "seconds": 3.0}])
    assert run_main(tree, "--collect", str(tree / "runs")) == 0
    doc = (tree / "results.md").read_text()
    glance = doc.split("## At a glance")[1].split("## niah-tiny")[0]
    grid, ppl = glance.split("Perplexity")
    assert "attnlab-band" not in grid and "attnlab-band" in doc.split("## niah-tiny")[1]
    assert "| n | `full` | `attnlab-band` |" in ppl and "the per-head band plan alone" in ppl
    assert "42.230 (+50.00 %)" in ppl


def test_the_readme_shows_the_generated_table(tree):
    """A README with the markers gets the first table between them, the rest untouched; without them it is not written."""
    readme = tree / "README.md"
    readme.write_text(f"# x\n\nbefore\n{results.README_BEGIN}\nold, typed by hand\n{results.README_END}\nafter\n")
    assert run_main(tree, "--collect", str(tree / "runs")) == 0
    text = readme.read_text()
    assert "old, typed by hand" not in text and text.startswith("# x\n\nbefore\n") and text.endswith(f"{results.README_END}\nafter\n")
    assert "| tiny | niah | noise | auto | 2048 | 2/2 [34–100 %] | 1/2 [9–91 %] |" in text
    readme.write_text("# y\n")
    assert run_main(tree) == 0 and readme.read_text() == "# y\n"


def test_the_readme_shows_the_default_as_attnlab_methods_prints_it():
    """The README's first screen names the recommended default with the configuration `attnlab methods` prints."""
    from typer.testing import CliRunner

    from attnlab.cli import app

    printed = CliRunner().invoke(app, ["methods"]).output.splitlines()
    line = next(l for l in printed if "  [default] = " in l)
    assert line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()


def decode_rounds(ratios: list[float], finished: bool = True) -> list[dict]:
    """decode.jsonl as benchmarks/llm_structured.py decode writes it: one line a round (8 tokens each way), then all."""
    rows = [{"n": 8192, "method": "attnlab", "budget": 0.1, "threads": 2, "round": k + 1, "tokens": 8, "full_tok_s": 7.0,
             "method_tok_s": 7.0 * x, "ratio": x} for k, x in enumerate(ratios)]
    if finished:
        full_s, method_s = sum(8 / 7.0 for _ in ratios), sum(8 / (7.0 * x) for x in ratios)
        rows.append({"n": 8192, "method": "attnlab", "budget": 0.1, "threads": 2, "round": "all", "tokens": 8 * len(ratios),
                     "full_tok_s": 8 * len(ratios) / full_s, "method_tok_s": 8 * len(ratios) / method_s, "ratio": full_s / method_s,
                     "ratio_min": min(ratios), "ratio_median": sorted(ratios)[len(ratios) // 2], "ratio_max": max(ratios),
                     "full_kv_tokens": 32241.0, "full_kv_tokens_sliding_layers": 7665.0, "method_kv_tokens": 16469.0,
                     "method_kv_tokens_sliding_layers": 5405.0, "prefills": 2, "full_prefill_s": 36.0, "method_prefill_s": 12.0,
                     "prefill_ratio": 3.0, "prefill_ratio_min": 2.9, "prefill_ratio_max": 3.1})
    return rows


def test_a_decoding_ab_run_is_one_row_and_an_unfinished_one_is_refused(tree, capsys):
    """decode.jsonl: the run's line for all rounds is its row (the rounds' spread beside it); a run cut before that
    line is one line naming the file."""
    write_lines(tree / "runs" / "speed-tiny" / "decode.jsonl", decode_rounds([1.04, 1.15, 1.08]))
    assert run_main(tree, "--collect", str(tree / "runs")) == 0
    doc = (tree / "results.md").read_text()
    assert ("| 8192 | attnlab | 0.1 | 2 | 36.0 / 12.0 s: 3.00× (2.90–3.10, 2 rounds) | 24 | 7.00 | 7.62 | 1.09× | 1.04 / 1.08 / 1.15 | "
            "32,241 (7,665) | 16,469 (5,405) |") in doc
    assert "| 1 | 8 |" not in doc                                                   # the rounds stay in the file
    write_lines(tree / "docs" / "records" / "speed-tiny" / "decode.jsonl", decode_rounds([1.0, 1.1], finished=False))
    (tree / "results.md").unlink()
    assert "decode.jsonl: no line for all rounds" in refused(tree, capsys)

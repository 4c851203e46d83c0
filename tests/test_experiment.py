"""``attnlab experiment``: one --quick run (module fixture), its files, its report, resume, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONWARNINGS": "ignore"}
STAGES = ["train-h1", "train-h8", "evaluate", "capture", "roles", "tables", "choices", "estimate-w", "spectra",
          "mechanisms", "surgery", "report"]


def attnlab(*args: str, timeout: float = 900) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "attnlab", *args], capture_output=True, text=True, timeout=timeout, env=ENV, cwd=ROOT)
    return r, time.perf_counter() - t0


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("experiment") / "run"
    r, seconds = attnlab("experiment", "--quick", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    print(f"attnlab experiment --quick: {seconds:.0f} s")
    return out


def test_quick_run_writes_every_stage_and_the_report(quick):
    for stage in STAGES:
        assert (quick / "stages" / f"{stage}.json").is_file(), stage
    for f in ("report.html", "report.md", "results.json", "explorer.html", "experiment.json", "data/train.tsv",
              "figures/h1-encoder.png", "figures/h8-encoder.png", "figures/h8-cross.png", "figures/sweep-h8/sweep.csv",
              "figures/spectrum-h8.png", "attention/h8-sentence.safetensors", "attention/h8-eval.safetensors"):
        assert (quick / f).is_file(), f
    for name in ("h1", "h8"):
        assert list((quick / "models" / name / "checkpoints").glob("step_*.safetensors"))


def test_report_is_self_contained_and_complete(quick):
    page = (quick / "report.html").read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") >= 6  # figures 11-12 (encoder + cross), sweeps, spectra
    assert "<iframe" in page and "srcdoc=" in page  # the explorer, embedded
    assert not re.search(r"""(src|href)=["']https?://""", page)  # nothing fetched from the network
    for text in ("Figure 11", "Figure 12", "Table 16", "Table 17", "Head roles", "Head surgery", "Per-language estimate",
                 "Singular-value spectra", "random search"):
        assert text in page, text
    md = (quick / "report.md").read_text(encoding="utf-8")
    assert "## 5 · Validation" in md and "| head | Min_distance |" in md and "](figures/" in md


def test_results_hold_the_measured_numbers(quick):
    res = json.loads((quick / "results.json").read_text(encoding="utf-8"))
    for name in ("h1", "h8"):
        assert 0.0 <= res["evaluate"]["models"][name]["bleu"] <= 100.0
    t16 = res["tables"]["models"]["h8"]["tables"]["table16"]
    assert len(t16["rows"]) == 8 and t16["attempts"] == 30 and (t16["w"], t16["num_pos"]) == (3, 2)
    assert t16["ratio_of_means"] > 1  # the optimal fit beats random search on the model's own heads
    assert all(r["optimal_distance"] <= r["random_min_distance"] + 1e-9 for r in t16["rows"])
    assert res["tables"]["models"]["h8"]["n"] == res["capture"]["sentence_tokens"]
    ev = t16["eval"]  # the same comparison pooled over the captured evaluation sentences
    assert ev["sentences"] >= 1 and ev["heads"] == 8 * ev["sentences"]
    assert sum(g["sentences"] for g in ev["by_length"].values()) == ev["sentences"]
    assert ev["ratio_of_means"] == pytest.approx(ev["mean_random_error"] / ev["mean_optimal_error"])
    est = res["estimate-w"]
    # the check's reference: the grammar never reorders further than max_reorder (the robust maximum of
    # a 24-sentence sample may stay below it; the default run's 120 sentences give 3, see the README)
    assert est["known_max_reorder"] == 3 and est["gold"]["w"] <= est["gold"]["max"] <= 3
    assert isinstance(est["models"]["h8"]["w"], int)
    conf = {k: v["confidence"] for k, v in est["models"].items()}
    assert all(0 < c <= 1 for c in conf.values())
    assert est["from_model"] == max(conf, key=conf.get) and est["w"] == est["models"][est["from_model"]]["w"]
    ch = res["choices"]["models"]["h8"]
    assert set(ch) == {"encoder", "decoder", "cross"} and len(ch["encoder"]["w"][0]) == 8
    surgery = res["surgery"]["models"]["h8"]
    assert 0.0 < surgery["per_head"]["kept"]["all"] <= 1.0
    names = {r["mechanism"] for r in res["mechanisms"]["rows"]}
    assert {"full", "band", "structured", "linear"} <= names


def test_training_stops_on_steps_and_the_report_says_so(quick):
    res = json.loads((quick / "results.json").read_text(encoding="utf-8"))
    for name in ("h1", "h8"):
        train = res[f"train-{name}"]
        assert train["steps"] == train["max_steps"] == 60 and train["stopped"] == "all 60 steps"
    md = (quick / "report.md").read_text(encoding="utf-8")
    assert "| stopped |" in md and "all 60 steps" in md and "cut short" not in md


def test_resume_skips_finished_stages(quick):
    report = quick / "report.html"
    before = report.stat().st_mtime_ns
    r, seconds = attnlab("experiment", "--quick", "--out", str(quick), "--resume")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr.count("skipped") == len(STAGES)
    assert report.stat().st_mtime_ns == before
    assert seconds < 120
    # an interrupted run: the last two stages never finished → only they run again
    tables = (quick / "stages" / "tables.json").stat().st_mtime_ns
    (quick / "stages" / "report.json").unlink()
    (quick / "stages" / "surgery.json").unlink()
    r, _ = attnlab("experiment", "--quick", "--out", str(quick), "--resume")
    assert r.returncode == 0, r.stderr[-2000:]
    assert (quick / "stages" / "surgery.json").is_file() and report.stat().st_mtime_ns != before
    assert (quick / "stages" / "tables.json").stat().st_mtime_ns == tables
    assert r.stderr.count("skipped") == len(STAGES) - 2


def _one_line_error(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnlab: error:"), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_existing_run_folder_is_refused_and_untouched(quick):
    report = quick / "report.html"
    stamp, size = report.stat().st_mtime_ns, report.stat().st_size
    r, _ = attnlab("experiment", "--quick", "--out", str(quick), timeout=120)
    _one_line_error(r, "--resume", "--force")
    assert report.stat().st_mtime_ns == stamp and report.stat().st_size == size
    r, _ = attnlab("experiment", "--quick", "--out", str(quick), "--resume", "--force", timeout=120)
    _one_line_error(r, "exclude")
    r, _ = attnlab("experiment", "--out", str(quick), "--resume", timeout=120)  # not the same experiment
    _one_line_error(r, "--quick")


def test_bad_input(tmp_path):
    a_file = tmp_path / "file.txt"
    a_file.write_text("not a folder\n")
    r, _ = attnlab("experiment", "--quick", "--out", str(a_file / "run"), timeout=120)
    _one_line_error(r, "cannot write")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    r, _ = attnlab("experiment", "--quick", "--out", str(mine), "--force", timeout=120)
    _one_line_error(r, "not an experiment run folder")
    assert (mine / "notes.txt").read_text() == "keep me\n"
    r, _ = attnlab("experiment", "--quick", "--out", str(mine), "--resume", timeout=120)
    _one_line_error(r, "not an experiment run folder")
    small = tmp_path / "small.tsv"
    small.write_text("".join(f"sentence {i}\tfrase {i}\n" for i in range(10)), encoding="utf-8")
    r, _ = attnlab("experiment", "--quick", "--data", str(small), "--out", str(tmp_path / "run"), timeout=120)
    _one_line_error(r, "10 training pairs", "at least 50")
    assert not (tmp_path / "run").exists()  # nothing written


def test_over_sentences_pools_heads_by_length():
    """Planted heads: band-3 + 2 columns exactly → the optimal fit is exact, random search is not."""
    import numpy as np

    from attnlab.analysis.attention_maps import AttentionMaps, SentenceAttention
    from attnlab.experiment.tables import over_sentences

    rng = np.random.default_rng(0)
    sents = []
    for n in (5, 9, 9, 12):  # n = 5 is shorter than min_len = 8 and is left out
        i, j = np.indices((n, n))
        support = (np.abs(i - j) <= 3) | (j < 2)
        a = np.where(support, rng.random((1, 2, n, n)), 0.0)
        a = (a / a.sum(-1, keepdims=True)).astype(np.float32)
        toks = [f"t{k}" for k in range(n)]
        sents.append(SentenceAttention(text=" ".join(toks), tokens={"src": toks}, weights={"encoder": a}))
    assert over_sentences(AttentionMaps(sents), w=3, num_pos=2, attempts=5)["sentences"] == 0  # n < 2(2w+1) = 14
    r = over_sentences(AttentionMaps(sents), w=3, num_pos=2, attempts=5, min_len=8)
    assert r["sentences"] == 3 and r["heads"] == 6
    assert {k: v["sentences"] for k, v in r["by_length"].items()} == {"9": 2, "12": 1}
    assert [len(v["per_sentence"]) for v in r["by_length"].values()] == [2, 1]
    assert [len(v["per_head"]) for v in r["by_length"].values()] == [2, 2]
    assert r["mean_optimal_error"] < 1e-6 < r["mean_random_error"]
    # a band of half-width 1 plus two far entries per row: exact with s = 2n sparse entries, not with s = n
    far = []
    for n in (10, 10):
        i, j = np.indices((n, n))
        support = np.abs(i - j) <= 1
        support[np.arange(n), (np.arange(n) + 4) % n] = support[np.arange(n), (np.arange(n) + 6) % n] = True
        a = np.where(support, rng.random((1, 1, n, n)) + 0.1, 0.0)
        far.append(SentenceAttention(text="x", tokens={"src": ["x"] * n}, weights={"encoder": (a / a.sum(-1, keepdims=True)).astype(np.float32)}))
    one = over_sentences(AttentionMaps(far), w=1, num_pos=0, attempts=3, min_len=8)
    two = over_sentences(AttentionMaps(far), w=1, num_pos=0, attempts=3, min_len=8, s_per_row=2)
    assert two["mean_optimal_error"] < 1e-6 < one["mean_optimal_error"]


def _cross_sentence(rows_x: list[list[float]], n_heads: int):
    """Source "a b c" (+ EOS), target "x y": row 0 of each head predicts x (given), row 1 predicts y (all on c)."""
    import numpy as np

    from attnlab.analysis.attention_maps import SentenceAttention

    a = np.zeros((1, n_heads, 3, 4), np.float32)  # (L, H, [BOS] x y, a b c EOS)
    for h in range(n_heads):
        a[0, h, 0, :3] = rows_x[h]
        a[0, h, 1, 2] = a[0, h, 2, 2] = 1.0
    return SentenceAttention(text="a b c", target="x y", weights={"cross": a},
                             tokens={"src": ["a", "b", "c", "</s>"], "tgt": ["<s>", "x", "y"]},
                             special={"src": [False, False, False, True], "tgt": [True, False, False]})


def test_induced_alignments_vote_over_heads():
    """The head-mean can peak on a word no head chooses (b); the vote takes the majority (a)."""
    from attnlab.analysis.attention_maps import AttentionMaps
    from attnlab.experiment.estimate_w import induced_alignments

    heads = [[0.5, 0.45, 0.05], [0.05, 0.45, 0.5], [0.5, 0.45, 0.05]]
    maps = AttentionMaps([_cross_sentence(heads, 3)])
    assert induced_alignments(maps, combine="vote") == [[(0, 0), (2, 1)]]
    assert induced_alignments(maps, combine="mean") == [[(1, 0), (2, 1)]]
    one = AttentionMaps([_cross_sentence(heads[1:2], 1)])  # one head: both rules agree
    assert induced_alignments(one, combine="vote") == induced_alignments(one, combine="mean") == [[(2, 0), (2, 1)]]
    with pytest.raises(ValueError, match="combine"):
        induced_alignments(maps, combine="max")


def test_estimate_from_distances_is_the_robust_maximum():
    import numpy as np

    from attnlab.experiment.estimate_w import estimate_from_distances

    d = np.array([0] * 50 + [1] * 30 + [2] * 15 + [3] * 4 + [7])  # 100 sentences, one outlier at 7
    assert estimate_from_distances(d, min_share=0.05) == 3     # 5 sentences reach 3 (4 + the outlier): 5 ≥ 5 %
    assert estimate_from_distances(d, min_share=0.06) == 2     # 5 < 6: the next value down, 20 sentences reach 2
    assert estimate_from_distances(d, min_share=0.01, min_count=1) == 7
    with pytest.raises(ValueError):
        estimate_from_distances(np.array([]))


def test_alignment_confidence_is_the_mean_largest_weight():
    """Row 0 (predicts x): head-mean (0.35, 0.45, 0.2, 0) → 0.45; row 1 (predicts y): 1.0; row 2 predicts nothing."""
    from attnlab.analysis.attention_maps import AttentionMaps
    from attnlab.experiment.estimate_w import alignment_confidence

    heads = [[0.5, 0.45, 0.05], [0.05, 0.45, 0.5], [0.5, 0.45, 0.05]]
    assert alignment_confidence(AttentionMaps([_cross_sentence(heads, 3)])) == pytest.approx((0.45 + 1.0) / 2)

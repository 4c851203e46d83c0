"""Progress of long jobs (attnlab/progress.py): silent by default, a line per stage off a terminal, rich bars on one,
nothing under --quiet; the eval grid row by row, the capture block by block, the model's loading before transformers."""

from __future__ import annotations

import io

import pytest

import attnlab.progress as progress_module
from attnlab.progress import SILENT, LineProgress, Progress, TerminalProgress, duration

from attnlab_cli import run_main


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", c)
    return c


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_duration_reads_as_a_person_says_it():
    assert [duration(s) for s in (4.4, 59.6, 185, 3720)] == ["4 s", "1 min 00 s", "3 min 05 s", "1 h 02 min"]


def test_the_default_says_nothing(capsys):
    SILENT.stage("loading")
    with SILENT.bar("eval", total=3) as bar:
        bar.advance()
    assert capsys.readouterr() == ("", "")


def test_for_command_chooses_by_quiet_and_terminal():
    assert Progress.for_command(quiet=True, stream=Tty()) is SILENT
    assert isinstance(Progress.for_command(stream=io.StringIO()), LineProgress)
    assert isinstance(Progress.for_command(stream=Tty()), TerminalProgress)


def test_lines_a_stage_a_start_an_end_and_a_line_per_interval_with_the_time_left(clock):
    out = io.StringIO()
    p = LineProgress(out, every=30)
    p.stage("loading model m")
    with p.bar("eval", total=10, unit="rows") as bar:
        clock.now += 10
        bar.advance(note="full")             # 10 s after the start: under the interval, no line
        clock.now += 30
        bar.advance(2, note="snapkv")         # 3 rows in 40 s: 7 rows left at 40/3 s each
        clock.now += 5
        bar.update(9)                         # 5 s after the last line: none
        clock.now += 5
    lines = out.getvalue().splitlines()
    assert lines == ["attnlab: loading model m",
                     "attnlab: eval: 10 rows …",
                     "attnlab: eval: 3/10 rows, 40 s, about 1 min 33 s left (snapkv)",
                     "attnlab: eval: 9/10 rows in 50 s"]


def test_a_resumed_bar_paces_on_this_run_only(clock):
    p = LineProgress(io.StringIO())
    bar = p.start("eval", total=100, unit="rows", done=90)
    clock.now += 20
    bar.update(95)                            # 5 rows in 20 s: 5 left → 20 s, not 95 rows' pace
    assert bar.remaining() == pytest.approx(20.0)
    bar.close()
    bar.close()                               # once
    assert p.stream.getvalue().splitlines()[0] == "attnlab: eval: 100 rows, 90 done before …"
    assert p.stream.getvalue().count("95/100 rows in") == 1


def test_steps_of_different_cost_pace_by_kind(clock):
    """4 cheap rows (1 s) and 4 dear ones (100 s), the cheap first: after the cheap ones the mean pace says 4 s left; by
    kind, a kind not begun is counted, not guessed (untimed), then paced by its own: after one dear row, 3 × 100 s."""
    p = LineProgress(io.StringIO())
    bar = p.start("eval", total=8, unit="rows", kinds=["cheap"] * 4 + ["dear"] * 4)
    plain = p.start("eval", total=8, unit="rows")
    for x in range(4):
        clock.now += 1
        bar.update(x + 1, kind="cheap")
        plain.update(x + 1)
    assert plain.remaining() == pytest.approx(4.0)                     # the mean pace: a guess for the dear ones
    assert bar.remaining() == 0.0 and bar.untimed() == 4                # by kind: nothing known of them, said so
    clock.now += 100
    bar.update(5, kind="dear")
    plain.update(5)
    assert bar.remaining() == pytest.approx(300.0)                     # 3 dear rows at 100 s
    assert plain.remaining() == pytest.approx(3 * 104 / 5)             # the mean pace: 62 s, a fifth of it
    clock.now += 50                                                    # a note alone is not a step: these 150 s
    bar.update(5, note="waiting")                                      # are the second dear row's
    clock.now += 100
    bar.update(6, kind="dear")
    assert bar.remaining() == pytest.approx(2 * (100 + 150) / 2)


def test_a_resumed_bar_by_kind_counts_only_the_steps_left(clock):
    p = LineProgress(io.StringIO())
    bar = p.start("eval", total=10, unit="rows", done=7, kinds=["a", "b", "b"])
    clock.now += 10
    bar.update(8, kind="b")
    assert bar.remaining() == pytest.approx(10.0) and bar.untimed() == 1   # one b at 10 s; the a not timed yet
    clock.now += 2
    bar.update(9, kind="a")
    assert bar.remaining() == pytest.approx(10.0)


def test_terminal_bars_nest_in_one_display():
    out = Tty()
    p = TerminalProgress(out)
    p.stage("loading model m")
    with p.bar("eval", total=4, unit="rows") as outer:
        with p.bar("calibration n=500", total=2, unit="windows") as inner:   # inside: one live display, no error
            inner.advance()
            inner.advance()
        outer.update(4, note="full β=1")
    assert p._rich is None                    # the display stopped with the last bar
    text = out.getvalue()
    assert "loading model m" in text and "calibration n=500" in text and "eval" in text and "4/4" in text


# ---- the commands ------------------------------------------------------------------------------
@pytest.fixture
def tiny(tmp_path):
    pytest.importorskip("transformers")
    from tests.test_llm_bad_input import tiny_folder

    return tiny_folder(tmp_path, tokenizer=True)


@pytest.fixture
def text_file(tmp_path):
    from tests.test_llm_stream import random_text

    p = tmp_path / "long.txt"
    p.write_text(random_text(300, seed=3))
    return p


def test_capture_says_loading_then_its_blocks_off_a_terminal(tiny, text_file, tmp_path, capsys):
    code, _, err = run_main(["attention", "--hf", str(tiny), "--file", str(text_file), "--block-rows", "64",
                             "--out", str(tmp_path / "out")], capsys)
    assert code in (0, None), err
    lines = [line for line in err.splitlines() if line.startswith("attnlab: ")]
    assert lines[0] == f"attnlab: loading model {tiny}: 3 steps …"
    assert lines[1].startswith(f"attnlab: loading model {tiny}: 3/3 steps in ")
    # 301 tokens in blocks of 64 rows: ⌈301 / 64⌉ = 5 blocks per layer, one layer
    assert "attnlab: capture of 301 tokens, 1 layers: 5 blocks …" in lines
    assert any(line.startswith("attnlab: capture of 301 tokens, 1 layers: 5/5 blocks in ") for line in lines)
    assert lines[-1].startswith(f"attnlab: writing {tmp_path / 'out'}")


def test_quiet_says_nothing_but_the_results(tiny, text_file, tmp_path, capsys):
    code, out, err = run_main(["attention", "--hf", str(tiny), "--file", str(text_file), "--quiet",
                               "--out", str(tmp_path / "out")], capsys)
    assert code in (0, None), err
    assert not [line for line in err.splitlines() if line.startswith("attnlab: ") and "note:" not in line], err
    assert "explorer.html" in out


def test_the_eval_grid_counts_its_rows_and_the_library_is_silent_by_default(tiny, tmp_path, capsys):
    from attnlab.llm.eval.eval_grid import run_eval
    from attnlab.llm.eval.eval_settings import EvalSettings, check_settings
    from attnlab.llm.models.loading import load_causal_lm

    model, tok = load_causal_lm(str(tiny))
    settings = EvalSettings(model=str(tiny), tasks=["niah"], lengths=[200], depths=2, samples=1, haystack="noise",
                            max_new=2)
    capsys.readouterr()
    run_eval(model, tok, check_settings(settings), tmp_path / "silent")
    assert capsys.readouterr() == ("", "")
    out = io.StringIO()
    rows = run_eval(model, tok, check_settings(settings), tmp_path / "lines", progress=LineProgress(out))
    assert len(rows) == 2
    assert out.getvalue().splitlines()[0] == "attnlab: eval: 2 rows …"
    assert out.getvalue().splitlines()[-1].startswith("attnlab: eval: 2/2 rows in ")


def test_the_eval_bar_paces_each_method_and_length_apart(tiny, tmp_path):
    """The eval's bar knows the kind of every row left, (method, β, n) — perplexity rows apart — and each row's kind."""
    from collections import Counter

    from attnlab.llm.eval.eval_grid import run_eval

    from attnlab.llm.eval.eval_settings import EvalSettings, check_settings
    from attnlab.llm.models.loading import load_causal_lm

    class Keep(Progress):
        bars: list = []

        def _opened(self, bar):
            self.bars.append(bar)

    model, tok = load_causal_lm(str(tiny))
    text = tmp_path / "ppl.txt"
    text.write_text("a plain line of text for the perplexity window. " * 40)
    settings = EvalSettings(model=str(tiny), tasks=["niah"], lengths=[200], depths=2, samples=1, haystack="noise",
                            max_new=2, methods=["streaming-llm"], ppl=str(text))
    keep = Keep()
    with pytest.raises(KeyboardInterrupt):                                      # a run stopped after 3 rows
        run_eval(model, tok, check_settings(settings), tmp_path / "kinds", progress=keep, stop_after=3)
    (bar,) = [b for b in keep.bars if b.description == "eval"]
    want = {("full", 1.0, 200): 2, ("streaming-llm", 0.1, 200): 2, ("full", 1.0, 200, "ppl"): 1,
            ("streaming-llm", 0.1, 200, "ppl"): 1}
    assert bar.kinds == Counter(want)
    assert sum(d for d, _ in bar.spent.values()) == 3 and set(bar.spent) <= set(want)
    keep.bars.clear()
    run_eval(model, tok, check_settings(settings), tmp_path / "kinds", progress=keep)   # resumed: only the rows left
    (bar,) = [b for b in keep.bars if b.description == "eval"]
    assert sum(bar.kinds.values()) == 3 and bar.first == 3


def test_heads_count_the_detectors_blocks(tiny, tmp_path, capsys):
    code, _, err = run_main(["heads", "--hf", str(tiny), "--length", "48", "--samples", "2", "--detectors",
                             "induction,sink", "--block-rows", "16", "--out", str(tmp_path / "heads")], capsys)
    assert code in (0, None), err
    lines = [line for line in err.splitlines() if line.startswith("attnlab: ")]
    # one pass over both samples (a HF model), one layer, ⌈48 / 16⌉ = 3 blocks of rows
    assert "attnlab: detectors on 2 × 48 tokens: 3 blocks …" in lines, lines
    assert any(line.startswith("attnlab: detectors on 2 × 48 tokens: 3/3 blocks in ") for line in lines), lines

"""attnlab eval: RULER-style tasks of exact lengths, the metric, a resumable grid, bad input in one line."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
import torch

from attnlab.llm.eval.eval_grid import depth_grid, read_results, run_eval

from attnlab.llm.eval.eval_settings import EvalSettings, check_settings
from attnlab.llm.eval.tasks import NOISE, TASKS, Haystack, string_match_all

from char_model_folder import tiny_llama_folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 2-layer Llama (4 query / 2 KV heads) with a one-character tokenizer, saved as a HF folder."""
    from attnlab.llm.models.loading import load_causal_lm

    folder = tiny_llama_folder(tmp_path_factory.mktemp("tiny-llama"))

    model, tok = load_causal_lm(str(folder))
    return folder, model, tok


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("hay") / "hay.txt"
    lines = [f"Line {i} of a long and patient text about nothing in particular." for i in range(400)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_string_match_all_is_rulers_metric():
    assert string_match_all(" The number is 1234567.", ["1234567"]) == 1.0
    assert string_match_all("ABCDE and fghij", ["abcde", "FGHIJ", "KLMNO", "PQRST"]) == 0.5
    assert string_match_all("", ["x"]) == 0.0
    with pytest.raises(ValueError):
        string_match_all("x", [])


@pytest.mark.parametrize("name", [t for t in TASKS if t != "cwe"])
@pytest.mark.parametrize("hay_kind", ["noise", "file"])
def test_prompts_have_the_exact_length_and_hold_their_needles(tiny, text_file, name, hay_kind):
    _, _, tok = tiny
    hay = Haystack.noise(tok) if hay_kind == "noise" else Haystack.file(tok, text_file)
    for n in (700, 1500):
        s = TASKS[name].make(tok, hay, n, 0.5, 3, seed=1)
        assert len(s.ids) == n
        assert s.answers and s.spans
        needles = "".join("".join(tok.convert_ids_to_tokens(s.ids[a:b])) for a, b in s.spans)
        for value in s.answers:
            assert value in needles  # every expected string sits in an inserted piece
        again = TASKS[name].make(tok, hay, n, 0.5, 3, seed=1)
        assert again.ids == s.ids  # seeded
        other = TASKS[name].make(tok, hay, n, 0.5, 3, seed=2)
        assert other.answers != s.answers


def test_a_multikey_prompt_names_its_distractors_values(tiny):
    """``Sample.others``: the values of the needles not asked — each in the prompt, none asked; a one-needle task has none."""
    _, _, tok = tiny
    hay = Haystack.noise(tok)
    s = TASKS["niah-multikey"].make(tok, hay, 1500, 0.5, 3, seed=1)
    text = "".join(tok.convert_ids_to_tokens(s.ids))
    assert len(s.others) == 3 and not set(s.others) & set(s.answers)
    assert all(v in text for v in s.others)
    assert TASKS["niah"].make(tok, hay, 1500, 0.5, 3, seed=1).others == []


def test_depth_places_the_needle(tiny):
    _, _, tok = tiny
    hay = Haystack.noise(tok)
    n = 1500
    starts = [TASKS["niah"].make(tok, hay, n, d, 0, 0).spans[0][0] for d in depth_grid(5)]
    assert starts == sorted(starts)
    assert starts[0] < 0.2 * n and starts[-1] > 0.8 * n
    # the noise haystack is RULER's sentence
    assert NOISE in "".join(tok.convert_ids_to_tokens(TASKS["niah"].make(tok, hay, n, 1.0, 0, 0).ids))


def test_common_words_fit_or_refuse(tiny):
    from attnlab.errors import UserError

    _, _, tok = tiny
    hay = Haystack.noise(tok)
    s = TASKS["cwe"].make(tok, hay, 8192, None, 0, 0)
    assert len(s.ids) <= 8192 and len(s.answers) == 10
    text = "".join(tok.convert_ids_to_tokens(s.ids))
    for w in s.answers:
        assert text.count(w) >= 30
    with pytest.raises(UserError, match="--lengths"):
        TASKS["cwe"].make(tok, hay, 1000, None, 0, 0)


def test_haystack_file_too_short_is_refused(tiny, tmp_path):
    from attnlab.errors import UserError

    _, _, tok = tiny
    short = tmp_path / "short.txt"
    short.write_text("Too short.\n")
    with pytest.raises(UserError, match="--haystack"):
        TASKS["niah"].make(tok, Haystack.file(tok, short), 1000, 0.5, 0, 0)


def _strip(rows):
    drop = ("prefill_s", "decode_s", "seconds", "reused_tokens")  # what a run spent: a resumed run starts with no prefix held
    return sorted((json.dumps({k: v for k, v in r.items() if k not in drop}, sort_keys=True) for r in rows))


def test_a_killed_run_resumes_to_the_same_results(tiny, tmp_path):
    folder, model, tok = tiny
    settings = EvalSettings(model=str(folder), tasks=["niah", "vt"], lengths=[500, 700], depths=2, samples=2,
                            methods=["streaming-llm"], budgets=[0.5], haystack="noise", max_new=4)
    whole = run_eval(model, tok, check_settings(settings), tmp_path / "whole")
    runs, cells = 2, (2 + 1) * 2          # full + streaming-llm; niah at 2 depths + vt, 2 samples each
    assert len(whole) == 2 * runs * cells
    assert {r["method"] for r in whole} == {"full", "streaming-llm"}
    assert all(r["prompt_tokens"] == r["n"] for r in whole)
    part = tmp_path / "part"
    with pytest.raises(KeyboardInterrupt):
        run_eval(model, tok, check_settings(settings), part, stop_after=5)
    assert len(read_results(part / "results.jsonl")) == 5
    with open(part / "results.jsonl", "a") as f:  # a torn write at the kill
        f.write('{"key": "full|1|niah|3')
    resumed = run_eval(model, tok, check_settings(settings), part)
    assert _strip(resumed) == _strip(whole)
    assert _strip(read_results(part / "results.jsonl")) == _strip(whole)
    sl = [r for r in whole if r["method"] == "streaming-llm"]
    assert all(r["kv_tokens"] < r["n"] for r in sl)  # its cache evicts
    assert all(abs(r["beta"] - 0.5) < 0.05 for r in sl)


def test_report_writes_table_and_heatmaps(tiny, tmp_path):
    from attnlab.llm.eval.eval_report import summarise, write_report

    folder, model, tok = tiny
    settings = EvalSettings(model=str(folder), tasks=["niah"], lengths=[500], depths=3, samples=1, haystack="noise", max_new=2,
                            ppl=None)
    rows = run_eval(model, tok, check_settings(settings), tmp_path)
    summary = write_report(rows, tmp_path)
    assert (tmp_path / "table.md").read_text().count("| niah | 500 | full |") == 1
    assert [p.split("/")[-1] for p in summary["figures"]] == ["heatmap-niah-full.png"]
    # the ceiling rule: a made-up run where full scores 1 at one depth and 0 at the other
    fake = [{"kind": "answer", "method": m, "budget": b, "task": "niah", "n": 100, "depth": d, "score": s, "beta": 1.0,
             "kv_tokens": 1.0, "prefill_s": 0.0, "decode_s": 0.0}
            for m, b, d, s in [("full", 1.0, 0.0, 1.0), ("full", 1.0, 1.0, 0.0), ("x", 0.1, 0.0, 0.5), ("x", 0.1, 1.0, 1.0)]]
    row = [r for r in summarise(fake)["table"] if r["method"] == "x"][0]
    assert row["cells_full_ge_80"] == "1/2" and row["accuracy_on_those"] == 0.5 and row["kept_of_full"] == 0.5


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "attnlab", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def _hash(folder):
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("args,needle", [
    (["--task", "haystacks"], "--task"),
    (["--method", "snapkv2"], "--method"),
    (["--lengths", "4096"], "--lengths"),
    (["--lengths", "2k"], "--lengths"),
    (["--depths", "0"], "--depths"),
    (["--samples", "0"], "--samples"),
    (["--budget", "1.5", "--method", "streaming-llm"], "--budget"),
    (["--method", "attnlab"], "--calibrate"),
    (["--haystack", "missing.txt"], "--haystack"),
    (["--haystack", "SHORT"], "--haystack"),
    (["--plan", "PLAN"], "plan"),
    (["--max-new", "0"], "--max-new"),
    (["--calibrate-mix", "niah:2,needles:1"], "--calibrate-mix"),
    (["--calibrate-mix", "vt:0"], "--calibrate-mix"),
    (["--calibrate-mix", "vt:two"], "--calibrate-mix"),
    (["--calibrate-mix", "vt:1", "--method", "streaming-llm"], "--calibrate-mix"),
])
def test_bad_input_is_one_line_and_writes_nothing(tiny, tmp_path, args, needle):
    folder, _, _ = tiny
    short = tmp_path / "short.txt"
    short.write_text("A short text.\n")
    from attnlab.llm.plans.plan import HeadPlan, Plan

    other = Plan([[HeadPlan.full() for _ in range(3)] for _ in range(5)], 1, "full", 1.0, 500)  # another model's shape
    other.save(tmp_path / "other.json")
    args = [str(short) if a == "SHORT" else str(tmp_path / "other.json") if a == "PLAN" else a for a in args]
    out = tmp_path / "out"
    before = _hash(tmp_path)
    r = _cli("eval", "--hf", str(folder), "--lengths", "500", "--depths", "1", "--samples", "1", "--haystack", "noise",
             "--out", str(out), *args)
    assert r.returncode == 2, r.stderr
    lines = [l for l in r.stderr.strip().splitlines() if not (l.startswith("attnlab: ") and not l.startswith("attnlab: error: "))]
    # (the progress lines said before a refusal that comes after the model has loaded are not error lines)
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert _hash(tmp_path) == before and not out.exists()


@pytest.mark.parametrize("shape", [(3, 2), None])
def test_a_gate_file_for_another_model_is_refused_in_one_line_naming_it(tiny, tmp_path, shape):
    """duo-attention's gates are checked before anything runs: not a skipped row of a finished grid."""
    from attnlab.llm.plans.duo_training import GateTraining, save_gates

    folder, _, _ = tiny
    gates = tmp_path / "other-model.safetensors"
    if shape:
        save_gates(gates, torch.ones(*shape), "smollm2-135m", GateTraining())   # the tiny model has 2 layers × 2 KV heads
    else:
        gates.write_bytes(b"not a safetensors file")
    out = tmp_path / "out"
    before = _hash(tmp_path)
    r = _cli("eval", "--hf", str(folder), "--lengths", "500", "--depths", "1", "--samples", "1", "--haystack", "noise",
             "--method", f"duo-attention:gates={gates}", "--out", str(out))
    assert r.returncode == 2, r.stderr
    lines = [l for l in r.stderr.strip().splitlines() if not (l.startswith("attnlab: ") and not l.startswith("attnlab: error: "))]
    # (the progress lines said before a refusal that comes after the model has loaded are not error lines)
    assert len(lines) == 1 and str(gates) in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert ("another model (smollm2-135m" if shape else "not a gate file") in lines[0], lines[0]
    assert _hash(tmp_path) == before and not out.exists()


def test_other_settings_on_the_same_out_are_refused(tiny, tmp_path):
    folder, _, _ = tiny
    common = ["eval", "--hf", str(folder), "--lengths", "500", "--depths", "1", "--samples", "1", "--haystack", "noise",
              "--max-new", "2", "--out", str(tmp_path / "run")]
    assert _cli(*common).returncode == 0
    before = _hash(tmp_path)
    r = _cli(*common[:-2], "--samples", "2", "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "other settings" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert _hash(tmp_path) == before


def test_a_budget_a_method_cannot_meet_is_recorded_and_the_grid_goes_on(tiny, tmp_path):
    from attnlab.llm.eval.eval_report import markdown, summarise

    folder, model, tok = tiny
    settings = EvalSettings(model=str(folder), tasks=["niah"], lengths=[500], depths=1, samples=1, methods=["streaming-llm"],
                            budgets=[0.001, 0.5], haystack="noise", max_new=2)
    rows = run_eval(model, tok, check_settings(settings), tmp_path)
    skipped = [r for r in rows if r["kind"] == "skipped"]
    assert [(r["method"], r["budget"]) for r in skipped] == [("streaming-llm", 0.001)] and "below" in skipped[0]["reason"]
    assert {(r["method"], r["budget"]) for r in rows if r["kind"] == "answer"} == {("full", 1.0), ("streaming-llm", 0.5)}
    assert "not run" in markdown(summarise(rows))
    assert run_eval(model, tok, check_settings(settings), tmp_path) == rows  # resumed: nothing measured again


def test_a_later_run_may_add_methods_and_budgets(tiny, tmp_path):
    """The grid grows in its folder: the rows already there are kept and not measured again, config.json lists both."""
    folder, _, _ = tiny
    common = ["eval", "--hf", str(folder), "--lengths", "500", "--depths", "1", "--samples", "1", "--haystack", "noise",
              "--max-new", "2", "--out", str(tmp_path / "run")]
    assert _cli(*common).returncode == 0
    first = (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    r = _cli(*common, "--method", "streaming-llm", "--budget", "0.25")
    assert r.returncode == 0, r.stderr
    r = _cli(*common, "--method", "streaming-llm", "--budget", "0.5")   # the progress counts this grid's rows, not the folder's
    assert r.returncode == 0, r.stderr
    assert "eval: 2 rows, 1 done before" in r.stderr and "eval: 2/2 rows in" in r.stderr, r.stderr
    rows = (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    assert rows[:len(first)] == first and len(rows) == len(first) + 2
    assert [json.loads(x)["budget"] for x in rows[-2:]] == [0.25, 0.5]
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["methods"] == ["streaming-llm"] and cfg["budgets"] == [0.1, 0.25, 0.5]


def test_the_ppl_text_is_read_once_and_every_perplexity_row_is_measured_on_its_first_windows(tiny, tmp_path,
                                                                                           monkeypatch):
    """--ppl is read once where the settings are checked and tokenised once before the grid (not once per run and
    length), and each perplexity row is that of the text's first ``ppl_windows`` windows of n tokens (as
    ``token_windows`` cuts them)."""
    from attnlab import textfile
    from attnlab.llm.eval.perplexity import perplexity
    from attnlab.llm.models import text_windows
    from attnlab.llm.models.text_windows import TokenText, token_windows

    folder, model, tok = tiny
    text = tmp_path / "ppl.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 60)
    reads, tokenised = [], []
    read, of_text = textfile.read_text_file, TokenText.of_text.__func__

    def counted_read(path, *args, **kwargs):
        reads.append(str(path))
        return read(path, *args, **kwargs)

    def counted_tokens(cls, tokenizer, raw, path):
        tokenised.append(str(path))
        return of_text(cls, tokenizer, raw, path)

    monkeypatch.setattr(textfile, "read_text_file", counted_read)
    monkeypatch.setattr(text_windows, "read_text_file", counted_read)       # its own name of the reader
    monkeypatch.setattr(text_windows.TokenText, "of_text", classmethod(counted_tokens))
    settings = EvalSettings(model=str(folder), tasks=["niah"], lengths=[500, 700], depths=1, samples=1,
                            methods=["streaming-llm"], budgets=[0.25, 0.5], haystack="noise", max_new=2, ppl=str(text),
                            ppl_windows=2)
    rows = run_eval(model, tok, check_settings(settings), tmp_path / "run")
    ppl = [r for r in rows if r["kind"] == "ppl"]
    assert reads == [str(text)] and tokenised == [str(text)] and len(ppl) == 2 * 3   # 3 runs at 2 lengths
    full = [r for r in ppl if r["method"] == "full"]
    for r in full:
        assert r["windows"] == 2 and r["ppl"] == perplexity(model, token_windows(tok, text, r["n"], 2))


def test_the_grid_reads_no_file_the_settings_name_after_they_are_checked(tiny, text_file, tmp_path):
    """``check_settings`` reads --haystack and --ppl once; ``run_eval`` takes what it read: the files moved away after
    the check, the grid gives the rows it gives with them in place (haystack prompts and perplexity alike)."""
    from attnlab.errors import UserError

    folder, model, tok = tiny
    hay, ppl = tmp_path / "hay.txt", tmp_path / "ppl.txt"
    hay.write_text(text_file.read_text())
    ppl.write_text("the quick brown fox jumps over the lazy dog.\n" * 40)
    settings = EvalSettings(model=str(folder), tasks=["niah"], lengths=[400], depths=1, samples=1,
                            methods=["streaming-llm"], budgets=[0.5], haystack=str(hay), max_new=2, ppl=str(ppl))
    kept = run_eval(model, tok, check_settings(settings), tmp_path / "kept")
    checked = check_settings(settings)
    hay.rename(tmp_path / "hay-away.txt")
    ppl.rename(tmp_path / "ppl-away.txt")
    moved = run_eval(model, tok, checked, tmp_path / "moved")
    same = ("key", "score", "answer", "prompt_tokens", "ppl")
    assert [{k: r.get(k) for k in same} for r in moved] == [{k: r.get(k) for k in same} for r in kept]
    assert {r["kind"] for r in moved} == {"answer", "ppl"}
    with pytest.raises(UserError, match="--haystack"):
        check_settings(settings)                                             # the check itself still reads them


def test_run_eval_takes_the_checked_settings_only(tiny, tmp_path):
    """Settings handed to the grid unchecked are refused in one sentence naming ``check_settings``; nothing written."""
    folder, model, tok = tiny
    settings = EvalSettings(model=str(folder), lengths=[256], depths=1, samples=1, max_new=2)
    with pytest.raises(TypeError, match=r"check_settings\(settings\)"):
        run_eval(model, tok, settings, tmp_path / "run")
    assert not (tmp_path / "run").exists()

"""The end of ``attnlab eval``: the default against full attention with intervals, and the command for a lost prompt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from char_model_folder import tiny_llama_folder

from attnlab.llm.eval.eval_verdict import verdict_lines

ROOT = Path(__file__).resolve().parents[1]


def _answer(method: str, sample: int, score: float) -> dict:
    return {"kind": "answer", "method": method, "budget": 1.0 if method == "full" else 0.1, "task": "niah", "n": 2048,
            "depth": 0.5, "sample": sample, "score": score}


def test_the_default_comes_first_with_its_intervals_and_the_why_command():
    rows = [_answer("full", s, 1.0) for s in range(10)]
    rows += [_answer("snapkv", s, 1.0 if s < 2 else 0.0) for s in range(10)]
    rows += [_answer("attnlab", s, 1.0 if s < 8 else 0.0) for s in range(10)]
    lines = verdict_lines(rows, Path("runs/first eval"), "attnlab")
    assert lines[0].startswith("attnlab β=0.1, niah at n = 2048: 8/10 [49–94 %] against full's 10/10 [72–100 %]")
    assert "within noise" in lines[0] and "2 prompts full found and attnlab lost" in lines[0]
    assert "snapkv" in lines[1] and "intervals apart" in lines[1]
    assert "why attnlab lost 2 prompts: attnlab eval-why --out 'runs/first eval' --method attnlab" in lines


def test_a_method_that_loses_nothing_gets_no_why_command():
    rows = [_answer("full", s, 1.0 if s < 5 else 0.0) for s in range(10)]
    rows += [_answer("attnlab", s, 1.0 if s < 6 else 0.0) for s in range(10)]      # one more than full, none lost
    lines = verdict_lines(rows, Path("runs/x"))
    assert len(lines) == 1 and "above full attention, within noise" in lines[0] and "lost" not in lines[0]


def test_an_eval_ends_with_the_verdict(tmp_path):
    """The command a user runs prints the verdict as its last lines (a tiny model, one prompt)."""
    folder = tiny_llama_folder(tmp_path / "tiny")
    out = tmp_path / "eval"
    r = subprocess.run([sys.executable, "-m", "attnlab", "eval", "--hf", str(folder), "--lengths", "500", "--depths",
                        "1", "--samples", "1", "--haystack", "noise", "--method", "streaming-llm", "--out", str(out),
                        "--quiet"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    expected = verdict_lines(rows, out, "attnlab")
    assert expected and r.stdout.strip().splitlines()[-len(expected):] == expected
    assert expected[0].startswith("streaming-llm β=0.1, niah at n = 500: ")

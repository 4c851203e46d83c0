"""kvpress's rows in an eval table (``benchmarks/kvpress_eval.py``): the export holds the run's very prompts,
the import scores answers with string_match_all and the report marks them as reference rows.

The kvpress half (``benchmarks/kvpress_answers.py``) runs on a tiny model only where ``.venv-kvpress`` exists.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.llm.eval.eval_grid import read_results, run_eval

from attnlab.llm.eval.eval_settings import EvalSettings, check_settings

from char_model_folder import save_with_char_tokenizer

ROOT = Path(__file__).resolve().parents[1]
VENV_PY = ROOT / ".venv-kvpress" / "bin" / "python"
sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny eval run (full attention, niah at 500 tokens, 2 depths × 2 samples) and its exported prompts."""
    import transformers

    from attnlab.llm.models.loading import load_causal_lm
    from kvpress_eval import export_prompts

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=1024)
    folder = save_with_char_tokenizer(transformers.LlamaForCausalLM(cfg).eval(), tmp_path_factory.mktemp("tiny"))
    model, tok = load_causal_lm(str(folder))
    out = tmp_path_factory.mktemp("run")
    settings = EvalSettings(model=str(folder), lengths=[500], depths=2, samples=2, max_new=4)
    run_eval(model, tok, check_settings(settings), out)
    doc = export_prompts(out, out / "prompts.json", tokenizer=tok)
    return folder, tok, out, doc


def test_the_export_holds_the_prompts_attnlab_answered(run):
    folder, tok, out, doc = run
    full = {r["key"].split("|", 2)[2]: r for r in read_results(out / "results.jsonl") if r["kind"] == "answer"}
    assert sorted(full) == sorted(p["key"] for p in doc["prompts"])
    assert doc["model_dir"] == str(folder) and json.loads((out / "prompts.json").read_text()) == doc
    for p in doc["prompts"]:
        assert p["expected"] == full[p["key"]]["expected"] and len(p["ids"]) == full[p["key"]]["prompt_tokens"] == 500
        question = "".join(tok.convert_ids_to_tokens(p["ids"][p["question_at"] + 1:]))           # "\n" is [UNK] here
        assert question.startswith("What is the special magic number") and question.endswith("mentioned in the provided text is")
        assert p["expected"][0] not in question and p["max_new"] == 4


def _fake_answers(doc: dict, path: Path) -> None:
    """Two rows as kvpress_answers.py writes them: one right (no timings), one wrong."""
    a, b = doc["prompts"][:2]
    rows = [{"key": f"kvpress-snapkv|0.1|{a['key']}", "method": "kvpress-snapkv", "press": "snapkv", "compression": 0.9,
             "budget": 0.1, "question": "in context", "kvpress": "0.5.5", "answer": f" {a['expected'][0]}.", "kv_tokens": 30.0},
            {"key": f"kvpress-snapkv|0.1|{b['key']}", "method": "kvpress-snapkv", "press": "snapkv", "compression": 0.9,
             "budget": 0.1, "question": "in context", "kvpress": "0.5.5", "answer": " 12.", "kv_tokens": 30.0,
             "prefill_s": 0.5, "decode_s": 0.1, "new_tokens": 2}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_import_adds_scored_reference_rows_and_the_table_marks_them(run, tmp_path):
    import shutil

    from kvpress_eval import import_answers

    _, _, src, doc = run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    _fake_answers(doc, out / "answers.jsonl")
    before = len(read_results(out / "results.jsonl"))
    new = import_answers(out, out / "answers.jsonl", out / "prompts.json")
    assert [r["score"] for r in new] == [1.0, 0.0]
    assert all(r["kind"] == "answer" and r["reference"] == "kvpress 0.5.5" and "beta" not in r for r in new)
    assert len(read_results(out / "results.jsonl")) == before + 2
    assert import_answers(out, out / "answers.jsonl", out / "prompts.json") == []          # a second import adds nothing
    table = (out / "table.md").read_text()
    row = next(line for line in table.splitlines() if "kvpress-snapkv †" in line)
    assert "| 0.1 | – | 30 | – | – | 2 | 50.0 % |" in row and row.endswith("| 0.50 | 0 | 0.10 |")
    assert "† reference rows (kvpress 0.5.5)" in table and "| full |" in table
    assert (out / "heatmap-niah-kvpress-snapkv-0.1.png").is_file()


@pytest.mark.slow
@pytest.mark.skipif(not VENV_PY.exists(), reason="kvpress reference environment absent: run `make reference-env` (creates .venv-kvpress)")
def test_kvpress_answers_the_exported_prompts(run, tmp_path):
    from kvpress_eval import import_answers

    _, _, src, doc = run
    answers = tmp_path / "answers.jsonl"
    for split in ([], ["--split"]):
        subprocess.run([str(VENV_PY), str(ROOT / "benchmarks" / "kvpress_answers.py"), str(src / "prompts.json"), str(answers),
                        "--presses", "snapkv,streaming-llm", "--compressions", "0.5", "--limit", "1", *split],
                       check=True, capture_output=True, timeout=600)
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [r["method"] for r in rows] == ["kvpress-snapkv", "kvpress-streaming-llm", "kvpress-snapkv-split", "kvpress-streaming-llm-split"]
    p = doc["prompts"][0]
    assert [r["kv_tokens"] for r in rows] == [250.0, 250.0, p["question_at"] // 2, p["question_at"] // 2]
    assert all(r["budget"] == 0.5 and r["new_tokens"] <= 4 for r in rows)
    out = tmp_path / "run"
    import shutil

    shutil.copytree(src, out)
    assert len(import_answers(out, answers, out / "prompts.json")) == 4

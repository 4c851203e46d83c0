"""translate / evaluate on a trained run folder; checkpoint errors; every model kind trains."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from attnlab.config import ModelConfig, TrainConfig
from attnlab.errors import UserError
from attnlab.nn import build_model
from attnlab.train.checkpoint import latest_weights, load_run, load_weights
from attnlab.train.loop import train

ATTNLAB = [sys.executable, "-m", "attnlab"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def tiny(model="transformer", **kw):
    return ModelConfig(model=model, d_model=32, ff=64, layers=1, heads=2, max_len=48, **kw)


def tiny_train(**kw):
    return TrainConfig(data="synthetic", vocab_size=300, synthetic_pairs=300, max_tokens=600, warmup=5, lr=3e-3, dev_limit=10, **kw)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "tiny"
    train(tiny(), tiny_train(max_steps=30, checkpoint_every=10), out, quiet=True)
    return out


def cli(*args, stdin=None):
    return subprocess.run(ATTNLAB + list(args), input=stdin, capture_output=True, text=True, env=ENV)


def test_translate_reads_stdin_and_writes_one_line_per_sentence(run_dir):
    r = cli("translate", str(run_dir), stdin="the red car\nshe sees it\n")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 2
    r4 = cli("translate", str(run_dir), "--beam", "3", stdin="the red car\n")
    assert r4.returncode == 0 and len(r4.stdout.splitlines()) == 1


def test_evaluate_json_has_the_contract_keys(run_dir):
    r = cli("evaluate", str(run_dir), "--data", "synthetic", "--split", "test", "--limit", "20", "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert set(result) == {"bleu", "chrf", "sentences"}
    assert result["sentences"] == 20 and 0 <= result["bleu"] <= 100


def test_load_run_gives_an_eval_model_with_its_tokenizer(run_dir):
    run = load_run(run_dir)
    assert not run.model.training
    assert run.tokenizer.vocab_size == run.cfg.vocab_size


def test_checkpoint_of_another_configuration_is_refused(run_dir):
    other = ModelConfig(**{**run_dir_cfg(run_dir).__dict__, "d_model": 64, "ff": 64})
    with pytest.raises(UserError, match="another configuration"):
        load_weights(latest_weights(run_dir), build_model(other), other)


def run_dir_cfg(run_dir):
    return load_run(run_dir).cfg


def test_truncated_or_corrupted_checkpoint_is_a_one_line_error(run_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(run_dir, broken)
    weights = latest_weights(broken)
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    r = cli("translate", str(broken), stdin="the red car\n")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "corrupted or truncated" in r.stderr
    weights.write_bytes(b"\x00" * 64)
    r = cli("evaluate", str(broken), "--limit", "2")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_not_a_run_folder(tmp_path):
    r = cli("translate", str(tmp_path), stdin="x\n")
    assert r.returncode == 2 and "attnlab: error:" in r.stderr


@pytest.mark.parametrize("kind", ["gru", "lm"])
def test_gru_and_language_model_train(tmp_path, kind):
    result = train(tiny(kind), tiny_train(max_steps=15, log_every=1), tmp_path / kind, quiet=True)
    rows = [json.loads(l) for l in (tmp_path / kind / "metrics.jsonl").read_text().splitlines() if "loss" in l]
    assert result.steps == 15 and rows[-1]["loss"] < rows[0]["loss"]


def test_char_level_language_model_on_a_text_file(tmp_path):
    text = tmp_path / "poem.tsv"
    text.write_text("".join(f"line {i}\tthe quick brown fox jumps over the lazy dog {i}\n" for i in range(100)))
    result = train(tiny("lm"), TrainConfig(data=str(text), tokenizer="char", max_tokens=800, warmup=5, lr=3e-3, max_steps=10), tmp_path / "lm", quiet=True)
    assert result.steps == 10


def test_corpus_too_small_says_how_many_pairs_are_needed(tmp_path):
    tsv = tmp_path / "small.tsv"
    tsv.write_text("a\tb\n" * 3)
    r = cli("train", "--data", str(tsv), "--out", str(tmp_path / "o"), "--max-steps", "1")
    assert r.returncode == 2 and "at least" in r.stderr
    assert not (tmp_path / "o").exists()

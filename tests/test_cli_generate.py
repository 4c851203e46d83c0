"""The command line of language models on text: train, evaluate (loss / bpc / perplexity), generate; bad input."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from attnlab.config import ModelConfig, TrainConfig
from attnlab.train.loop import train

ATTNLAB = [sys.executable, "-m", "attnlab"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
VERSE = "ROMEO:\nBut, soft! what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n\n"


def cli(*args):
    return subprocess.run(ATTNLAB + [str(a) for a in args], capture_output=True, text=True, env=ENV)


def one_line_error(r, *fragments):
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnlab: error:"), r.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    folder = tmp_path_factory.mktemp("text")
    for split, reps in (("train", 40), ("dev", 3)):
        with gzip.open(folder / f"{split}.txt.gz", "wt", encoding="utf-8") as f:
            f.write(VERSE * reps)
    (folder / "test.txt").write_text(VERSE + "Zoë — naïve\n")  # Z, ë, —, ï, v: 5 characters the tokenizer never saw
    return folder


@pytest.fixture(scope="module")
def lm_run(text, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "lm"
    cfg = ModelConfig(model="lm", d_model=32, ff=64, layers=1, heads=2, max_len=32, norm="pre", dropout=0.0)
    tc = TrainConfig(data=str(text / "train.txt.gz"), tokenizer="char", context=32, batch_size=8, lr=3e-3, warmup=5,
                     label_smoothing=0.0, max_steps=30, eval_every=15, schedule="cosine")
    train(cfg, tc, out, quiet=True)
    return out


def test_train_command_on_text_writes_dev_scores(text, tmp_path):
    out = tmp_path / "run"
    r = cli("train", "--model", "lm", "--data", text / "train.txt.gz", "--tokenizer", "char", "--context", 16,
            "--batch-size", 4, "--layers", 1, "--d-model", 16, "--ff", 32, "--heads", 2, "--norm", "pre",
            "--max-steps", 4, "--eval-every", 2, "--schedule", "cosine", "--warmup", 2, "--out", out, "--quiet")
    assert r.returncode == 0, r.stderr
    assert "best dev loss" in r.stderr
    cfg = (out / "config.toml").read_text()
    assert "max_len = 16" in cfg and "context = 16" in cfg and "label_smoothing = 0.0" in cfg
    assert (out / "checkpoints" / "best.safetensors").is_file()


def test_evaluate_prints_loss_bpc_perplexity_and_counts_unknown_characters(lm_run, text):
    r = cli("evaluate", lm_run, "--data", text / "train.txt.gz", "--split", "dev", "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert {"loss", "bpc", "perplexity", "tokens", "unknown"} <= set(result)
    # char level: bpc = L / ln 2 up to the one leading ▁ token of the stream (N + 1 tokens for N characters)
    assert result["bpc"] == pytest.approx(result["loss"] / 0.6931471805599453, rel=1e-2)
    assert result["unknown"] == 0
    r = cli("evaluate", lm_run, "--data", text, "--split", "test")  # a folder; test.txt has unseen characters
    assert r.returncode == 0, r.stderr
    assert "bits/char" in r.stdout and "perplexity" in r.stdout and "5 unknown" in r.stdout


def test_generate_streams_a_continuation_reproducibly(lm_run):
    a = cli("generate", lm_run, "ROMEO:", "--tokens", 40, "--seed", 1)
    b = cli("generate", lm_run, "ROMEO:", "--tokens", 40, "--seed", 1)
    assert a.returncode == 0, a.stderr
    assert a.stdout.startswith("ROMEO:") and a.stdout == b.stdout
    assert len(a.stdout) >= len("ROMEO:") + 40 - 1  # 40 characters (a space decodes to one)
    greedy = cli("generate", lm_run, "ROMEO:", "--tokens", 60, "--temperature", 0, "--seed", 5)
    assert greedy.returncode == 0 and greedy.stdout == cli("generate", lm_run, "ROMEO:", "--tokens", 60, "--temperature", 0).stdout
    long = cli("generate", lm_run, "R", "--tokens", 80)  # longer than max_len 32: the window slides
    assert long.returncode == 0, long.stderr


@pytest.fixture(scope="module")
def translation_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "mt"
    cfg = ModelConfig(model="transformer", d_model=16, ff=32, layers=1, heads=2, max_len=32)
    tc = TrainConfig(data="synthetic", vocab_size=200, synthetic_pairs=100, max_tokens=400, max_steps=2, dev_limit=0)
    train(cfg, tc, out, quiet=True)
    return out


def test_generate_bad_input_is_one_line(lm_run, translation_run):
    one_line_error(cli("generate", translation_run, "hello"), "language model", "transformer")
    one_line_error(cli("generate", lm_run, "ROMEO:", "--temperature", -0.5), "--temperature")
    one_line_error(cli("generate", lm_run, "ROMEO:", "--tokens", 0), "--tokens")
    one_line_error(cli("generate", lm_run, "ROMEO:", "--top-k", -1), "--top-k")


def test_evaluate_bad_input_is_one_line(lm_run, text, tmp_path):
    one_line_error(cli("evaluate", lm_run, "--data", text, "--split", "dev", "--context", 64), "--context 64", "maximum")
    one_line_error(cli("evaluate", lm_run, "--data", "synthetic"), "plain text")
    binary = tmp_path / "dev.txt"
    binary.write_bytes(b"\x00\x01\x02 binary")
    one_line_error(cli("evaluate", lm_run, "--data", binary, "--split", "dev"), str(binary), "binary")


@pytest.mark.parametrize("content, message", [(b"", "empty text file"), (b"PK\x03\x04\x00\x00binary", "binary")])
def test_train_on_empty_or_binary_text_is_one_line_and_replaces_nothing(tmp_path, content, message):
    data = tmp_path / "train.txt"
    data.write_bytes(content)
    out = tmp_path / "old-run"
    out.mkdir()
    (out / "config.toml").write_text("[model]\nmodel = 'lm'\n")  # an attnlab run: --force may replace it, once the data is good
    (out / "keep.txt").write_text("an earlier run")
    r = cli("train", "--model", "lm", "--data", data, "--tokenizer", "char", "--context", 16, "--max-steps", 1,
            "--out", out, "--force")
    one_line_error(r, str(data), message)
    assert (out / "keep.txt").read_text() == "an earlier run"


def test_train_context_longer_than_max_len_is_one_line(text, tmp_path):
    r = cli("train", "--model", "lm", "--data", text / "train.txt.gz", "--tokenizer", "char", "--context", 64,
            "--max-len", 32, "--max-steps", 1, "--out", tmp_path / "run")
    one_line_error(r, "--context 64", "maximum --max-len 32")
    assert not (tmp_path / "run").exists()
    r = cli("train", "--model", "transformer", "--data", text / "train.txt.gz", "--max-steps", 1, "--out", tmp_path / "run")
    one_line_error(r, "--model lm")
    r = cli("train", "--data", "synthetic", "--context", 64, "--max-steps", 1, "--out", tmp_path / "run")
    one_line_error(r, "--context", "plain text")

"""``attnlab embeddings`` and ``attnlab neighbours`` end to end, and their one-line errors."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnlab.cli import app
from attnlab.errors import UserError
from attnlab.train.skipgram import WordVectors, train_embeddings


def run_ok(*args: str) -> str:
    """Run a command in-process (no interpreter start-up); it must succeed; returns stdout."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def attnlab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real command line in a subprocess (real exit code and stderr), for the errors."""
    return subprocess.run([sys.executable, "-m", "attnlab", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})


def assert_one_line_error(p: subprocess.CompletedProcess, *words: str) -> None:
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stderr.startswith("attnlab: error: ") and p.stderr.count("\n") == 1, p.stderr
    assert "Traceback" not in p.stderr
    for w in words:
        assert w in p.stderr


@pytest.fixture(scope="module")
def topic_tsv(tmp_path_factory) -> Path:
    """English side: two topics that never meet in a sentence; Italian side: a fixed word."""
    rng = random.Random(0)
    topics = [["cat", "dog", "pet", "fur", "paw", "tail"], ["car", "road", "wheel", "engine", "tyre", "fuel"]]
    lines = []
    for i in range(600):
        words = [rng.choice(topics[i % 2]) for _ in range(6)]
        lines.append(" ".join(words).capitalize() + ".\t" + " ".join(reversed(words)) + "!")
    path = tmp_path_factory.mktemp("data") / "train.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trained(topic_tsv, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("emb") / "vec.safetensors"
    stdout = run_ok("embeddings", "--data", topic_tsv, "--side", "src", "--dim", "8", "--window", "2", "--min-count", "1",
                    "--epochs", "12", "--out", out, "--plot", out.with_suffix(".png"))
    assert "full softmax" in stdout and str(out) in stdout
    return out


def test_embeddings_writes_vectors_and_plot(trained):
    wv = WordVectors.load(trained)
    assert set(wv.words) == {"cat", "dog", "pet", "fur", "paw", "tail", "car", "road", "wheel", "engine", "tyre", "fuel"}
    assert wv.vectors.shape == (12, 8)
    assert wv.meta["side"] == "src" and wv.meta["negative"] == 0 and wv.meta["epochs"] == 12
    assert trained.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_neighbours_lists_words_of_the_same_topic(trained):
    rows = [line.split("\t") for line in run_ok("neighbours", trained, "cat", "-k", "5").strip().splitlines()]
    assert {w for w, _ in rows} == {"dog", "pet", "fur", "paw", "tail"}
    cos = [float(c) for _, c in rows]
    assert cos == sorted(cos, reverse=True)


def test_negative_sampling_option(topic_tsv, tmp_path):
    out = tmp_path / "neg.safetensors"
    run_ok("embeddings", "--data", topic_tsv, "--side", "tgt", "--dim", "4", "--window", "1", "--min-count", "1",
           "--negative", "2", "--epochs", "1", "--out", out)
    wv = WordVectors.load(out)
    assert wv.meta["loss"] == "negative sampling" and wv.meta["side"] == "tgt"


def test_word_not_in_vocabulary_is_a_one_line_error(trained):
    assert_one_line_error(attnlab("neighbours", trained, "zebra"), "zebra", "not in the vocabulary")


def test_missing_embeddings_file_is_a_one_line_error(tmp_path):
    assert_one_line_error(attnlab("neighbours", tmp_path / "nope.safetensors", "cat"), "nope.safetensors")


def test_empty_corpus_is_a_one_line_error(tmp_path):
    empty = tmp_path / "empty.tsv"
    empty.write_text("", encoding="utf-8")
    out = tmp_path / "x.safetensors"
    assert_one_line_error(attnlab("embeddings", "--data", empty, "--out", out), "empty")
    assert not out.exists()
    punct = tmp_path / "punct.tsv"  # pairs, but no word on the chosen side
    punct.write_text("...\tciao\n?\tbene\n", encoding="utf-8")
    with pytest.raises(UserError, match="src side .* has no words"):
        train_embeddings(str(punct), "src", out=out)
    assert not out.exists()


def test_minutes_and_epochs_together_is_a_one_line_error(topic_tsv, tmp_path):
    assert_one_line_error(attnlab("embeddings", "--data", topic_tsv, "--minutes", "1", "--epochs", "2",
                                  "--out", tmp_path / "x.safetensors"), "--minutes", "--epochs")

"""Nothing lost, nothing silently wrong: one test per class of bad input.

Every refusal is checked the same way: exit code 2, one line ``attnlab: error: ...``
naming the option or the file, and — by the SHA-256 of every file under the
folder before and after — nothing written, nothing removed.

Classes: (1) what ``--force`` may remove and what a command may overwrite;
(2) the folder lock; (3) option ranges (one table, ``attnlab.cli.options``),
specs parsed fully, ``--resume`` with other options, memory estimated before
allocation; (4) corrupt checkpoints; (5) inputs that used to end in a traceback.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from attnlab.config import ModelConfig, TrainConfig
from attnlab.train.loop import train
from conftest import run_attnlab

SHAPE = ["--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32",
        "--vocab-size", "60", "--tokenizer", "word", "--max-len", "32", "--max-tokens", "400",
        "--dev-limit", "0", "--quiet"]
TINY = ["--synthetic-pairs", "120", *SHAPE]


def hashes(folder: Path) -> dict[str, str]:
    """relative path -> SHA-256 of every file under ``folder`` (folders listed too)."""
    out = {}
    for p in sorted(Path(folder).rglob("*")):
        out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def attnlab(capsys, monkeypatch, *args, stdin: bytes = b""):
    """Run ``attnlab ARGS`` in this process (``conftest.run_attnlab``, stdin empty unless given); returns (exit code,
    stdout, stderr)."""
    return tuple(run_attnlab(capsys, monkeypatch, *args, stdin=stdin))


def refused(capsys, monkeypatch, folder: Path, *args, needles=(), stdin: bytes = b"") -> str:
    """The command is refused: exit 2, one error line (the last; progress lines may come before it, no
    traceback) holding every needle, and no file under ``folder`` changed."""
    before = hashes(folder)
    code, out, err = attnlab(capsys, monkeypatch, *args, stdin=stdin)
    lines = err.strip().splitlines()
    assert code == 2, (code, out, err)
    errors = [line for line in lines if line.startswith("attnlab: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0] and "Traceback" not in err, err
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    assert hashes(folder) == before, "a refused command changed files"
    return errors[0]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny trained run (2 steps), read-only for the tests: they copy it when they need to change it."""
    out = tmp_path_factory.mktemp("bad") / "run"
    model = ModelConfig(d_model=16, heads=2, layers=1, ff=32, max_len=32)
    tc = TrainConfig(tokenizer="word", vocab_size=60, synthetic_pairs=120, max_tokens=400, max_steps=2, dev_limit=0)
    train(model, tc, out, quiet=True)
    return out


@pytest.fixture
def work(tmp_path, monkeypatch, run_dir) -> Path:
    """A scratch folder (the current folder) holding a copy of the run and a small corpus."""
    import shutil

    shutil.copytree(run_dir, tmp_path / "run")
    (tmp_path / "corpus.tsv").write_text("".join(f"the cat {i}\til gatto {i}\n" for i in range(60)), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ---------------------------------------------------------------- (1) --force and overwrites

def test_force_refuses_what_attnlab_did_not_make(work, capsys, monkeypatch):
    mine = work / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work\n")
    refused(capsys, monkeypatch, work, "train", "--out", mine, "--force", "--max-steps", "1", *TINY,
            needles=("--force", "mine", "not an attnlab run folder", "refusing to delete"))
    # the current folder and its ancestors, even when they look like a run
    monkeypatch.chdir(work / "run")
    refused(capsys, monkeypatch, work, "train", "--out", ".", "--force", "--max-steps", "1", *TINY,
            needles=("current folder or one of its ancestors",))
    refused(capsys, monkeypatch, work, "train", "--out", "..", "--force", "--max-steps", "1", *TINY,
            needles=("current folder or one of its ancestors",))
    # a run folder holding an input of the command
    monkeypatch.chdir(work)
    (work / "run" / "corpus.tsv").write_bytes((work / "corpus.tsv").read_bytes())
    refused(capsys, monkeypatch, work, "train", "--out", "run", "--force", "--data", "run/corpus.tsv", "--max-steps", "1", *TINY,
            needles=("contains corpus.tsv", "--data"))


def test_force_removes_nothing_before_everything_is_validated(work, capsys, monkeypatch):
    # a typo in --data, a bad option, a corpus too small: the run is still there
    refused(capsys, monkeypatch, work, "train", "--out", "run", "--force", "--data", "corpsu.tsv", "--max-steps", "1", *TINY,
            needles=("corpsu.tsv",))
    refused(capsys, monkeypatch, work, "train", "--out", "run", "--force", "--max-steps", "1", *TINY, "--heads", "0",
            needles=("--heads",))
    (work / "small.tsv").write_text("a\tb\n" * 3)
    refused(capsys, monkeypatch, work, "train", "--out", "run", "--force", "--data", "small.tsv", "--max-steps", "1", *TINY,
            needles=("at least 50",))
    # and with everything valid, --force does replace the run (the refusals above are not blanket ones)
    before = hashes(work / "run")
    code, _, err = attnlab(capsys, monkeypatch, "train", "--out", "run", "--force", "--data", "corpus.tsv", "--max-steps", "1", *TINY)
    assert code == 0, err
    assert hashes(work / "run") != before and "tokenizer.json" in hashes(work / "run")


def test_no_command_overwrites_an_input_or_an_earlier_output(work, capsys, monkeypatch):
    # embeddings over its own corpus: refused with or without --force
    for force in ([], ["--force"]):
        refused(capsys, monkeypatch, work, "embeddings", "--data", "corpus.tsv", "--out", "corpus.tsv", *force,
                needles=("--out corpus.tsv", "input of --data"))
    # an earlier output: each writing command asks for --force
    (work / "vectors.safetensors").write_bytes(b"earlier output")
    refused(capsys, monkeypatch, work, "embeddings", "--data", "corpus.tsv", "--out", "vectors.safetensors",
            needles=("vectors.safetensors", "exists", "--force"))
    np.save(work / "heads.npy", np.full((2, 6, 6), 1 / 6))
    (work / "sweep.csv").write_text("earlier sweep\n")
    refused(capsys, monkeypatch, work, "sweep", "heads.npy", "--w", "0..2", "--num-pos", "0..1",
            needles=("sweep.csv", "exists", "--force"))
    refused(capsys, monkeypatch, work, "sweep", "heads.npy", "--w", "0..2", "--out", "heads.npy",
            needles=("heads.npy exists and is not a folder",))
    code, _, err = attnlab(capsys, monkeypatch, "attention", "run", "the cat sleeps", "--out", "att")
    assert code == 0, err
    refused(capsys, monkeypatch, work, "attention", "run", "the dog sleeps", "--out", "att",
            needles=("--out att", "not empty", "--force"))
    refused(capsys, monkeypatch, work, "attention", "--maps", "att/attention.safetensors", "--out", "att", "--force",
            needles=("contains attention.safetensors", "--maps"))
    refused(capsys, monkeypatch, work, "attention", "run", "the dog sleeps", "--out", "run", "--force",
            needles=("--out run", "input of RUN_DIR"))
    code, _, err = attnlab(capsys, monkeypatch, "attention", "run", "the dog sleeps", "--out", "att", "--force")
    assert code == 0, err
    assert not (work / "att" / "attnlab.lock").exists(), "the lock file goes with its holder"


def test_a_failed_resume_rewrites_nothing(work, capsys, monkeypatch):
    weights = max((work / "run" / "checkpoints").glob("step_*[0-9].safetensors"))
    data = bytearray(weights.read_bytes())
    data[-64:] = bytes(64)  # zero the last tensor bytes
    weights.write_bytes(bytes(data))
    refused(capsys, monkeypatch, work, "train", "--out", "run", "--resume", "--max-steps", "9",
            needles=(weights.name, "corrupted"))


# ---------------------------------------------------------------- (2) one writer per folder

def test_a_second_writer_is_refused_naming_the_holder(work, capsys, monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from attnlab.lock import FolderLock
        with FolderLock(sys.argv[1]):
            print("locked", flush=True)
            time.sleep(60)
    """), str(work / "run")], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        assert holder.stdout.readline().strip() == "locked"
        for args in (["train", "--out", "run", "--resume", "--max-steps", "9"],
                     ["train", "--out", "run", "--force", "--max-steps", "1", *TINY]):
            refused(capsys, monkeypatch, work, *args, needles=("--out run", f"PID {holder.pid}", "in use"))
    finally:
        holder.kill()
        holder.wait()
    # the kernel dropped the dead holder's lock: the next writer goes ahead
    code, _, err = attnlab(capsys, monkeypatch, "train", "--out", "run", "--resume", "--max-steps", "3")
    assert code == 0, err


def test_two_trains_on_one_folder(work, capsys, monkeypatch):
    """The issue's case: two `attnlab train` on the same --out; the second is refused while the first runs."""
    import signal
    import time

    first = subprocess.Popen([sys.executable, "-m", "attnlab", "train", "--out", "busy", "--minutes", "1",
                              "--max-steps", "1000000", *TINY], cwd=work, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1",
                                  "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    lock = work / "busy" / "attnlab.lock"
    try:
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().strip()):
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.poll() is not None else "no lock"
            time.sleep(0.05)
        code, _, err = attnlab(capsys, monkeypatch, "train", "--out", "busy", "--force", "--max-steps", "1", *TINY)
        assert code == 2 and f"--out busy: in use by another attnlab process (PID {first.pid})" in err, err
    finally:
        first.send_signal(signal.SIGTERM)  # in the loop: finishes its step and exits 130; before it: killed
        first.wait(120)
    assert first.returncode in (130, -signal.SIGTERM), first.stderr.read()
    from attnlab.lock import FolderLock

    FolderLock(work / "busy").acquire().release()  # gone, the holder's lock went with it


# ---------------------------------------------------------------- (3) options, specs, resources

@pytest.mark.parametrize("args, needles", [
    (["--heads", "0"], ["--heads", "[1, 4096]", "got 0"]),
    (["--checkpoint-every", "0"], ["--checkpoint-every", "got 0"]),
    (["--log-every", "0"], ["--log-every", "got 0"]),
    (["--label-smoothing", "1.5"], ["--label-smoothing", "[0.0, 1.0)", "1.5"]),
    (["--dropout", "1"], ["--dropout", "1.0)"]),
    (["--lr", "nan"], ["--lr", "finite"]),
    (["--minutes", "inf"], ["--minutes", "finite"]),
    (["--optimizer", "sgd"], ["--optimizer", "adamw", "muon", "sgd"]),
    (["--optimizer", "muon", "--muon-lr", "0"], ["--muon-lr", "got 0"]),
    (["--muon-lr", "0.05"], ["--muon-lr", "--optimizer muon"]),  # AdamW would ignore it
    (["--value-rank", "17"], ["--value-rank", "--d-model is 16", "got 17"]),
    (["--attention-on", "encoder,decodr"], ["--attention-on", "decodr"]),
    (["--attention-on", ""], ["--attention-on"]),
    (["--attention", "band", "--w", "100000000"], ["--w: must be <= max_len (32)"]),  # was an allocator traceback
    (["--attention", "bigbird", "--num-random", "100000"], ["--num-random: must be <= max_len"]),  # was killed (memory)
    (["--attention", "structured", "--sparse", "1000"], ["--sparse: must be <= max_len"]),  # was silently clamped
    (["--model", "lm", "--attention", "band", "--attention-on", "cross"], ["--attention-on: got 'cross'", "decoder"]),
    (["--attention", "bandd"], ["--attention must be one of", "bigbird", "bandd"]),
    (["--vocab-size", "5000000000"], ["--vocab-size", "got 5000000000"]),
    (["--d-model", "300000"], ["needs about", "GB", "d_model 300000", "available"]),
    (["--data", "synthetic:n=abc"], ["synthetic:n=abc", "not an integer"]),
    (["--data", "synthetic:n=0"], ["n must be in [1,"]),
    (["--data", "synthetic:n=100,n=200"], ["n given twice"]),
    (["--data", "synthetic:size=100"], ["unknown option"]),
    (["--data", "synthetic:n=100", "--synthetic-pairs", "500"], ["n=100", "--synthetic-pairs is 500"]),
    (["--seed", "-1"], ["--seed"]),
    (["--device", "cuda:7" if not __import__("torch").cuda.is_available() else "cuda:999"], ["--device", "cuda"]),
    (["--device", "tpu9"], ["--device", "tpu9"]),
])
def test_train_option_out_of_range(work, capsys, monkeypatch, args, needles):
    # the TINY defaults come first: the option under test, later on the line, wins
    refused(capsys, monkeypatch, work, "train", "--out", "new", "--max-steps", "1", *TINY, *args, needles=needles)
    assert not (work / "new").exists()


def test_every_number_option_of_every_command_has_a_rule():
    """The table is complete: a new int/float option without a range fails here (attnlab/cli/options.py RULES)."""
    import typing

    import typer

    from attnlab.cli import app
    from attnlab.cli.options import _rule

    group = typer.main.get_command(app)
    missing = []
    commands = {}
    for name, command in group.commands.items():  # a group (attnlab models …): each of its commands as "models fetch"
        subs = getattr(command, "commands", None)
        commands.update({f"{name} {sub}": c for sub, c in subs.items()} if subs else {name: command})
    for name, command in commands.items():
        assert getattr(command.callback, "checked_as", None) == name, f"{name}: decorate it with @checked({name!r})"
        hints = typing.get_type_hints(command.callback)
        for param, hint in hints.items():
            numeric = {int, float} & {hint, *typing.get_args(hint)}  # int, float, Optional[int] ...
            if numeric and _rule(name, param) is None:
                missing.append(f"{name} {param}")
    assert not missing, missing
    assert len(group.commands) >= 11


def test_memory_estimate_refuses_what_cannot_fit_and_passes_what_does():
    from attnlab.errors import UserError
    from attnlab.train.resources import check_fits, training_bytes

    small = ModelConfig(vocab_size=60, d_model=16, heads=2, layers=1, ff=32, max_len=32)
    assert check_fits(small, 400) == sum(training_bytes(small, 400).values())
    big_vocab = ModelConfig(vocab_size=2**20, d_model=512, heads=8, layers=6, ff=2048, max_len=512)
    parts = training_bytes(big_vocab, 2**20)
    assert parts["logits"] == 12 * 2**20 * 2**20  # 12 TiB: T × V logits, their log-softmax and gradient
    with pytest.raises(UserError, match=r"needs about .* GB .* available"):
        check_fits(big_vocab, 2**20)
    band = ModelConfig(vocab_size=60, d_model=16, heads=2, layers=1, ff=32, max_len=8192, attention="band", w=4)
    full = ModelConfig(vocab_size=60, d_model=16, heads=2, layers=1, ff=32, max_len=8192, scoring="additive")  # A formed explicitly
    sdpa = ModelConfig(vocab_size=60, d_model=16, heads=2, layers=1, ff=32, max_len=8192)  # flash-style: no n×n kept
    assert training_bytes(sdpa, 2**16)["activations"] <= training_bytes(band, 2**16)["activations"]
    assert training_bytes(band, 2**16)["activations"] < training_bytes(full, 2**16)["activations"] / 100


@pytest.mark.parametrize("option", [["--attention", "band"], ["--heads", "8"], ["--w", "3"]])
def test_an_option_the_model_does_not_read_is_refused(work, capsys, monkeypatch, option):
    refused(capsys, monkeypatch, work, "train", "--out", "new", "--max-steps", "1", "--model", "gru", *option,
            needles=(f"--model gru does not use {option[0]}",))


def test_synthetic_spec_is_honoured(work, capsys, monkeypatch):
    code, _, err = attnlab(capsys, monkeypatch, "train", "--out", "n60", "--max-steps", "1", *SHAPE, "--data", "synthetic:n=60")
    assert code == 0, err
    assert "synthetic:n=60: 60 training pairs" in err


@pytest.mark.parametrize("args, needles", [
    (["--heads", "4"], ["--resume", "--heads 4", "heads = 2"]),
    (["--data", "corpus.tsv"], ["--data corpus.tsv", "data = 'synthetic'"]),
    (["--attention", "band"], ["--attention band", "attention = 'full'"]),
    (["--optimizer", "muon"], ["--optimizer muon", "optimizer = 'adamw'"]),
    (["--muon-lr", "0.05"], ["--muon-lr 0.05", "muon_lr = 0.02"]),
    (["--force"], ["--force", "--resume"]),
    (["--init-embeddings", "corpus.tsv"], ["--init-embeddings", "--resume"]),
])
def test_resume_refuses_other_options(work, capsys, monkeypatch, args, needles):
    refused(capsys, monkeypatch, work, "train", "--out", "run", "--resume", "--max-steps", "9", *args, needles=needles)


def test_experiment_resume_refuses_other_options(work, capsys, monkeypatch):
    from attnlab.experiment.settings import settings_for
    from attnlab.experiment.stages import MARKER, write_json

    (work / "exp").mkdir()
    write_json(work / "exp" / MARKER, settings_for("synthetic", quick=True).to_dict())
    refused(capsys, monkeypatch, work, "experiment", "--out", "exp", "--resume", "--quick", "--deep",
            needles=("--resume", "--quick", "give the same options"))  # --deep was silently ignored
    refused(capsys, monkeypatch, work, "experiment", "--out", "exp", "--resume", needles=("give the same options",))
    refused(capsys, monkeypatch, work, "experiment", "--out", "run", "--force", "--quick",
            needles=("not an experiment run folder",))


@pytest.mark.parametrize("args, needles", [
    (["translate", "run", "--length-penalty", "nan"], ["--length-penalty", "finite"]),
    (["translate", "run", "--beam", "0"], ["--beam", "got 0"]),
    (["translate", "run", "--beam", "500"], ["--beam", "vocabulary of run", "got 500"]),
    (["evaluate", "run", "--limit", "-1"], ["--limit", "got -1"]),
    (["evaluate", "run", "--beam", "300", "--limit", "2"], ["--beam", "vocabulary"]),
    (["evaluate", "run", "--split", "valid"], ["--split", "valid"]),
    (["roles", "run", "--data", "synthetic", "--limit", "0"], ["--limit", "got 0"]),
    (["embeddings", "--data", "corpus.tsv", "--dim", "0", "--out", "v.safetensors"], ["--dim", "got 0"]),
    (["embeddings", "--data", "corpus.tsv", "--window", "-2", "--out", "v.safetensors"], ["--window"]),
    (["neighbours", "x.safetensors", "cat", "-k", "0"], ["-k", "got 0"]),
    (["approximate", "heads.npy", "--attempts", "0"], ["--attempts"]),
    (["bpe-steps", "abcab", "--vocab-size", "0"], ["--vocab-size"]),
])
def test_every_command_checks_its_options(work, capsys, monkeypatch, args, needles):
    np.save(work / "heads.npy", np.full((2, 6, 6), 1 / 6))
    refused(capsys, monkeypatch, work, *args, needles=needles, stdin=b"the cat\n")


# ---------------------------------------------------------------- (4) corrupt checkpoints

def test_corrupt_checkpoint_is_one_line_naming_the_file(work, capsys, monkeypatch):
    weights = max((work / "run" / "checkpoints").glob("step_*[0-9].safetensors"))
    data = bytearray(weights.read_bytes())
    data[-40:-36] = b"\xff\xff\xff\x7f"  # a NaN where a float was: the header still parses
    weights.write_bytes(bytes(data))
    refused(capsys, monkeypatch, work, "translate", "run", needles=(weights.name, "corrupted"), stdin=b"the cat\n")
    refused(capsys, monkeypatch, work, "evaluate", "run", "--limit", "2", needles=(weights.name, "corrupted"))


def test_checkpoints_without_checksum_still_load_and_nan_is_refused(work, capsys, monkeypatch):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    weights = max((work / "run" / "checkpoints").glob("step_*[0-9].safetensors"))
    with safe_open(str(weights), framework="pt") as f:
        meta = f.metadata()
    tensors = load_file(str(weights))
    old_meta = {k: v for k, v in meta.items() if k != "attnlab.sha256"}
    assert len(old_meta) < len(meta)
    save_file(tensors, str(weights), metadata=old_meta)  # as attnlab wrote it before the checksum
    code, out, err = attnlab(capsys, monkeypatch, "translate", "run", stdin=b"the cat\n")
    assert code == 0 and len(out.splitlines()) == 1, err
    name = min(k for k, t in tensors.items() if t.is_floating_point())
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, str(weights), metadata=old_meta)
    refused(capsys, monkeypatch, work, "translate", "run", needles=(weights.name, name, "NaN"), stdin=b"the cat\n")


def test_corrupt_training_state_is_refused_on_resume(work, capsys, monkeypatch):
    state = max((work / "run" / "checkpoints").glob("step_*.state.safetensors"))
    data = bytearray(state.read_bytes())
    data[-16:] = b"\x01" * 16
    state.write_bytes(bytes(data))
    refused(capsys, monkeypatch, work, "train", "--out", "run", "--resume", "--max-steps", "9",
            needles=(state.name, "corrupted"))


# ---------------------------------------------------------------- (5) what used to be a traceback

def test_gzip_with_a_good_header_and_a_corrupt_body(work, capsys, monkeypatch):
    body = gzip.compress(("the cat\til gatto\n" * 300).encode())
    broken = bytearray(body)
    broken[20:40] = bytes(b ^ 0x55 for b in broken[20:40])
    (work / "bad.tsv.gz").write_bytes(bytes(broken))
    (work / "cut.tsv.gz").write_bytes(body[: len(body) // 2])
    for name in ("bad.tsv.gz", "cut.tsv.gz"):
        refused(capsys, monkeypatch, work, "train", "--out", "new", "--data", name, "--max-steps", "1", *TINY,
                needles=(name, "corrupt gzip"))
        refused(capsys, monkeypatch, work, "evaluate", "run", "--data", name, needles=(name, "corrupt gzip"))


def test_non_utf8_on_translate_stdin(work, capsys, monkeypatch):
    refused(capsys, monkeypatch, work, "translate", "run", stdin=b"the cat\nab\xff\xfe c\n",
            needles=("stdin:2", "not UTF-8", "0xff"))


@pytest.mark.parametrize("text, needles", [
    ("1\tThe\tthe\n2\tcat\tcat\n\n", ["sentence 1, word 1", "HEAD"]),  # 3 columns: was KeyError 'head'
    ("1\tThe\tthe\tDET\t_\t_\t9\tdet\t_\t_\n2\tcat\tcat\tNOUN\t_\t_\t0\troot\t_\t_\n\n", ["HEAD", "got HEAD 9"]),
    ("1\tThe\tthe\tDET\t_\t_\t1\tdet\t_\t_\n\n", ["HEAD", "own"]),
    ("1\tThe\tthe\tDET\t_\t_\tx\tdet\t_\t_\n\n", ["not a CoNLL-U file"]),
    ("1\tThe\tthe\tDET\t_\t_\t0\tdet\t_\t_\n3\tcat\tcat\tNOUN\t_\t_\t1\tnsubj\t_\t_\n\n", ["word ids"]),
])
def test_malformed_conllu(work, capsys, monkeypatch, text, needles):
    (work / "bad.conllu").write_text(text, encoding="utf-8")
    refused(capsys, monkeypatch, work, "roles", "run", "--conllu", "bad.conllu", needles=["bad.conllu", *needles])


def test_library_errors_name_the_parameter():
    from attnlab.cli.options import VOCAB_MAX
    from attnlab.data.tokenizer import MAX_VOCAB, Tokenizer

    assert MAX_VOCAB == VOCAB_MAX
    with pytest.raises(ValueError, match="vocab_size"):
        Tokenizer.train_bpe(["a b"], 5_000_000_000)
    with pytest.raises(ValueError, match="label_smoothing"):
        TrainConfig(label_smoothing=1.5).validate()
    with pytest.raises(ValueError, match="checkpoint_every"):
        TrainConfig(checkpoint_every=0).validate()
    from attnlab.errors import UserError

    with pytest.raises(UserError, match="divisible"):
        ModelConfig(vocab_size=10, d_model=10, heads=4).validate()
    with pytest.raises(UserError, match="heads: must be positive"):
        ModelConfig(vocab_size=10, heads=0).validate()  # was ZeroDivisionError
    with pytest.raises(UserError, match="^attention_on:"):
        ModelConfig(vocab_size=10, attention_on="encoder,crss").validate()

"""Training: it learns, it resumes exactly after SIGKILL or Ctrl-C, DDP equals one process."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ATTNLAB = [sys.executable, "-m", "attnlab"]
TINY = ["--d-model", "32", "--ff", "64", "--layers", "1", "--heads", "2", "--vocab-size", "300",
        "--synthetic-pairs", "400", "--max-tokens", "600", "--warmup", "10", "--lr", "3e-3", "--dev-limit", "10", "--quiet"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run(args, **kw):
    return subprocess.run(ATTNLAB + args, capture_output=True, text=True, env=ENV, **kw)


def losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    last = sorted((run_dir / "checkpoints").glob("step_*[0-9].safetensors"))[-1]
    return load_file(str(last))


def test_training_reduces_the_loss_and_writes_a_run_folder(tmp_path):
    out = tmp_path / "run"
    r = run(["train", "--out", str(out), "--max-steps", "40", "--log-every", "1", *TINY])
    assert r.returncode == 0, r.stderr
    assert {"config.toml", "tokenizer.json", "metrics.jsonl", "checkpoints"} <= {p.name for p in out.iterdir()}
    loss = losses(out)
    assert loss[40] < loss[1] - 1.0
    # an existing folder is refused and left untouched
    before = (out / "config.toml").read_text()
    r = run(["train", "--out", str(out), "--max-steps", "5", *TINY])
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--resume" in r.stderr
    assert (out / "config.toml").read_text() == before


def test_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path):
    common = ["--max-steps", "24", "--checkpoint-every", "4", "--log-every", "1", "--seed", "7", *TINY]
    straight = tmp_path / "straight"
    assert run(["train", "--out", str(straight), *common]).returncode == 0

    killed = tmp_path / "killed"
    kill_at = random.Random().randint(6, 20)
    proc = subprocess.Popen(ATTNLAB + ["train", "--out", str(killed), *common], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (killed / "metrics.jsonl").exists() and max(losses(killed), default=0) >= kill_at:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    r = run(["train", "--out", str(killed), "--resume"])
    assert r.returncode == 0, r.stderr
    a, b = final_weights(straight), final_weights(killed)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_finishes_the_step_writes_a_checkpoint_and_resume_equals_an_uninterrupted_run(tmp_path, signum):
    common = ["--max-steps", "30", "--checkpoint-every", "1000", "--log-every", "1", "--seed", "5", *TINY]
    straight = tmp_path / "straight"
    assert run(["train", "--out", str(straight), *common]).returncode == 0

    stopped = tmp_path / "stopped"
    proc = subprocess.Popen(ATTNLAB + ["train", "--out", str(stopped), *common], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (stopped / "metrics.jsonl").exists() and max(losses(stopped), default=0) >= 8:
            break
        time.sleep(0.02)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    last = sorted((stopped / "checkpoints").glob("step_*[0-9].safetensors"))
    assert len(last) == 1 and int(last[0].stem.split("_")[1]) == max(losses(stopped)) < 30  # the step it stopped at
    assert "--resume" in out + err and "Traceback" not in err
    assert run(["train", "--out", str(stopped), "--resume"]).returncode == 0
    a, b = final_weights(straight), final_weights(stopped)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_torchrun_two_processes_give_the_single_process_loss(tmp_path):
    common = ["--max-steps", "20", "--log-every", "1", "--dropout", "0", "--seed", "3", *TINY]
    one = tmp_path / "one"
    assert run(["train", "--out", str(one), *common]).returncode == 0
    two = tmp_path / "two"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533",
                        "-m", "attnlab", "train", "--out", str(two), *common], capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    l1, l2 = losses(one), losses(two)
    assert sorted(l1) == sorted(l2) == list(range(1, 21))
    for step in l1:
        assert abs(l1[step] - l2[step]) < 1e-4, (step, l1[step], l2[step])


@pytest.mark.parametrize("bad, message", [
    (["--resume"], "nothing to resume"),
    (["--model", "rnn"], "--model"),
    (["--tokenizer", "sentencepiece"], "--tokenizer"),
    (["--heads", "3"], "divisible"),
    (["--data", "hf:opus_books:en-it"], "hub"),
])
def test_bad_options_are_one_line_errors(tmp_path, bad, message):
    r = subprocess.run(
        ATTNLAB + ["train", "--out", str(tmp_path / "x"), "--max-steps", "1", *TINY, *bad],
        capture_output=True, text=True, env={**ENV, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("attnlab: error:") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_config_of_an_older_run_with_a_retired_key_loads(tmp_path):
    """``extra`` (written by earlier versions) is dropped on load; a really unknown key is an error."""
    from attnlab.config import ModelConfig, TrainConfig, load_config, save_config
    from attnlab.errors import UserError

    path = tmp_path / "config.toml"
    save_config(path, ModelConfig(), TrainConfig(data="synthetic", epochs=1))
    text = path.read_text()
    path.write_text(text.replace("[train]\n", "[train]\nextra = {}\n"))
    _, tc = load_config(path)
    assert tc.epochs == 1
    path.write_text(text.replace("[train]\n", "[train]\nwarmpu = 3\n"))
    with pytest.raises(UserError, match="unknown key\\(s\\) warmpu"):
        load_config(path)

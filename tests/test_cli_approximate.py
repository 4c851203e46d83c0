"""`attnlab approximate` and `attnlab sweep`: output contract and bad input (one line, exit code 2)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from attnlab.analysis.families import planted_heads

KEYS = {"head", "random_min_distance", "random_mean_error", "optimal_distance", "optimal_mean_error", "ratio", "mass_captured", "stored_entries"}


def attnlab(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "attnlab", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.fixture(scope="module")
def heads_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("heads") / "heads.npy"
    np.save(path, planted_heads(8, 16, rng=0))
    return path


def test_approximate_json_and_table(heads_file, tmp_path):
    res = attnlab("approximate", heads_file, "--w", 3, "--num-pos", 2, "--json", "--seed", 1)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert len(rows) == 8 and all(set(r) == KEYS for r in rows)
    assert [r["head"] for r in rows] == list(range(8))
    for r in rows:
        assert r["optimal_distance"] < r["random_min_distance"]
        assert r["random_mean_error"] == pytest.approx(r["random_min_distance"] / 256)
        assert r["ratio"] == pytest.approx(r["random_mean_error"] / r["optimal_mean_error"])
    # one head (n, n) in a .npz, table output
    npz = tmp_path / "one.npz"
    np.savez(npz, attention=planted_heads(1, 12, rng=1)[0], other=np.zeros(3))
    res = attnlab("approximate", npz, "--w", 2, "--num-pos", 1, "--sparse", 4, "--attempts", 5)
    assert res.returncode == 0, res.stderr
    for col in ("Head_n", "Min_distance", "Mean Error", "ratio", "stored"):
        assert col in res.stdout
    assert "Σ a_ij = 12.00 per head" in res.stdout  # the zero matrix's distance: the head's mass
    half = tmp_path / "half.npy"
    np.save(half, planted_heads(2, 12, rng=1) / 2)  # rows sum to 1/2: warned, kept as they are
    res = attnlab("approximate", half, "--w", 2, "--num-pos", 1, "--attempts", 2)
    assert res.returncode == 0 and "Σ a_ij = 6.00 per head" in res.stdout


def test_sweep_writes_csv_and_png(heads_file, tmp_path):
    out = tmp_path / "sweep"
    res = attnlab("sweep", heads_file, "--w", "0..4", "--num-pos", "0..2", "--out", out)
    assert res.returncode == 0, res.stderr
    with open(out / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 15 and {int(r["w"]) for r in rows} == set(range(5))
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    best = min(rows, key=lambda r: float(r["mean_error"]))
    worst = max(rows, key=lambda r: float(r["mean_error"]))
    assert f"down to {float(best['mean_error']):.5f} at w={best['w']}, num_pos={best['num_pos']}" in res.stdout
    assert f"from {float(worst['mean_error']):.5f} at w={worst['w']}, num_pos={worst['num_pos']}" in res.stdout


def _one_line_error(res, *needles):
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnlab: error:"), res.stderr
    for needle in needles:
        assert needle in lines[0]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    def save(name, arr):
        path = tmp_path / name
        np.save(path, arr)
        return path

    good = save("good.npy", np.full((2, 6, 6), 1 / 6))
    _one_line_error(attnlab("approximate", save("rect.npy", np.full((2, 4, 6), 1 / 6))), "square")
    _one_line_error(attnlab("approximate", save("nan.npy", np.full((6, 6), np.nan))), "NaN")
    _one_line_error(attnlab("approximate", save("neg.npy", -np.eye(6))), "negative")
    _one_line_error(attnlab("approximate", save("empty.npy", np.zeros((0, 6, 6)))), "empty")
    _one_line_error(attnlab("approximate", save("empty2.npy", np.zeros((0, 0)))), "empty2.npy", "empty")
    _one_line_error(attnlab("approximate", good, "--w", 6), "--w: band half-width")  # the library's "w: …", as the flag
    _one_line_error(attnlab("approximate", good, "--w", -1), "--w must be an integer in [0,")  # the option table (attnlab.cli.options)
    _one_line_error(attnlab("approximate", good, "--w", 1, "--num-pos", 7), "--num-pos:")
    text = tmp_path / "heads.txt"
    text.write_text("not an array")
    _one_line_error(attnlab("approximate", text), "heads.txt")
    fake = tmp_path / "fake.npy"
    fake.write_text("garbage")
    _one_line_error(attnlab("approximate", fake), "fake.npy")
    _one_line_error(attnlab("approximate", tmp_path / "missing.npy"), "missing.npy")
    _one_line_error(attnlab("sweep", good, "--w", "0..9", "--out", tmp_path / "s"), "--w")
    assert not (tmp_path / "s").exists()
    taken = tmp_path / "taken"
    taken.write_text("keep me")
    _one_line_error(attnlab("sweep", good, "--w", "0..2", "--out", taken), "taken exists and is not a folder")
    assert taken.read_text() == "keep me"


def test_row_sums_warn_and_renormalize(tmp_path):
    a = planted_heads(2, 8, rng=0) * 1.2
    path = tmp_path / "off.npy"
    np.save(path, a)
    res = attnlab("approximate", path, "--w", 1, "--num-pos", 1, "--json", "--attempts", 3)
    assert res.returncode == 0
    assert res.stderr.count("\n") == 1 and "largest deviation 0.2" in res.stderr
    res = attnlab("approximate", path, "--w", 1, "--num-pos", 1, "--json", "--attempts", 3, "--renormalize")
    assert res.returncode == 0 and res.stderr == ""
    json.loads(res.stdout)


def test_attention_maps_file(tmp_path):
    from attnlab.analysis.attention_maps import AttentionMaps, SentenceAttention
    from attnlab.analysis.attention_file import load_heads

    w = planted_heads(6, 7, rng=2).reshape(2, 3, 7, 7).astype(np.float32)  # (L, H, n, n)
    s0 = SentenceAttention(text="a b c d e f g", tokens={"src": list("abcdefg")}, weights={"encoder": w})
    s1 = SentenceAttention(text="x y", tokens={"src": ["x", "y"]}, weights={"encoder": np.full((2, 3, 2, 2), 0.5, np.float32)})
    path = AttentionMaps([s0, s1], {"name": "toy"}).save(tmp_path / "maps" / "attention.safetensors")
    heads, labels = load_heads(path)
    assert heads.shape == (6, 7, 7) and labels[4] == "L1.H1" and np.allclose(heads, w.reshape(6, 7, 7))
    res = attnlab("approximate", path.parent, "--w", 1, "--num-pos", 1, "--json", "--attempts", 3)
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)) == 6

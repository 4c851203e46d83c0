"""AttentionMaps: validation, padding to a batch, safetensors + JSON round trip, bad files."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from attnlab.analysis.attention_maps import AttentionMaps, SentenceAttention
from attnlab.errors import UserError


def softmax_rows(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def make_sentence(rng, n, m=None, L=2, H=3, kinds=("encoder",)):
    m = m or n
    src = [f"s{i}" for i in range(n)]
    tgt = [f"t{j}" for j in range(m)]
    sizes = {"encoder": (n, n), "decoder": (m, m), "cross": (m, n)}
    w = {k: softmax_rows(rng.normal(size=(L, H) + sizes[k])).astype(np.float32) for k in kinds}
    return SentenceAttention(text=" ".join(src), target=" ".join(tgt), tokens={"src": src, "tgt": tgt},
                             special={"src": [False] * (n - 1) + [True]}, weights=w)


def test_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    kinds = ("encoder", "decoder", "cross")
    maps = AttentionMaps([make_sentence(rng, 5, 4, kinds=kinds), make_sentence(rng, 3, 7, kinds=kinds)],
                         {"name": "tiny", "layers": 2})
    path = maps.save(tmp_path / "a.safetensors")
    back = AttentionMaps.load(path)
    assert back.kinds == kinds and back.model == {"name": "tiny", "layers": 2} and len(back) == 2
    for a, b in zip(maps, back):
        assert a.tokens == b.tokens and a.text == b.text and a.target == b.target and a.special == b.special
        for k in kinds:
            np.testing.assert_array_equal(a.weights[k], b.weights[k])
    assert back[1].query_tokens("cross") == [f"t{j}" for j in range(7)]
    assert back[1].key_tokens("cross") == ["s0", "s1", "s2"]
    assert not list(tmp_path.glob(".*")), "temporary file left behind"


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4), L=st.integers(1, 3), H=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_round_trip_property(tmp_path_factory, lengths, L, H, seed):
    rng = np.random.default_rng(seed)
    maps = AttentionMaps([make_sentence(rng, n, L=L, H=H) for n in lengths])
    back = AttentionMaps.load(maps.save(tmp_path_factory.mktemp("rt") / "m.safetensors"))
    for a, b in zip(maps, back):
        np.testing.assert_array_equal(a.weights["encoder"], b.weights["encoder"])
        assert a.tokens == b.tokens


def test_padded_batch():
    rng = np.random.default_rng(1)
    maps = AttentionMaps([make_sentence(rng, 4), make_sentence(rng, 2), make_sentence(rng, 6)])
    w, q_len, k_len = maps.padded("encoder")
    assert w.shape == (3, 2, 3, 6, 6)
    assert q_len.tolist() == [4, 2, 6] and k_len.tolist() == [4, 2, 6]
    np.testing.assert_array_equal(w[1, :, :, :2, :2], maps.weights(1, "encoder"))
    assert (w[1, :, :, 2:, :] == 0).all() and (w[1, :, :, :, 2:] == 0).all()
    assert maps.select([2]).weights(0, "encoder").shape == (2, 3, 6, 6)


def test_validation_errors():
    rng = np.random.default_rng(2)
    good = make_sentence(rng, 3)
    with pytest.raises(ValueError, match="sentences"):
        AttentionMaps([])
    bad = SentenceAttention(text="x", tokens={"src": ["a", "b"]}, weights={"encoder": np.ones((1, 1, 3, 3)) / 3})
    with pytest.raises(ValueError, match=r"3 src positions but 2 src tokens"):
        AttentionMaps([bad])
    nan = SentenceAttention(text="x", tokens={"src": ["a"]}, weights={"encoder": np.full((1, 1, 1, 1), np.nan)})
    with pytest.raises(ValueError, match="NaN"):
        AttentionMaps([nan])
    other = make_sentence(rng, 3, L=3)
    with pytest.raises(ValueError, match=r"\(L, H\)"):
        AttentionMaps([good, other])
    with pytest.raises(ValueError, match="unknown kind"):
        AttentionMaps([SentenceAttention(text="x", tokens={"src": ["a"]}, weights={"self": np.ones((1, 1, 1, 1))})])
    with pytest.raises(ValueError, match="kind"):
        AttentionMaps([good]).shape("cross")


def _write_nan_file(path):
    doc = {"model": {}, "kinds": ["encoder"], "sentences": [{"text": "a b", "target": None, "tokens": {"src": ["a", "b"]}, "special": {}}]}
    w = np.full((1, 1, 2, 2), 0.5, np.float32)
    w[0, 0, 1, 1] = np.nan
    save_file({"0.encoder": w}, str(path), metadata={"format": "attnlab.attention_maps", "version": "1", "json": json.dumps(doc)})


def test_bad_files(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, not safetensors")
    with pytest.raises(UserError, match=r"notes.txt: not an attention file"):
        AttentionMaps.load(text)
    plain = tmp_path / "plain.safetensors"
    save_file({"x": np.zeros(3, np.float32)}, str(plain))
    with pytest.raises(UserError, match=r"plain.safetensors: not an attention file"):
        AttentionMaps.load(plain)
    nan = tmp_path / "nan.safetensors"
    _write_nan_file(nan)
    with pytest.raises(UserError, match=r"nan.safetensors: invalid attention file: .*NaN"):
        AttentionMaps.load(nan)
    with pytest.raises(UserError, match="no such attention file"):
        AttentionMaps.load(tmp_path / "missing.safetensors")


@pytest.mark.parametrize("kind", ["text", "nan"])
def test_cli_bad_file_one_line(tmp_path, kind):
    path = tmp_path / "x.safetensors"
    if kind == "text":
        path.write_text("not an attention file")
    else:
        _write_nan_file(path)
    r = subprocess.run([sys.executable, "-m", "attnlab", "roles", "--maps", str(path)], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnlab: error:") and "x.safetensors" in lines[0], r.stderr

"""Mechanisms plug into the models through ModelConfig, train, and refuse bad input clearly."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from attnlab.config import ModelConfig
from attnlab.errors import UserError
from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms import MECHANISMS, Band, Global, Linformer, Structured, build_mechanism
from attnlab.nn.seq2seq import Seq2SeqTransformer

OPTIONS = {
    "band": dict(w=2),
    "global": dict(w=2, num_pos=2),
    "bigbird": dict(w=2, num_pos=1, num_random=2),
    "linear": {},
    "taylor": {},
    "linformer": dict(proj_len=8, attention_on="encoder,cross"),
    "structured": dict(w=2, num_pos=2),
    "structured-learned": dict(w=2, num_pos=2, sparse=1),
}


def tiny_batch():
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 30, (4, 13), generator=g)
    tgt = torch.randint(4, 30, (4, 11), generator=g)
    src[1, 9:] = 0  # padding
    tgt[2, 7:] = 0
    return src, tgt[:, :-1], tgt[:, 1:]


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_seq2seq_trains_with_mechanism(name):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=30, d_model=32, heads=2, layers=1, ff=64, dropout=0.0, max_len=32, attention=name, **OPTIONS[name])
    model = Seq2SeqTransformer(cfg)
    used = {type(mod).__name__ for mod in model.modules()}
    assert {"Band": "band", "Global": "global", "BigBird": "bigbird", "Linear": "linear", "Taylor": "taylor",
            "Linformer": "linformer", "Structured": "structured"}.keys() & used
    src, tgt_in, tgt_out = tiny_batch()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(6):
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, 30), tgt_out.reshape(-1), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1, losses
    # need_weights gives the exact weights of the forward: same logits both ways
    model.eval()
    with torch.no_grad():
        plain = model(src, tgt_in)
        logits, attn = model(src, tgt_in, need_weights=True)
    assert torch.allclose(plain, logits, atol=1e-5)
    assert attn["encoder"][0].shape == (4, 2, 13, 13)


def test_every_registered_mechanism_is_tested():
    assert set(MECHANISMS) - {"full"} == set(OPTIONS)


def cfg(**kw) -> ModelConfig:
    return ModelConfig(vocab_size=30, d_model=32, heads=2, layers=1, ff=64, max_len=16, **kw)


def test_linformer_with_causal_mask_is_refused_at_build():
    with pytest.raises(UserError, match="causal"):
        Seq2SeqTransformer(cfg(attention="linformer"))
    with pytest.raises(UserError, match="causal"):
        build_mechanism(cfg(attention="linformer"), "decoder", 16)
    build_mechanism(cfg(attention="linformer"), "encoder", 16)  # fine without a causal mask


def test_linformer_longer_sequence_is_a_clear_error():
    mech = Linformer(max_len=16, proj_len=4)
    q = torch.randn(1, 1, 20, 4)
    with pytest.raises(ValueError, match="longer than its projection"):
        mech(q, q, q, Mask())
    with pytest.raises(ValueError, match="causal"):
        Linformer(16, 4)(q[:, :, :8], q[:, :, :8], q[:, :, :8], Mask(causal=True))


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(attention="band", w=-1), "^w: "),
        (dict(attention="global", num_pos=40), "^num_pos: "),
        (dict(attention="global", dilation=2), "^dilation: "),
        (dict(attention="full", dilation=2), "^dilation: "),  # silently ignored before
        (dict(attention="linformer", proj_len=0, attention_on="encoder"), "^proj_len: "),
        (dict(attention="bigbird", num_random=-1), "^num_random: "),
        (dict(attention="structured", sparse=-2), "^sparse: "),
        (dict(attention="nope"), "^attention: "),
    ],
)
def test_bad_options_raise_user_error_at_build(kw, match):
    """The library names the config field, never a CLI flag."""
    with pytest.raises(UserError, match=match):
        Seq2SeqTransformer(cfg(**kw))


def test_the_command_line_names_its_flags(tmp_path):
    """``attnlab train`` turns the library's ``w: …`` into ``--w: …`` (one line, exit 2, nothing written)."""
    from attnlab.cli import as_flags

    assert as_flags("w: band half-width must be >= 0, got -1", ["train"]).startswith("--w: band half-width")
    assert as_flags("num_pos: must be >= 0", ["train"]).startswith("--num-pos: ")
    assert as_flags("a: not a matrix", ["train"]) == "a: not a matrix"  # not an option of train
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "attnlab", "train", "--out", str(tmp_path / "r"), "--attention", "band",
                          "--w", "-1", "--max-steps", "1"], capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [res.stderr.strip()]
    # the option table (attnlab.cli.options) stops it first, by its flag
    assert res.stderr.startswith("attnlab: error: --w must be an integer in [0,") and not (tmp_path / "r").exists()


def test_registry_carries_options_cost_and_causal_support():
    from attnlab.nn.mechanisms import keys_per_query, mechanisms_reading

    assert MECHANISMS["linformer"].causal is False and MECHANISMS["band"].causal is True
    assert set(mechanisms_reading("w")) == {"band", "global", "bigbird", "structured", "structured-learned"}
    assert keys_per_query("full", 100) == 100 and keys_per_query("band", 100, w=3) == 7
    assert keys_per_query("band", 100, w=3, g=4, r=2) == 7  # a band reads no columns or random keys, whatever the caller passes
    assert keys_per_query("bigbird", 100, w=3, g=2, r=2) == 11 and keys_per_query("band", 5, w=3) == 5
    assert keys_per_query("linformer", 100, proj_len=16) == 32
    assert keys_per_query("full", 99, causal=True) == 50 and keys_per_query("structured", 100, w=3, g=2, causal=True) == 6


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="w"):
        Band(-1)
    with pytest.raises(ValueError, match="dilation"):
        Band(2, dilation=0)
    with pytest.raises(ValueError, match="g"):
        Global(2, -1)
    with pytest.raises(ValueError, match="columns"):
        Structured(2, 1, columns="sometimes")
    with pytest.raises(ValueError, match="positions"):
        Structured(2, 2, positions=[1, 1])


def test_short_sequence_with_more_global_tokens_than_keys():
    # g > n: every key of the short sequence is global — full attention, no shape error
    q = torch.randn(1, 2, 3, 4)
    for mech in (Global(0, 5), Structured(0, 5)):
        out, _ = mech(q, q, q, Mask(causal=True))
        assert torch.allclose(out, mech.weights(q, q, Mask(causal=True)) @ q, atol=1e-6)


def test_benchmark_json_keys():
    out = subprocess.run(
        [sys.executable, "benchmarks/attention_speed.py", "--n", "64", "--w", "8", "--repeat", "1", "--threads", "1",
         "--proj-len", "16", "--json"],
        capture_output=True, text=True, check=True, cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]),
    )
    import json

    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert {r["mechanism"] for r in rows} >= {"full", "band", "global", "structured", "linear", "linformer"}
    for r in rows:
        assert {"mechanism", "n", "w", "g", "fwd_ms", "fwd_bwd_ms", "peak_mb", "speedup_vs_full", "ideal_speedup"} <= set(r)
        assert r["n"] == 64 and r["fwd_ms"] > 0

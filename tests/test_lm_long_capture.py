"""``capture_long`` on attnlab LM runs: the mechanism's weights block by block, the same statistics as the dense weights.

A tiny LM run is trained for a few steps; its streamed profile, key columns,
pooled map, window, entropy and fit grid must equal the ones computed from
``model(x, need_weights=True)`` (the dense weights of the same mechanism).
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from attnlab.config import ModelConfig, TrainConfig
from attnlab.data.text import encode_text
from attnlab.errors import UserError
from attnlab.llm.heads.long_capture import LongAttention, capture_long
from attnlab.llm.heads.mechanism_blocks import block_scores, streaming_lm
from attnlab.nn import build_model
from attnlab.nn.mask import Mask
from attnlab.train.checkpoint import Run, load_run
from attnlab.train.loop import train
from attnlab_cli import run_main

VERSE = """ROMEO:
But, soft! what light through yonder window breaks?
It is the east, and Juliet is the sun.

JULIET:
O Romeo, Romeo! wherefore art thou Romeo?
Deny thy father and refuse thy name.
"""
N = 300  # tokens captured (< max_len)


def _make_run(tmp, attention: str, **kw):
    folder = tmp / "text"
    folder.mkdir(exist_ok=True)
    for split, reps in (("train", 20), ("dev", 2), ("test", 2)):
        with gzip.open(folder / f"{split}.txt.gz", "wt", encoding="utf-8") as f:
            f.write(VERSE * reps)
    cfg = ModelConfig(model="lm", d_model=32, ff=64, layers=2, heads=2, max_len=320, norm="pre", dropout=0.0,
                      attention=attention, **kw)
    tc = TrainConfig(data=str(folder / "train.txt.gz"), tokenizer="char", context=64, batch_size=4, lr=3e-3, warmup=1,
                     max_steps=3, eval_every=3, checkpoint_every=3, log_every=3)
    out = tmp / f"run-{attention}"
    train(cfg, tc, out, quiet=True)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lmruns")
    return {"full": _make_run(tmp, "full"), "structured": _make_run(tmp, "structured", w=8, num_pos=3)}


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "long.txt"
    p.write_text(VERSE * 3)  # ~540 characters
    return p


def _dense_stats(run, text: str, n: int, pool: int):
    """profile (L, H, 2n − 1), columns (L, H, n), pooled (L, H, G, G), entropy (L, H), A (L, H, n, n) from the dense weights."""
    ids, _ = encode_text(run.tokenizer, text)
    x = ids[:n][None]
    with torch.no_grad():
        _, w = run.model(x, need_weights=True)
    A = torch.stack([a[0] for a in w["decoder"]]).double().numpy()  # (L, H, n, n)
    L, H = A.shape[:2]
    profile = np.stack([[[np.trace(A[l, h], offset=-d) for d in range(-(n - 1), n)] for h in range(H)] for l in range(L)])
    column = A.sum(-2)
    G = -(-n // pool)
    group = np.arange(n) // pool
    pooled = np.zeros((L, H, G, G))
    for a in range(G):
        for b in range(G):
            pooled[..., a, b] = A[..., group == a, :][..., group == b].sum(-1).mean(-1)  # keys summed, queries averaged
    ent = -(np.where(A > 0, A * np.log(np.where(A > 0, A, 1)), 0)).sum(-1).mean(-1)
    return A, profile, column, pooled, ent


@pytest.mark.parametrize("attention", ["full", "structured"])
def test_streamed_statistics_equal_the_dense_weights(runs, text_file, attention):
    run = load_run(runs[attention])
    text = text_file.read_text()
    res = capture_long(run, text, max_tokens=N, block_rows=37, rows=(100, 140), pool=16)  # 37: blocks cut anywhere
    assert res.n == N and res.layer_types == [f"{attention}_attention"] * 2
    A, profile, column, pooled, ent = _dense_stats(run, text, N, 16)
    np.testing.assert_allclose(res.profile, profile, atol=1e-5)
    np.testing.assert_allclose(res.column, column, atol=1e-5)
    np.testing.assert_allclose(res.pooled, pooled, atol=1e-5)
    np.testing.assert_allclose(res.window_maps, A[..., 100:140, 100:140], atol=1e-5)
    np.testing.assert_allclose(res.entropy, ent, atol=1e-4)
    if attention == "structured":  # band w = 8 and columns 0, 1, 2: nothing else has mass
        assert res.reach().max() == N - 1  # the first columns are read from the last row
        assert np.all(res.column[..., 3:] <= res.profile[..., N - 1 : N + 9].sum(-1, keepdims=True) + 1e-6)
        # the structured fit at (w = 8, num_pos = 4 ⊇ the mechanism's 3 columns) holds all the mass
        a, b = res.fit.ws.index(8), res.fit.num_pos.index(4)
        assert np.allclose(res.fit.mass_captured[..., a, b], 1.0, atol=1e-6)
    else:
        assert res.fit.mass_captured[..., res.fit.ws.index(8), 0].min() < 0.99  # full heads leave mass outside a narrow band


def test_block_scores_equal_weights_for_every_softmax_mechanism():
    torch.manual_seed(0)
    for attention, extra in [("full", {}), ("band", {"w": 5}), ("band", {"w": 2, "dilation": 2}), ("global", {"w": 5, "num_pos": 2}),
                             ("bigbird", {"w": 3, "num_pos": 2}), ("structured", {"w": 4, "num_pos": 3}),
                             ("structured-learned", {"w": 4, "num_pos": 3})]:
        cfg = ModelConfig(model="lm", vocab_size=20, d_model=32, ff=64, layers=1, heads=2, max_len=64, dropout=0.0,
                          attention=attention, **extra)
        mech = build_model(cfg).eval().blocks[0].self_attn.mechanism
        q, k = torch.randn(1, 2, 50, 16), torch.randn(1, 2, 50, 16)
        with torch.no_grad():
            dense = mech.weights(q, k, Mask(causal=True))
            rows = [torch.softmax(block_scores(mech, q[:, :, i0 : i0 + 7], k, Mask(causal=True), i0, 50)[0], -1) for i0 in range(0, 50, 7)]
        assert torch.allclose(torch.cat(rows, 2), dense, atol=1e-6), (attention, extra)


def test_streaming_gives_the_model_output_and_restores_the_mechanisms(runs):
    run = load_run(runs["structured"])
    x = torch.randint(4, run.tokenizer.vocab_size, (1, 200))
    before = [b.self_attn.mechanism for b in run.model.blocks]
    with torch.no_grad():
        ref = run.model(x)
        seen = []
        with streaming_lm(run.model, lambda layer, i0, j0, p, allowed, e: seen.append((layer, i0, p.shape[-1])), 64):
            out = run.model(x)
    assert torch.allclose(out, ref, atol=1e-4)
    assert [b.self_attn.mechanism for b in run.model.blocks] == before
    assert [(l, i0) for l, i0, _ in seen] == [(l, i0) for l in range(2) for i0 in (0, 64, 128, 192)]


def test_refused_inputs_are_one_line(runs, text_file, tmp_path):
    run = load_run(runs["full"])
    with pytest.raises(UserError, match="max_len of 320"):
        capture_long(run, text_file.read_text(), max_tokens=400)
    with pytest.raises(UserError, match="fewer than --tokens 300"):
        capture_long(run, VERSE, max_tokens=300)
    with pytest.raises(UserError, match="more than the run's max_len of 320; pass --tokens 320"):
        capture_long(run, VERSE * 3)
    cfg = ModelConfig(model="lm", vocab_size=20, d_model=32, ff=64, layers=1, heads=2, max_len=64, attention="linear")
    with pytest.raises(UserError, match="attention linear"):
        capture_long(build_model(cfg), VERSE, tokenizer=run.tokenizer, max_tokens=50)


def test_cli_attention_roles_approximate_on_a_run(runs, text_file, tmp_path, capsys):
    run_dir = str(runs["structured"])
    out = tmp_path / "att"
    code, stdout, err = run_main(["attention", run_dir, "--file", str(text_file), "--tokens", "200", "--rows", "10:40", "--pool", "8",
                              "--out", str(out)], capsys)
    assert code in (0, None), err
    files = list(out.rglob("*.safetensors"))
    assert len(files) == 1 and any(out.rglob("*.html")) and any(out.rglob("*.png"))
    res = LongAttention.load(files[0])
    assert res.n == 200 and res.pooled.shape == (2, 2, 25, 25) and res.meta["attention"] == "structured"
    code, stdout, err = run_main(["roles", run_dir, "--file", str(text_file), "--tokens", "200", "--json"], capsys)
    assert code in (0, None), err
    assert '"role"' in stdout
    code, stdout, err = run_main(["approximate", run_dir, "--file", str(text_file), "--tokens", "200", "--w", "8", "--num-pos", "4", "--json"], capsys)
    assert code in (0, None), err
    import json

    heads = json.loads(stdout)["heads"]
    assert len(heads) == 4 and all(h["mass_captured"] > 0.999999 for h in heads)


def test_cli_bad_inputs_are_one_line_and_write_nothing(runs, text_file, tmp_path, capsys):
    run_dir = str(runs["full"])
    for args, needle in [
        (["attention", run_dir, "--file", str(text_file), "--tokens", "1000"], "--tokens 1000"),
        (["roles", run_dir, "--file", str(tmp_path / "missing.txt")], "missing.txt"),
        (["attention", run_dir, "--file", str(text_file), "--hf", "x"], "not both"),
        (["approximate", run_dir, "--file", str(text_file), "--tokens", "500"], "max_len of 320"),
    ]:
        code, _, err = run_main(args + ["--out", str(tmp_path / "o")] if args[0] == "attention" else args, capsys)
        lines = [l for l in err.strip().splitlines() if l.strip() and not (l.startswith("attnlab: ") and not l.startswith("attnlab: error: "))]
        # (the progress lines said before a refusal that comes after the model has loaded are not error lines)
        assert code == 2 and len(lines) == 1 and needle in lines[0], (args, err)
        assert not (tmp_path / "o").exists()
    # a translation run (a Run as load_run returns it; training one would cost seconds)
    lm = load_run(run_dir)
    cfg = ModelConfig(model="transformer", vocab_size=lm.tokenizer.vocab_size, d_model=16, ff=32, layers=1, heads=2, max_len=32)
    translation = Run(path=tmp_path / "tr", model=build_model(cfg), tokenizer=lm.tokenizer, cfg=cfg, train_cfg=None)
    with pytest.raises(UserError, match="transformer run .*--model lm"):
        capture_long(translation, VERSE)

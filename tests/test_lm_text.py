"""Language models on contiguous text: text specs, the token stream, random windows,
loss / bits per char / perplexity, the cosine schedule, training with a best checkpoint."""

from __future__ import annotations

import gzip
import json
import math

import pytest
import torch
from torch import nn

from attnlab.config import ModelConfig, TrainConfig
from attnlab.data import Tokenizer
from attnlab.data.text import (
    TextStream, encode_text, is_text_spec, load_text, random_windows, read_text, read_text_file, text_files,
)
from attnlab.errors import UserError
from attnlab.nn import build_model
from attnlab.train.checkpoint import load_run
from attnlab.train.loop import train
from attnlab.train.perplexity import evaluate_lm
from attnlab.train.schedule import warmup_cosine

VERSE = """ROMEO:
But, soft! what light through yonder window breaks?
It is the east, and Juliet is the sun.

JULIET:
O Romeo, Romeo! wherefore art thou Romeo?
Deny thy father and refuse thy name.
"""


@pytest.fixture
def corpus(tmp_path):
    """train.txt.gz / dev.txt.gz / test.txt.gz in one folder."""
    folder = tmp_path / "text"
    folder.mkdir()
    for split, reps in (("train", 40), ("dev", 4), ("test", 4)):
        with gzip.open(folder / f"{split}.txt.gz", "wt", encoding="utf-8") as f:
            f.write(VERSE * reps)
    return folder


def test_text_specs_find_the_split_siblings(corpus, tmp_path):
    assert is_text_spec(str(corpus / "train.txt.gz")) and is_text_spec(str(corpus))
    assert not is_text_spec("synthetic")
    assert text_files(str(corpus / "train.txt.gz"), "dev") == [corpus / "dev.txt.gz"]
    assert text_files(str(corpus), "test") == [corpus / "test.txt.gz"]
    works = tmp_path / "works" / "train"
    works.mkdir(parents=True)
    (works / "b.txt").write_text("second work\n")
    (works / "a.txt").write_text("first work\n")
    assert read_text(str(works), "train") == "first work\n\n\n\nsecond work\n"  # sorted, two blank lines between
    with pytest.raises(UserError, match="dev"):
        text_files(str(works), "dev")
    (tmp_path / "works" / "dev").mkdir()
    (tmp_path / "works" / "dev" / "c.txt").write_text("dev work\n")
    assert read_text(str(works), "dev") == "dev work\n"
    lone = tmp_path / "train.txt"
    lone.write_text("x")
    with pytest.raises(UserError, match="test.txt does not exist"):
        text_files(str(lone), "test")


@pytest.mark.parametrize("content, message", [(b"", "empty"), (b"  \n\n", "empty"), (b"abc\x00def", "binary"),
                                              (b"\xff\xfe\x81abc", "not UTF-8")])
def test_empty_or_binary_files_are_refused_by_name(tmp_path, content, message):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    with pytest.raises(UserError, match=message) as err:
        read_text_file(bad)
    assert str(bad) in str(err.value)


def test_char_stream_equals_the_tokenizer_and_counts_unknown_characters():
    tok = Tokenizer.train_char([VERSE])
    ids, unknown = encode_text(tok, VERSE)
    assert ids.tolist() == tok.encode(VERSE) and unknown == 0
    assert tok.decode(ids.tolist()) == VERSE
    ids, unknown = encode_text(tok, "Romeo — Zoë")  # '—', 'Z', 'ë' never seen
    assert ids.tolist() == tok.encode("Romeo — Zoë")
    assert unknown == 3 and (ids == tok.unk_id).sum() == 3


def test_random_windows_are_next_token_pairs_inside_the_stream():
    ids = torch.arange(100)
    x, y = random_windows(ids, 10, 32, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (32, 10)
    assert torch.equal(y, x + 1) and int(y.max()) <= 99 and int(x.min()) >= 0
    x2, _ = random_windows(ids, 10, 32, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)
    with pytest.raises(UserError, match="fewer than"):
        random_windows(ids, 100, 1, torch.Generator())


class Bigram(nn.Module):
    """logits_t = table[x_t]: a model whose loss does not depend on where windows are cut."""

    def __init__(self, V: int, max_len: int = 64):
        super().__init__()
        self.table = nn.Parameter(torch.randn(V, V, generator=torch.Generator().manual_seed(1)))
        self.max_len = max_len

    def forward(self, x):
        return self.table[x]


@pytest.mark.parametrize("context", [1, 7, 64])
def test_loss_bpc_and_perplexity_score_every_token_once(context):
    V, N = 11, 300
    ids = torch.randint(0, V, (N,), generator=torch.Generator().manual_seed(0))
    model = Bigram(V)
    stream = TextStream(ids, chars=2 * N, unknown=0)  # 2 characters per token, as BPE would have
    r = evaluate_lm(model, stream, context)
    logp = torch.log_softmax(model.table[ids[:-1]], -1).gather(-1, ids[1:, None])
    expected = -float(logp.mean().detach())
    assert r["tokens"] == N - 1
    assert r["loss"] == pytest.approx(expected, rel=1e-5)
    assert r["perplexity"] == pytest.approx(math.exp(expected), rel=1e-5)
    assert r["bpc"] == pytest.approx(expected * (N - 1) / (math.log(2) * (N - 1) * 2), rel=1e-5)
    assert evaluate_lm(model, stream, context, limit=50)["tokens"] == 50
    with pytest.raises(UserError, match="longer than the model"):
        evaluate_lm(model, stream, 65)


def test_warmup_cosine_rises_linearly_then_decays_to_the_floor():
    assert warmup_cosine(5, 10, 0.0) == pytest.approx(0.5)
    assert warmup_cosine(10, 10, 0.0) == pytest.approx(1.0)
    assert warmup_cosine(50, 10, 0.5) == pytest.approx(0.55)
    assert warmup_cosine(99, 10, 1.0) == pytest.approx(0.1)
    assert warmup_cosine(99, 10, 3.0) == pytest.approx(0.1)  # past the budget: stays at the floor


def tiny_lm(attention="full", **kw):
    return ModelConfig(model="lm", d_model=32, ff=64, layers=1, heads=2, max_len=32, norm="pre", dropout=0.0,
                       attention=attention, **kw)


def test_training_on_text_logs_dev_scores_and_keeps_the_best_weights(corpus, tmp_path):
    out = tmp_path / "run"
    tc = TrainConfig(data=str(corpus / "train.txt.gz"), tokenizer="char", context=32, batch_size=8, lr=3e-3, warmup=5,
                     label_smoothing=0.0, max_steps=40, eval_every=10, checkpoint_every=20, schedule="cosine", log_every=10)
    result = train(tiny_lm(), tc, out, quiet=True)
    lines = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()]
    dev = [x for x in lines if "dev_loss" in x]
    assert [x["step"] for x in dev] == [10, 20, 30, 40]
    assert dev[-1]["dev_loss"] < min(dev[0]["dev_loss"], math.log(41))  # below uniform over the 41 tokens
    best = min(x["dev_loss"] for x in dev)
    assert result.dev["loss"] == pytest.approx(best)
    assert (out / "checkpoints" / "best.safetensors").is_file()
    run = load_run(out, best=True)
    again = evaluate_lm(run.model, load_text(str(corpus), "dev", run.tokenizer), 32)
    assert again["loss"] == pytest.approx(best, rel=1e-5)
    train_loss = [x["loss"] for x in lines if "loss" in x]
    assert train_loss[-1] < train_loss[0] - 1.0


def test_text_needs_a_language_model_and_a_context_within_max_len(corpus, tmp_path):
    tc = TrainConfig(data=str(corpus), tokenizer="char", context=64, batch_size=4, max_steps=1)
    with pytest.raises(UserError, match="longer than the model's maximum"):
        train(tiny_lm(), tc, tmp_path / "a", quiet=True)
    with pytest.raises(UserError, match="--model lm"):
        train(ModelConfig(model="transformer", d_model=32, ff=64, layers=1, heads=2, max_len=64), tc, tmp_path / "b", quiet=True)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("attention, extra", [("structured", {"w": 16, "num_pos": 4}), ("band", {"w": 16}),
                                              ("global", {"w": 16, "num_pos": 2}), ("linear", {})])
def test_long_context_mechanisms_run_causal_and_equal_their_dense_weights(attention, extra):
    """The LM at n = 300 with the efficient (chunked / linear) forward gives the logits of A = weights(q, k) @ v."""
    torch.manual_seed(0)
    cfg = ModelConfig(model="lm", vocab_size=20, d_model=32, ff=64, layers=2, heads=2, max_len=300, norm="pre",
                      dropout=0.0, attention=attention, **extra)
    model = build_model(cfg).eval().requires_grad_(False)
    x = torch.randint(4, 20, (2, 300))
    fast = model(x)
    dense, weights = model(x, need_weights=True)
    assert torch.allclose(fast, dense, atol=1e-4)
    a = weights["decoder"][0]  # (B, H, n, n): causal
    assert float(a.triu(1).abs().max()) == 0.0
    # causality of the fast path: changing a later token leaves earlier logits alone
    y = x.clone()
    y[:, 200] = (y[:, 200] + 1 - 4) % 16 + 4
    assert torch.allclose(model(y)[:, :200], fast[:, :200], atol=1e-5)

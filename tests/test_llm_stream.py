"""Streamed head statistics equal those of the eager (n×n) capture, on tiny random Llama / Gemma-3 configs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.analysis.attention_maps import AttentionMaps, SentenceAttention
from attnlab.analysis.roles import head_roles
from attnlab.analysis.structured_fit import structured_fit
from attnlab.llm.heads.block_attention import streaming
from attnlab.llm.heads.head_statistics import HeadStatistics
from attnlab.llm.heads.long_capture import capture_long, token_info
from attnlab.llm.heads.streamed_fit import fit_table

transformers = pytest.importorskip("transformers")

WORDS = "the king of a rare land , and his queen ! o fair sweet night ; thou art".split()


def word_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    tok.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def random_text(n_words: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    words = rng.choice(WORDS[:-1], n_words).tolist()
    words[n_words // 3] = "art"  # one rare word
    return " ".join(words)


def tiny(kind: str):
    torch.manual_seed(0)
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=len(WORDS) + 3, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.Gemma3TextConfig(vocab_size=len(WORDS) + 3, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=4096,
                                            sliding_window=64, layer_types=["sliding_attention", "full_attention"])
        model = transformers.Gemma3ForCausalLM(cfg)
    with torch.no_grad():  # sharper attention than the random init, so heads differ
        for name, p in model.named_parameters():
            if "q_proj" in name or "k_proj" in name:
                p.mul_(8.0)
    return model.eval()


def eager_weights(model, ids) -> np.ndarray:
    # returns (L, H, n, n) float64
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).double().numpy()


@pytest.mark.parametrize("kind", ["llama", "gemma"])
def test_streamed_statistics_equal_eager(kind):
    model, tok = tiny(kind), word_tokenizer()
    text = random_text(1023)
    res = capture_long(model, text, tokenizer=tok, block_rows=100, ws=(0, 1, 4, 16, 63, 200), num_pos=(0, 1, 4))
    ids = tok(text)["input_ids"]
    n = len(ids)
    assert n == 1024 and res.n == 1024
    a = eager_weights(model, ids)  # (L, H, n, n)
    assert np.abs(a.sum(-1) - 1).max() < 1e-5
    # band profile by distance, columns
    i, j = np.indices((n, n))
    prof = np.stack([np.bincount((i - j + n - 1).ravel(), weights=a[l, h].ravel(), minlength=2 * n - 1)
                     for l in range(a.shape[0]) for h in range(a.shape[1])]).reshape(a.shape[:2] + (2 * n - 1,))
    np.testing.assert_allclose(res.profile, prof, atol=1e-5)
    np.testing.assert_allclose(res.column, a.sum(-2), atol=1e-5)
    # the exact structured fit, every grid point
    for x, w in enumerate(res.fit.ws):
        for y, k in enumerate(res.fit.num_pos):
            ref = structured_fit(a, w, k, s=0)
            np.testing.assert_allclose(res.fit.mass_captured[:, :, x, y], ref.mass_captured, atol=1e-5)
            np.testing.assert_allclose(res.fit.l1[:, :, x, y], ref.l1, atol=1e-4 * n * 1e-2)
            if k:
                got = np.sort(res.fit.columns[:, :, x, :k], -1)
                np.testing.assert_array_equal(got, np.sort(ref.columns, -1))
    # roles: every score and the role
    maps = AttentionMaps([SentenceAttention(text=text, target=None, tokens={"tgt": res.tokens}, special={"tgt": res.special},
                                            weights={"decoder": a.astype(np.float32)})], {"name": "tiny"})
    ref_roles = head_roles(maps)
    assert len(ref_roles) == len(res.roles)
    for got, ref in zip(res.roles, ref_roles):
        assert (got.layer, got.head, got.role, got.offset, got.sink_token) == (ref.layer, ref.head, ref.role, ref.offset, ref.sink_token)
        for field in ("confidence", "positional", "rare_token", "rare_token_2", "sink", "entropy", "entropy_norm"):
            assert abs(getattr(got, field) - getattr(ref, field)) < 1e-5, (field, got, ref)


def test_gemma_sliding_layer_has_no_far_mass_and_full_layer_has():
    model, tok = tiny("gemma"), word_tokenizer()
    res = capture_long(model, random_text(600, seed=1), tokenizer=tok, block_rows=64, ws=(0, 8, 64), num_pos=(0, 2))
    far = res.far_share(64)  # (L, H)
    assert res.layer_types == ["sliding_attention", "full_attention"]
    assert far[0].max() == 0.0  # window 64: distances ≤ 63 only
    assert far[1].min() > 0.05
    assert res.inferred_layer_types() == ["windowed(64)", "full"]
    assert res.reach()[0].max() == 63 and res.reach()[1].min() == res.n - 1


def test_model_output_unchanged_and_window_and_pooled_maps():
    model, tok = tiny("llama"), word_tokenizer()
    text = random_text(199, seed=2)
    ids = tok(text)["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        ref = model(x).logits
        with streaming(model, None, 37):
            got = model(x).logits
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    res = capture_long(model, text, tokenizer=tok, block_rows=37, rows=(50, 90), pool=16)
    a = eager_weights(model, ids)
    np.testing.assert_allclose(res.window_maps, a[:, :, 50:90, 50:90], atol=1e-6)
    from attnlab.viz.explorer import pool_tokens

    pooled, *_ = pool_tokens(a, res.tokens, res.tokens, max_tokens=int(np.ceil(len(ids) / 16)))
    np.testing.assert_allclose(res.pooled, pooled, atol=1e-6)


def test_layers_subset_and_save_load(tmp_path):
    model, tok = tiny("llama"), word_tokenizer()
    res = capture_long(model, random_text(99), tokenizer=tok, layers=[1], block_rows=16)
    full = capture_long(model, random_text(99), tokenizer=tok, block_rows=50)
    assert res.layers == [1] and res.profile.shape[0] == 1
    np.testing.assert_allclose(res.column[0], full.column[1], atol=1e-6)
    p = res.save(tmp_path / "long.safetensors")
    back = type(res).load(p)
    np.testing.assert_allclose(back.profile, res.profile, rtol=1e-6, atol=1e-12)  # stored float32
    assert back.roles == res.roles and back.fit.ws == res.fit.ws


def test_profile_skew_on_a_random_block():
    """The skewed-view band profile of one block equals a direct sum along diagonals (rectangular, offset keys)."""
    rng = np.random.default_rng(0)
    n, H = 50, 3
    tokens = ["a"] * n
    info = token_info(tokens, [False] * n)
    st = HeadStatistics(1, H, n, info, ws=(0, 3))
    p = torch.tensor(rng.random((1, H, 7, 20)), dtype=torch.float32)
    i0, j0 = 30, 12
    st.observe(0, i0, j0, p, torch.ones(1, 1, 7, 20, dtype=torch.bool))
    ref = np.zeros((H, 2 * n - 1))
    for t in range(7):
        for c in range(20):
            ref[:, (i0 + t) - (j0 + c) + n - 1] += p[0, :, t, c].numpy()
    np.testing.assert_allclose(st.profile[0].numpy(), ref, atol=1e-6)


def test_fit_table_rejects_nothing_silently():
    prof = np.zeros((1, 1, 5))
    col = np.zeros((1, 1, 3))
    t = fit_table(prof, col, np.zeros((1, 1, 1, 3)), (0,), (0, 1))
    assert (t.mass_captured == 1).all() and (t.columns == -1).all()

"""DuoAttention's learned gates: a head built to retrieve keeps the highest gate; the plan keeps it full."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from attnlab.errors import UserError  # noqa: E402
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.plans.duo_training import GateTraining, load_gates, passkey_prompt, save_gates, train_gates  # noqa: E402

MARK = ord("R") % 64   # 'R' opens every passkey sentence ("Remember …") and appears nowhere else


class CharTokenizer:
    """Characters → ids (code point mod 64): enough for passkey prompts on a tiny model."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(ch) % 64 for ch in text]}


def retrieval_model(seed=0):
    """1 layer, 2 heads: head 0 attends to the 'R' tokens wherever they are; head 1 writes nothing (v = 0).

    q₀ reads a constant embedding coordinate, k₀ a coordinate only 'R' has, both on the lowest RoPE frequency
    (dims 7/15 of 16, θ = 10⁶), so head 0's scores are large exactly at the passkey sentences.
    """
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=2048, rope_theta=1e6)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        E = model.model.embed_tokens.weight
        E[:, :2] = 0
        E[:, 0] = 1.0
        E[MARK, 1] = 4.0
        a = model.model.layers[0].self_attn
        a.q_proj.weight.zero_()
        a.k_proj.weight.zero_()
        a.q_proj.weight[7, 0] = 8.0       # head 0, dim 7
        a.k_proj.weight[7, 1] = 8.0
        a.v_proj.weight[:16] = torch.randn(16, 32)       # head 0 writes a lot …
        a.o_proj.weight[:, :16] = torch.randn(32, 16)
        a.v_proj.weight[16:] = 0.0                       # … head 1 nothing
    return model


def text():
    return ("abc de cab ed bad face " * 200)


def test_the_retrieval_head_ends_with_the_highest_gate(tmp_path):
    model = retrieval_model()
    cfg = GateTraining(steps=25, tokens=400, passkeys=2, passkey_words=2, sinks=4, recent=16, lr=0.05)
    gates = train_gates(model, CharTokenizer(), text(), cfg)
    assert gates.shape == (1, 2)
    assert float(gates[0, 0]) > float(gates[0, 1]) + 0.5, gates
    assert model.config._attn_implementation != "attnlab-duo-gated"
    assert not any(p.requires_grad is False for p in model.parameters())   # left as found
    path = tmp_path / "gates.safetensors"
    save_gates(path, gates, "retrieval-toy", cfg)
    m = methods.get("duo-attention", budget=0.6, gates=str(path), sinks=4, recent=16)
    m.prepare(model, 400)
    assert [h.is_full for h in m.plan.heads[0]] == [True, False]


def test_passkey_prompts_mark_the_answers():
    ids, answer = passkey_prompt(CharTokenizer(), CharTokenizer()(text())["input_ids"], 600, 3, 2, torch.Generator().manual_seed(0))
    assert ids.shape == answer.shape == (600,)
    assert int((ids == MARK).sum()) == 3          # one 'Remember' per passkey
    assert 0 < int(answer.sum()) < 60 and bool(answer[-1])


def test_a_gate_file_for_another_model_is_one_line(tmp_path):
    path = tmp_path / "g.safetensors"
    save_gates(path, torch.ones(3, 2), "other", GateTraining())
    with pytest.raises(UserError, match="another model") as e:
        load_gates(path, {"num_layers": 1, "num_kv_heads": 2})
    assert "\n" not in str(e.value)
    (tmp_path / "bad.safetensors").write_bytes(b"not a file")
    with pytest.raises(UserError, match="gates"):
        load_gates(tmp_path / "bad.safetensors", {"num_layers": 1, "num_kv_heads": 2})
    m = methods.get("duo-attention", gates=str(path))
    with pytest.raises(UserError, match="another model"):
        m.prepare(retrieval_model(), 100)


@pytest.mark.parametrize("opts,word", [({"threshold": 1.5}, "threshold"), ({"sinks": 0}, "sinks"), ({"recent": 0}, "recent")])
def test_options_out_of_range_name_the_option(opts, word):
    with pytest.raises(UserError, match=word):
        methods.get("duo-attention", **opts)


def test_without_gates_it_says_how_to_get_them():
    with pytest.raises(UserError, match="gates"):
        methods.get("duo-attention").prepare(retrieval_model(), 100)


def test_the_benchmark_stops_after_its_minutes_and_keeps_checkpoints(tmp_path):
    """--minutes stops after the step that reaches it; the file's metadata says the steps done; history per checkpoint."""
    import sys
    from pathlib import Path

    from safetensors import safe_open

    from char_model_folder import save_with_char_tokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import duo_attention_train

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=2048)
    folder = save_with_char_tokenizer(LlamaForCausalLM(cfg).eval(), tmp_path / "model")
    (tmp_path / "text.txt").write_text(text())
    out = tmp_path / "g.safetensors"
    common = ["--hf", str(folder), "--text", str(tmp_path / "text.txt"), "--out", str(out), "--tokens", "300",
              "--passkeys", "2", "--passkey-words", "2", "--sinks", "4", "--recent", "16"]
    assert duo_attention_train.main(common + ["--steps", "5", "--checkpoint", "2"]) == 0
    with safe_open(str(out.with_name("g.history.safetensors")), "pt") as f:
        assert sorted(f.keys()) == ["step_0002", "step_0004", "step_0005"]
    with safe_open(str(out), "pt") as f:
        assert f.metadata()["steps"] == "5"
    assert duo_attention_train.main(common + ["--steps", "50", "--minutes", "1e-6"]) == 0
    with safe_open(str(out), "pt") as f:
        assert f.metadata()["steps"] == "1"
    assert load_gates(out, {"num_layers": 1, "num_kv_heads": 2}).shape == (1, 2)


def test_a_sliding_layer_gates_within_its_window():
    """Gemma-3's sliding layers: at α = 1 the gated attention is the layer's own windowed attention, at α = 0 the sinks
    and recent keys inside that window; a full layer (no window) is causal attention."""
    import types

    import torch.nn.functional as F

    from attnlab.llm.plans.duo_training import gated_attention, streaming_mask

    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 40, 8), torch.randn(1, 2, 40, 8), torch.randn(1, 2, 40, 8)
    window = streaming_mask(40, 0, 10)
    assert bool((window == torch.tril(torch.ones(40, 40, dtype=torch.bool)).triu(-9)).all())
    for w, seen in ((10, window), (None, torch.ones(40, 40, dtype=torch.bool).tril())):
        for alpha in (1.0, 0.0):
            mod = types.SimpleNamespace(duo_gate=torch.full((2,), alpha), duo_sinks=3, duo_recent=5)
            out, _ = gated_attention(mod, q, k, v, scaling=0.5, sliding_window=w)
            mask = seen if alpha else seen & streaming_mask(40, 3, 5)
            want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.5, enable_gqa=True).transpose(1, 2)
            assert torch.allclose(out, want, atol=1e-6), (w, alpha)

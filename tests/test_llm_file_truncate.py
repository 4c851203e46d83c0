"""``attention --hf MODEL --file F`` without ``--tokens`` reads the first context-length tokens of a longer file."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab_cli import run_main

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from char_model_folder import save_with_char_tokenizer

    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=48)
    torch.manual_seed(0)
    return save_with_char_tokenizer(transformers.LlamaForCausalLM(cfg), tmp_path_factory.mktemp("ctx48"))


def test_attention_file_longer_than_the_context_reads_its_first_tokens(folder, tmp_path, capsys):
    text = tmp_path / "long.txt"
    text.write_text("to be or not to be, that is the question. " * 5)  # one token a character
    out = tmp_path / "o"
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text), "--out", str(out)], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("attnlab: note:")]
    assert len(notes) == 1 and f"{len(text.read_text())} tokens" in notes[0] and "first 48" in notes[0], err
    from attnlab.llm.heads.long_capture import LongAttention

    res = LongAttention.load(out / "long-attention.safetensors")
    assert res.n == 48 and "".join(res.tokens) == text.read_text()[:48]
    assert res.meta["truncated_from"] == len(text.read_text()) > 48


def test_a_file_that_fits_gets_no_notice_and_tokens_past_the_context_is_refused(folder, tmp_path, capsys):
    text = tmp_path / "short.txt"
    text.write_text("to be or not to be")
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text), "--out", str(tmp_path / "a")], capsys)
    assert code == 0 and "note" not in err, err
    text.write_text("to be or not to be, that is the question. " * 5)
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text), "--tokens", "60",
                             "--out", str(tmp_path / "b")], capsys)
    assert code == 2 and "--tokens 60" in err and "48" in err and not (tmp_path / "b").exists(), err

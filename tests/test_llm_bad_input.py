"""Bad input to the LLM path: one clear line `attnlab: error: ...`, exit 2, no traceback."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab_cli import run_main

transformers = pytest.importorskip("transformers")


def check_one_line(code, err, *needles):
    assert code == 2, err
    lines = [l for l in err.strip().splitlines() if l.strip() and not (l.startswith("attnlab: ") and not l.startswith("attnlab: error: "))]
    # (the progress lines said before a refusal that comes after the model has loaded are not error lines)
    assert len(lines) == 1 and lines[0].startswith("attnlab: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "long.txt"
    p.write_text("the king of a rare land , and his queen ! " * 20)
    return p


def tiny_folder(tmp_path, *, tokenizer: bool, max_positions: int = 4096):
    from tests.test_llm_stream import WORDS, word_tokenizer

    cfg = transformers.LlamaConfig(vocab_size=len(WORDS) + 3, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=max_positions)
    torch.manual_seed(0)
    folder = tmp_path / f"tiny-{tokenizer}-{max_positions}"
    transformers.LlamaForCausalLM(cfg).save_pretrained(folder)
    if tokenizer:
        word_tokenizer().save_pretrained(folder)
    return folder


def test_not_gguf(tmp_path, text_file, capsys):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"hello, not a model at all")
    code, _, err = run_main(["attention", "--hf", str(bad), "--file", str(text_file), "--out", str(tmp_path / "o")], capsys)
    check_one_line(code, err, "model.gguf", "not a GGUF file")
    assert not (tmp_path / "o").exists()


def test_truncated_gguf(tmp_path, text_file, capsys):
    pytest.importorskip("gguf", reason="the gguf package (attnlab[llm]) reads GGUF headers")
    from gguf import GGUFWriter
    import numpy as np

    path = tmp_path / "small.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_tensor("token_embd.weight", np.ones((64, 16), dtype=np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 1000])
    code, _, err = run_main(["roles", "--hf", str(cut), "--file", str(text_file)], capsys)
    check_one_line(code, err, "cut.gguf", "truncated")


def test_unknown_architecture(tmp_path, text_file, capsys):
    folder = tmp_path / "alien"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "no-such-architecture", "hidden_size": 8}))
    code, _, err = run_main(["approximate", "--hf", str(folder), "--file", str(text_file)], capsys)
    check_one_line(code, err, "alien", "cannot read its configuration")


def test_folder_without_tokenizer(tmp_path, text_file, capsys):
    folder = tiny_folder(tmp_path, tokenizer=False)
    code, _, err = run_main(["roles", "--hf", str(folder), "--file", str(text_file)], capsys)
    check_one_line(code, err, "no tokenizer")


def test_input_longer_than_context(tmp_path, text_file, capsys):
    """--tokens past the context is refused; without --tokens the first 64 are read (tests/test_llm_file_truncate.py)."""
    folder = tiny_folder(tmp_path, tokenizer=True, max_positions=64)
    code, _, err = run_main(["roles", "--hf", str(folder), "--file", str(text_file), "--tokens", "100"], capsys)
    check_one_line(code, err, "--tokens 100", "64 tokens", "--tokens 64")


def test_input_that_cannot_fit_is_refused_before_the_run(tmp_path, text_file, capsys):
    folder = tiny_folder(tmp_path, tokenizer=True)
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text_file), "--memory-limit", "0.01",
                         "--out", str(tmp_path / "o")], capsys)
    check_one_line(code, err, "221 tokens need about", "GiB", "0.01 GiB is allowed", "--tokens 110")
    assert not (tmp_path / "o").exists()


def test_allocator_error_is_one_line(tmp_path, text_file, capsys, monkeypatch):
    folder = tiny_folder(tmp_path, tokenizer=True)
    import attnlab.llm.heads.block_attention as ba

    def no_memory(*a, **k):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you tried to allocate 68719476736 bytes.")

    monkeypatch.setattr(ba, "_key_range", no_memory)
    code, _, err = run_main(["roles", "--hf", str(folder), "--file", str(text_file)], capsys)
    check_one_line(code, err, "out of memory on 221 tokens", "--block-rows")


def test_unknown_known_model_and_missing_file(tmp_path, capsys):
    code, _, err = run_main(["models", "fetch", "gpt-17"], capsys)
    check_one_line(code, err, "unknown model 'gpt-17'", "smollm2-135m")
    folder = tiny_folder(tmp_path, tokenizer=True)
    code, _, err = run_main(["roles", "--hf", str(folder), "--file", str(tmp_path / "missing.txt")], capsys)
    check_one_line(code, err, "missing.txt")
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(tmp_path / "x.txt"), "--layers", "zero"], capsys)
    check_one_line(code, err, "--layers")


def test_eager_capture_that_cannot_fit_is_refused(tmp_path, capsys, monkeypatch):
    """The short (eager, n x n per layer) capture refuses in one line instead of an allocator traceback."""
    folder = tiny_folder(tmp_path, tokenizer=True)
    import attnlab.llm.models.memory as memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 10 * 2**20)
    code, _, err = run_main(["attention", "--hf", str(folder), "the king of a rare land", "--out", str(tmp_path / "o")], capsys)
    check_one_line(code, err, "needs about", "--file TEXT")
    assert not (tmp_path / "o").exists()

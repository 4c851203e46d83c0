"""``--device cpu|cuda|auto`` on the LLM commands: a CUDA request without CUDA is one line, exit 2, nothing written;
a run that will not fit the device's memory is refused with the bytes needed and free."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from attnlab_cli import run_main
from char_model_folder import tiny_llama_folder

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible: --device cuda is valid here")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_llama_folder(tmp_path_factory.mktemp("tiny-llama"))


def _hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def _commands(folder: Path, tmp: Path):
    text = tmp / "text.txt"
    text.write_text("Some words of text to read. " * 40)
    plan = tmp / "plan.json"
    return text, {
        "eval": ["eval", "--hf", str(folder), "--lengths", "500", "--depths", "1", "--samples", "1", "--haystack", "noise",
                 "--out", str(tmp / "out")],
        "plan": ["plan", "--hf", str(folder), "--calibrate", str(text), "--n", "64", "--out", str(tmp / "out.json")],
        "plan-run": ["plan-run", "--hf", str(folder), "--plan", str(plan), "--file", str(text), "--n", "64"],
        "heads": ["heads", "--hf", str(folder), "--length", "32", "--out", str(tmp / "out")],
        "attention": ["attention", "--hf", str(folder), "--file", str(text), "--out", str(tmp / "out")],
    }


@no_cuda
@pytest.mark.parametrize("command", ["eval", "plan", "plan-run", "heads", "attention"])
def test_device_cuda_without_cuda_is_one_line_and_writes_nothing(folder, tmp_path, capsys, command):
    _, commands = _commands(folder, tmp_path)
    before = _hash(tmp_path)
    code, out, err = run_main([*commands[command], "--device", "cuda"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--device cuda" in lines[0] and "Traceback" not in err, err
    assert _hash(tmp_path) == before and not (tmp_path / "out").exists() and not (tmp_path / "out.json").exists()


def test_device_option_names_its_choices(folder, tmp_path, capsys):
    _, commands = _commands(folder, tmp_path)
    code, _, err = run_main([*commands["eval"], "--device", "gpu"], capsys)
    assert code == 2 and "--device gpu: choose one of cpu, cuda, auto" in err


def test_a_run_beyond_the_free_device_memory_is_refused_with_bytes_needed_and_free(monkeypatch):
    from attnlab.errors import UserError
    from attnlab.llm.models.device import check_fits, plan_bytes

    shape = {"num_layers": 32, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128}   # Llama-3.1-8B's attention
    need = plan_bytes(shape, 131072)
    assert need > 2 * 32 * 8 * 131072 * 128 * 2                                          # the full bf16 KV cache and more
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (8 * 2**30, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "a test GPU")
    with pytest.raises(UserError, match=r"needs 1\d\.\d\d GiB on a test GPU, 8\.00 GiB free of 80\.00 GiB"):
        check_fits(need, "cuda", "--lengths 131072")
    check_fits(need, "cpu", "--lengths 131072")                                          # the host: not checked here


def test_auto_is_the_cpu_without_cuda_and_the_model_stays_float32(folder):
    from attnlab.llm.models.device import device_dtype, resolve_device
    from attnlab.llm.models.loading import load_causal_lm

    dev = resolve_device("auto")
    assert dev.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert device_dtype("cuda") == torch.bfloat16 and device_dtype("cpu") == torch.float32
    model, _ = load_causal_lm(str(folder), device=torch.device("cpu"))
    assert next(model.parameters()).dtype == torch.float32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the model placed on the device in bf16")
def test_the_model_on_cuda_takes_host_inputs(folder):
    from attnlab.llm.models.loading import load_causal_lm

    model, _ = load_causal_lm(str(folder), device=torch.device("cuda"))
    p = next(model.parameters())
    assert p.is_cuda and p.dtype == torch.bfloat16
    ids = torch.randint(0, 100, (1, 40))                                                  # on the host, as the commands build them
    assert model(input_ids=ids, labels=ids).logits.is_cuda

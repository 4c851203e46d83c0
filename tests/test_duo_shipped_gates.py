"""The DuoAttention gates attnlab ships: each file loads and fits its model's shape; ``duo-attention`` without
``gates`` reads the file of a known model, a user's ``gates=`` wins, and an unknown model is one line naming how to
train."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from tiny_llama import tiny_model  # noqa: E402

from attnlab.errors import UserError  # noqa: E402
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.plans import shipped_gates  # noqa: E402
from attnlab.llm.plans.duo_training import GateTraining, save_gates  # noqa: E402


def test_the_shipped_gates_load_and_fit_their_model_without_loading_it():
    """Each file's (layers, KV heads) equals the model's, read from the header of the calibration shipped for it."""
    from attnlab.llm.models.loading import MODELS
    from attnlab.llm.calibration.shipped import catalogue as calibrations
    from attnlab.schemas.calibration import load as load_calibration
    from attnlab.schemas.gates import load

    shipped = shipped_gates.catalogue()
    assert "smollm2-135m" in [m for m, _ in shipped]
    for model, path in shipped:
        assert model in MODELS and shipped_gates.shipped(model) == path
        gates = load(path)
        assert gates.meta.model == model and gates.meta.steps >= 1
        header = load_calibration(next(p for m, _, p in calibrations() if m == model)).header
        assert tuple(gates.gates.shape) == (header.num_layers, header.num_kv_heads)
        assert path.stat().st_size < 4096                      # (layers, KV heads) floats and the settings
    assert shipped_gates.shipped("no-such-model") is None and shipped_gates.shipped("") is None


@pytest.fixture
def known_tiny(tmp_path, monkeypatch):
    """The tiny Llama as if loaded from the cache folder of the known name smollm2-135m, with a gate file (2 layers ×
    2 KV heads: KV head 1 of layer 0 the only gate above 0.5) shipped for it in a folder of the test's own."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "gates"
    monkeypatch.setattr(shipped_gates, "FOLDER", folder)
    save_gates(folder / "smollm2-135m.safetensors", torch.tensor([[0.1, 0.9], [0.2, 0.3]]), "smollm2-135m",
               GateTraining())
    model = tiny_model()
    model.config._name_or_path = str(tmp_path / "cache" / "models" / "smollm2-135m")
    return model


def full_kv_heads(method) -> set:
    """(layer, KV head) of the plan's full heads (tiny_model: 2 query heads per KV head)."""
    return {(l, h // 2) for l, row in enumerate(method.plan.heads) for h, p in enumerate(row) if p.is_full}


def test_without_gates_a_known_model_reads_its_shipped_file(known_tiny):
    assert shipped_gates.known_name(known_tiny) == "smollm2-135m"
    m = methods.get("duo-attention", budget=0.5, threshold=0.5, sinks=4, recent=16)
    m.check_inputs()                                   # nothing to check before the model: the model names the file
    m.check_model(known_tiny)
    m.prepare(known_tiny, 256)
    assert full_kv_heads(m) == {(0, 1)}


def test_a_users_gate_file_wins_over_the_shipped_one(known_tiny, tmp_path):
    mine = tmp_path / "mine.safetensors"
    save_gates(mine, torch.tensor([[0.1, 0.2], [0.9, 0.3]]), "mine", GateTraining())
    m = methods.get("duo-attention", budget=0.5, gates=str(mine), threshold=0.5, sinks=4, recent=16)
    m.prepare(known_tiny, 256)
    assert full_kv_heads(m) == {(1, 0)}


@pytest.mark.parametrize("where", ["", "elsewhere/smollm2-135m", "cache/models/tiny-llama"])
def test_a_model_without_shipped_gates_is_one_line_naming_how_to_train(known_tiny, tmp_path, where):
    """A model built in memory, a user's folder of a known name outside the cache, an unknown name in the cache."""
    known_tiny.config._name_or_path = str(tmp_path / where) if where else ""
    assert shipped_gates.known_name(known_tiny) is None
    m = methods.get("duo-attention", budget=0.5)
    for call in (lambda: m.check_model(known_tiny), lambda: m.prepare(known_tiny, 256)):
        with pytest.raises(UserError) as e:
            call()
        text = str(e.value)
        assert "\n" not in text and text.startswith("--option gates:")
        assert "smollm2-135m" in text and "python benchmarks/duo_attention_train.py --hf MODEL --out FILE" in text


def test_a_shipped_file_for_another_shape_is_one_line(known_tiny, tmp_path):
    save_gates(shipped_gates.FOLDER / "smollm2-135m.safetensors", torch.ones(3, 2), "smollm2-135m", GateTraining())
    with pytest.raises(UserError, match="another model"):
        methods.get("duo-attention", budget=0.5).check_model(known_tiny)


def test_nothing_shipped_is_refused_before_the_model(monkeypatch, tmp_path):
    monkeypatch.setattr(shipped_gates, "FOLDER", tmp_path / "none")
    with pytest.raises(UserError, match="ships gates for no model"):
        methods.get("duo-attention").check_inputs()


def test_the_train_command_the_help_names_exists():
    """``attnlab methods`` names benchmarks/duo_attention_train.py with --hf and --out: both are its options."""
    from pathlib import Path

    from attnlab.llm.methods.duo_attention import TRAIN

    script = Path(__file__).resolve().parents[1] / TRAIN.split()[1]
    assert script.is_file()
    text = script.read_text(encoding="utf-8")
    assert '"--hf"' in text and '"--out"' in text

"""DuoAttention's gate files read through their schema (``attnlab.schemas.gates``): what ``save_gates`` writes loads;
a hand-edited file is refused in one line naming the file, the field and the rule."""

from __future__ import annotations

import pytest
import torch

from attnlab.errors import UserError
from attnlab.llm.plans.duo_training import GateTraining, load_gates, save_gates
from attnlab.schemas.gates import load

SHAPE = {"num_layers": 2, "num_kv_heads": 3}


def _written(tmp_path):
    path = tmp_path / "g.safetensors"
    save_gates(path, torch.rand(2, 3, generator=torch.Generator().manual_seed(0)), "tiny", GateTraining(steps=7))
    return path


def _edit(path, meta=None, tensors=None):
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(path), "pt") as f:
        m, t = dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors(t) if tensors else t, str(path), metadata=meta(m) if meta else m)
    return path


def test_what_save_gates_writes_loads_with_its_training(tmp_path):
    path = _written(tmp_path)
    got = load(path)
    assert got.meta.model == "tiny" and got.meta.steps == 7 and got.meta.lr == GateTraining().lr
    assert tuple(load_gates(path, SHAPE).shape) == (2, 3)
    with pytest.raises(UserError, match=r"another model \(tiny: gates \(2, 3\)"):
        load_gates(path, {"num_layers": 4, "num_kv_heads": 3})


CASES = [
    ("steps-text", lambda m: {**m, "steps": "x"}, None, "field steps"),
    ("steps-zero", lambda m: {**m, "steps": "0"}, None, "field steps"),
    ("lr-nan", lambda m: {**m, "lr": "nan"}, None, "field lr"),
    ("extra-key", lambda m: {**m, "note": "hi"}, None, "field note: unknown key"),
    ("no-model", lambda m: {k: v for k, v in m.items() if k != "model"}, None, "field model: required"),
    ("other-format", lambda m: {**m, "format": "attnlab-gates/0"}, None, "field format"),
    ("made-before", lambda m: {k: v for k, v in m.items() if k != "format"}, None, "train it again"),
    ("above-one", None, lambda t: {"gates": t["gates"] + 1}, "field gates: gates must be finite and in [0, 1]"),
    ("nan", None, lambda t: {"gates": t["gates"] * float("nan")}, "field gates: gates must be finite"),
    ("three-d", None, lambda t: {"gates": t["gates"][None]}, "field gates: must be a (layers, KV heads)"),
    ("float64", None, lambda t: {"gates": t["gates"].double()}, "float32"),
    ("extra-tensor", None, lambda t: {**t, "bias": torch.zeros(2)}, "field bias: unknown tensor"),
    ("renamed", None, lambda t: {"alpha": t["gates"]}, "field alpha"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_hand_edited_gate_file_is_refused_in_one_line(tmp_path, case):
    _, meta, tensors, needle = case
    path = _edit(_written(tmp_path), meta, tensors)
    with pytest.raises(UserError) as e:
        load_gates(path, SHAPE)
    msg = str(e.value)
    assert needle in msg and str(path) in msg and "\n" not in msg, msg


def test_not_a_gate_file(tmp_path):
    for content in (b"", b"plain text", b"\x00" * 16):
        (tmp_path / "x.safetensors").write_bytes(content)
        with pytest.raises(UserError, match="not a gate file"):
            load(tmp_path / "x.safetensors")
    with pytest.raises(UserError, match="no such file"):
        load(tmp_path / "missing.safetensors")
    with pytest.raises(UserError, match="not a regular file"):
        load(tmp_path)

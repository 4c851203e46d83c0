"""The registry of methods (attnlab.llm.methods): stated policies, one-line refusals, a model restored after use,
and no branch on a method's name outside its own file."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

from attnlab.errors import UserError  # noqa: E402
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.execution.attention import apply_plan, attention_modules  # noqa: E402
from attnlab.llm.calibration.statistics import calibrate  # noqa: E402
from attnlab.llm.calibration.pattern_search import add_patterns  # noqa: E402
from attnlab.llm.plans.plan import Plan, model_shape  # noqa: E402
from attnlab.llm.models.text_windows import token_windows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
N = 96


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The tiny local Llama folder (char tokenizer) with a text to calibrate on."""
    sys.path.insert(0, str(Path(__file__).parent))
    from char_model_folder import save_with_char_tokenizer

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    out = save_with_char_tokenizer(LlamaForCausalLM(cfg).eval(), tmp_path_factory.mktemp("tiny-llama"))
    (out / "text.txt").write_text(("To be, or not to be, that is the question. " * 12).strip())
    return out


@pytest.fixture(scope="module")
def loaded(folder):
    """(model, ids, calibration): the calibration holds every candidate a method asks for, and the loss gradients."""
    from transformers import AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    ids = token_windows(AutoTokenizer.from_pretrained(folder), folder / "text.txt", N, 2)
    shape = model_shape(model)
    cands = sorted({c for name in methods.names() for c in methods.get(name, 0.5).calibration_candidates(shape, N) or ()})
    cal = calibrate(model, ids, cands, err_rows=16, grads=True)
    keys = sorted({K for name in methods.names() for K in methods.get(name, 0.5).calibration_pattern_keys(N) or ()})
    add_patterns(cal, model, ids, keys)                              # MInference's pattern search at β = 0.5
    cal.retrieval = np.random.default_rng(0).random((shape["num_layers"], shape["num_heads"]))  # given scores (attnlab-retrieval)
    return model, ids, cal


def test_every_method_states_both_policies():
    names = methods.names()
    assert {"full", "streaming-llm", "minference-mass", "duo-attention", "attnlab-band", "oracle-topk", "attnlab-mass"} <= set(names)
    for name in names:
        m = methods.get(name, 0.25)
        assert m.name == name
        assert m.prefill.strip() and m.decoding.strip(), name
        assert m.describe()["prefill"] == m.prefill and m.describe()["decoding"] == m.decoding


def test_get_refuses_an_unknown_name_in_one_line():
    with pytest.raises(UserError) as err:
        methods.get("snapkv-typo")
    text = str(err.value)
    assert "\n" not in text and "'snapkv-typo'" in text and "streaming-llm" in text


def test_plan_names_are_the_methods_with_a_plan_file():
    plans = methods.plan_names()
    assert "oracle-topk" not in plans and {"full", "streaming-llm", "attnlab", "attnlab-band", "duo-attention", "minference-mass"} <= set(plans)
    assert set(methods.default_names()) >= {"full", "attnlab", "streaming-llm"} and "oracle-topk" not in methods.default_names()
    assert methods.get("full", 0.1).budget == 1.0      # full attention keeps every entry, whatever it is asked


SMALL = {"attnlab-retrieval": {"retrieval_heads": 2}}   # options that fit the tiny model (8 heads) at β = 0.5


@pytest.mark.parametrize("name", methods.names())
def test_applied_restores_the_model(loaded, name, tmp_path):
    model, ids, cal = loaded
    x = ids[0]
    with torch.no_grad():
        ref = model(x).logits
    before = model.config._attn_implementation
    opts = dict(SMALL.get(name, {}))
    if name == "duo-attention":                       # learned gates: a file of the model's shape
        from attnlab.llm.plans.duo_training import GateTraining, save_gates

        shape = model_shape(model)
        save_gates(tmp_path / "g.safetensors", torch.rand(shape["num_layers"], shape["num_kv_heads"]), "tiny", GateTraining())
        opts = {"gates": str(tmp_path / "g.safetensors"), "sinks": 2, "recent": 8}
    m = methods.get(name, 0.5, **opts)
    m.prepare(model, N, cal if m.calibrated else None)
    with torch.no_grad(), m.applied(model):
        inside = model(x).logits
        cache = m.new_cache(model)
        model(x, past_key_values=cache, use_cache=True)          # prefill into the method's own cache, then one step
        model(x[:, :1], past_key_values=cache, use_cache=True)
    assert torch.isfinite(inside).all()
    assert 0 < m.prefill_fraction(N) <= 1 + 1 / N
    assert model.config._attn_implementation == before
    assert not hasattr(model, "attnlab_plan") and not any(hasattr(mod, "attnlab_layer") for mod in attention_modules(model))
    with torch.no_grad():
        assert torch.equal(model(x).logits, ref)


def test_applied_puts_back_a_plan_the_model_ran(loaded):
    model, ids, _ = loaded
    plan = Plan.full(model_shape(model), N)
    apply_plan(model, plan)
    try:
        m = methods.get("streaming-llm", 0.3)
        m.prepare(model, N)
        with m.applied(model):
            assert model.attnlab_plan is m.plan
        assert model.attnlab_plan is plan and model.config._attn_implementation == "attnlab"
        assert all(mod.attnlab_layer is not None for mod in attention_modules(model))
    finally:
        for mod in attention_modules(model):
            del mod.attnlab_layer
        del model.attnlab_plan
        model.set_attn_implementation("sdpa")


def test_calibrated_method_refuses_without_calibration(loaded):
    model, _, _ = loaded
    with pytest.raises(UserError, match="needs calibration text"):
        methods.get("attnlab-band", 0.2).prepare(model, N)


def test_attnlab_variants_choose_by_their_table(loaded):
    model, _, cal = loaded
    for name, table in (("attnlab-mass", "fit"), ("attnlab-est", "est"), ("attnlab-err", "err"), ("attnlab-err-rel", "err-rel"),
                        ("attnlab-err-grad", "err-grad"), ("attnlab-delta", "delta")):
        plan = methods.get(name, 0.3).make_plan(model, N, cal)
        assert plan.meta["table"] == table and plan.method == name and plan.fraction(N) <= 0.3
    assert methods.get("attnlab-band", 0.3).make_plan(model, N, cal).meta["table"] == "err-rel"


def test_plan_cli_takes_its_choices_from_the_registry(folder, tmp_path, capsys, monkeypatch):
    from attnlab.cli import main

    monkeypatch.setattr(sys, "argv", ["attnlab", "plan", "--hf", str(folder), "--calibrate", str(folder / "text.txt"),
                                      "--method", "oracle-topk", "--out", str(tmp_path / "p.json")])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "--method" in err and "streaming-llm" in err
    assert not (tmp_path / "p.json").exists()


def test_plan_file_refuses_another_length(tmp_path):
    from attnlab.llm.methods.attnlab_plan import PlanFile

    path = Plan.full({"num_layers": 1, "num_heads": 2, "num_kv_heads": 1}, 300).save(tmp_path / "p.json")

    class Tiny:  # model_shape reads the config only
        class config:
            num_hidden_layers, num_attention_heads, num_key_value_heads, hidden_size = 1, 2, 1, 8

    with pytest.raises(UserError, match="made for n = 300 tokens, run at --n 200"):
        PlanFile(path).prepare(Tiny(), 200)


# ---- no branch on a method's name outside its own file ----------------------------------------------------

METHODS_DIR = ROOT / "attnlab" / "llm" / "methods"


def name_branches(source: str, names: set[str]) -> list[int]:
    """Lines where a registered method's name is compared with (==, !=, in, startswith …) or keys a dispatch dict."""
    lines = []

    def literals(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            for e in node.elts:
                yield from literals(e)

    for node in ast.walk(ast.parse(source)):
        found = []
        if isinstance(node, ast.Compare):
            for part in [node.left, *node.comparators]:
                found += [s for s in literals(part) if s in names]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("startswith", "endswith", "removeprefix"):
            found += [s for a in node.args for s in literals(a) if any(n.startswith(s) or n.endswith(s) for n in names) and len(s) > 3]
        elif isinstance(node, ast.Dict):
            found += [s for k in node.keys if k is not None for s in literals(k) if s in names]
        if found:
            lines.append(node.lineno)
    return lines


def test_the_scan_finds_a_branch_on_a_name():
    names = {"streaming-llm", "minference-mass", "attnlab"}
    bad = 'def f(m):\n    if m == "streaming-llm":\n        return 1\n    if m.startswith("minference"):\n        return 2\n' \
          '    return {"attnlab": 3}[m] if m in ("x", "attnlab") else 0\n'
    assert name_branches(bad, names) == [2, 4, 6, 6]
    assert name_branches('def f(m):\n    return methods.get(m)\n', names) == []


def test_no_module_branches_on_a_method_name():
    """attnlab/ and the LLM benchmarks read the registry (get, names, Method fields); only a method's file names it."""
    # "full" is also an attention mechanism's and a layer type's name (attnlab.nn): the method's is REFERENCE
    names = set(methods.names()) - {methods.REFERENCE}
    offenders = []
    for path in sorted((ROOT / "attnlab").rglob("*.py")) + sorted((ROOT / "benchmarks").glob("llm_*.py")):
        if METHODS_DIR in path.parents:
            continue
        offenders += [f"{path.relative_to(ROOT)}:{line}" for line in name_branches(path.read_text(encoding="utf-8"), names)]
    assert not offenders, f"branches on a method's name outside attnlab/llm/methods/: {offenders}"  # use the registry

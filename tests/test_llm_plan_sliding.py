"""Plans for a model with sliding-window layers (Gemma-3): each sliding head keeps at most its window,
is counted by the band it runs, and the calibration of a sliding layer (keys of the window only) is exact.

A tiny random Gemma3ForCausalLM (6 layers, window 32, layers 5 full) stands in for Gemma-3-270M.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnlab.llm.plans import baselines  # noqa: E402
from attnlab.llm.execution.attention import apply_plan  # noqa: E402
from attnlab.llm.calibration.statistics import Calibration, calibrate  # noqa: E402
from attnlab.llm.plans.plan import FULL, HeadPlan, Plan, entries_of, model_shape  # noqa: E402
from attnlab.llm.plans.selection import choose_plan  # noqa: E402
from attnlab.support import Support  # noqa: E402

W = 32  # the tiny model's sliding window


@pytest.fixture(scope="module")
def gemma():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
                           num_key_value_heads=1, head_dim=16, sliding_window=W, max_position_embeddings=1024, query_pre_attn_scalar=16)
    return Gemma3ForCausalLM(cfg).eval()


def test_model_shape_names_the_sliding_layers(gemma):
    assert model_shape(gemma)["windows"] == [W] * 5 + [None]


def test_a_sliding_head_is_capped_at_its_window_and_counted_so(gemma):
    shape, n = model_shape(gemma), 256
    plan = Plan.full(shape, n)
    for l in range(5):
        assert all(h.w == W - 1 and h.columns == [] and h.dynamic == 0 for h in plan.heads[l])
    assert all(h.is_full for h in plan.heads[5])
    want = (5 * entries_of(W - 1, 0, 0, n) + n * (n + 1) // 2) / (6 * n * (n + 1) // 2)
    assert plan.fraction(n) == pytest.approx(want)
    # a wider band or columns asked for in a sliding layer are cut to the window
    wide = HeadPlan(support=Support(w=100, columns=np.array([0, 1])), dynamic=5)
    p = Plan.uniform(shape, wide, "t", 0.5, n)
    assert p.heads[0][0].w == W - 1 and p.heads[0][0].columns == [] and p.heads[0][0].dynamic == 0
    assert p.heads[5][0].w == 100 and p.heads[5][0].columns == [0, 1] and p.heads[5][0].dynamic == 5


def test_plan_json_keeps_windows_and_refuses_other_windows(gemma, tmp_path):
    from attnlab.errors import UserError

    shape = model_shape(gemma)
    p = Plan.full(shape, 128).save(tmp_path / "p.json")
    q = Plan.load(p)
    assert q.windows == shape["windows"] and q.heads[0][0].w == W - 1
    q.check(gemma)
    other = Plan.full({**shape, "windows": [64] * 5 + [None]}, 128)
    with pytest.raises(UserError, match="sliding windows"):
        other.check(gemma)


def test_sliding_calibration_reads_the_window_only_and_is_exact():
    """observe(sliding=W) equals the dense reference with the model's mask (i − j < W), for every grid table."""
    H, n = 2, 300
    torch.manual_seed(1)
    q, k, v = torch.randn(1, H, n, 16), torch.randn(1, H, n, 16), torch.randn(1, H, n, 16)
    cal = Calibration({"num_layers": 1, "num_heads": H, "num_kv_heads": H}, n)
    out = cal.observe(0, q, k, v, 0.25, sliding=W)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    a = torch.softmax(((q[0] @ k[0].transpose(-1, -2)) * 0.25).masked_fill((j > i) | (i - j >= W), float("-inf")), -1).double()
    assert (out[0] - a.float() @ v[0]).abs().max() < 1e-5
    fit = cal.mean("fit")[0]
    for x, w in enumerate(cal.w_grid[:8]):
        off = (i - j) > w
        band = (a * ((i >= j) & ~off)).sum((-2, -1))
        np.testing.assert_allclose(fit[:, x, 0], band.numpy() / n, atol=1e-6)
    assert np.allclose(fit[:, cal.w_grid.index(W), :], 1.0)  # no mass beyond the window


@pytest.mark.parametrize("budget", [0.15, 0.1])
def test_every_method_keeps_the_windows_and_the_budget(gemma, budget):
    n = 1024  # β(n+1)/2 keys per row > W: the window binds
    shape = model_shape(gemma)
    ids = [torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(s)) for s in range(2)]
    cal = calibrate(gemma, ids, sorted(set(baselines.minference_candidates(budget, n, shape))))
    assert cal.shape["windows"] == shape["windows"]
    plans = {"attnlab": choose_plan(cal, budget), "streaming": baselines.streaming_llm(shape, budget, n),
             "mi-mass": baselines.minference(cal, budget, "mass"), "duo": baselines.duo_attention(cal, budget)}
    for name, p in plans.items():
        assert p.fraction(n) <= budget + 1e-9, name
        for l in range(5):
            assert all(h.w != FULL and h.w <= W - 1 and not h.columns and not h.dynamic for h in p.heads[l]), (name, l)
    # the entries the sliding layers do not use go to the full layer: its heads read more than W keys
    assert plans["streaming"].heads[5][0].w > W
    assert plans["streaming"].fraction(n) > budget - 0.02
    assert plans["mi-mass"].fraction(n) > budget - 0.03
    # the knapsack spends what is left on the full layer, not on sliding bands past the window
    assert plans["attnlab"].fraction(n) > budget - 0.02
    apply_plan(gemma, plans["attnlab"])
    with torch.no_grad():
        assert torch.isfinite(gemma(ids[0]).logits).all()


def test_minference_budget_of_the_full_layers():
    shape = {"num_layers": 6, "num_heads": 4, "num_kv_heads": 1, "windows": [W] * 5 + [None]}
    n = 1024
    beta, band = baselines.minference_budget(0.2, n, shape)
    assert band == W - 1
    total = n * (n + 1) / 2
    assert beta * 4 * total + 5 * 4 * entries_of(W - 1, 0, 0, n) == pytest.approx(0.2 * 24 * total)
    assert baselines.minference_budget(0.2, n, {**shape, "windows": None}) == (0.2, None)


def _benchmark():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "llm_structured.py"
    spec = importlib.util.spec_from_file_location("llm_structured_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_chunked_window_nll_equals_the_models_loss(gemma, monkeypatch):
    from attnlab.llm.eval import perplexity   # the benchmark's perplexity

    monkeypatch.setattr(perplexity, "LOGIT_ROWS", 7)  # several chunks, the last one short
    gemma.set_attn_implementation("sdpa")
    ids = torch.randint(0, 100, (1, 50), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = gemma(ids, labels=ids, use_cache=False).loss.item()
    assert perplexity.window_nll(gemma, ids) == pytest.approx(ref, rel=1e-5)


@pytest.fixture(scope="module")
def gemma_dir(gemma, tmp_path_factory):
    from char_model_folder import save_with_char_tokenizer

    return save_with_char_tokenizer(gemma, tmp_path_factory.mktemp("tiny-gemma"))


def test_ppl_of_full_and_streaming_needs_no_calibration(gemma_dir, tmp_path, monkeypatch, capsys):
    bench = _benchmark()
    if not (bench.DATA / "test.txt.gz").exists():
        pytest.skip("no shakespeare data")
    run = ["llm_structured.py", "ppl", "--model", str(gemma_dir), "--out", str(tmp_path), "--lengths", "96", "--windows", "1", "--budgets", "0.5"]
    monkeypatch.setattr("sys.argv", run + ["--methods", "full,streaming-llm,oracle-topk"])
    bench.main()
    rows = [json.loads(x) for x in (tmp_path / "ppl.jsonl").read_text().splitlines()]
    assert [r["method"] for r in rows] == ["full", "streaming-llm", "oracle-topk"] and all(np.isfinite(r["ppl"]) for r in rows)
    assert rows[1]["fraction"] <= 0.5 and rows[2]["fraction"] <= 0.5 + 1 / 96
    monkeypatch.setattr("sys.argv", run + ["--methods", "attnlab"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        bench.main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "calibration-96.npz: no calibration" in err and err.count("\n") == 1


def test_attention_stage_uses_the_models_head_size_and_windows(gemma_dir, tmp_path, monkeypatch):
    bench = _benchmark()
    if not (bench.DATA / "train.txt.gz").exists():
        pytest.skip("no shakespeare data")
    common = ["--model", str(gemma_dir), "--out", str(tmp_path)]
    monkeypatch.setattr("sys.argv", ["llm_structured.py", "calibrate", *common, "--lengths", "96", "--windows", "1", "--budgets", "0.5"])
    bench.main()
    monkeypatch.setattr("sys.argv", ["llm_structured.py", "attention", *common, "--n", "96", "--budget", "0.5", "--threads", "1"])
    bench.main()
    row = json.loads((tmp_path / "attention.jsonl").read_text().splitlines()[-1])
    assert row["layers"] == 6 and row["fraction"] <= 0.5 and np.isfinite(row["speedup"]) and row["speedup"] > 0


def test_gemmas_normalised_attention_output_is_measured_as_the_stream_sees_it(gemma):
    """Gemma adds γ ⊙ y / rms(y) to the stream (y = o_proj's output): the option errors use diag(γ) W_h and 1 / rms(y)²."""
    from attnlab.llm.calibration.statistics import output_gain, output_norms

    norms = output_norms(gemma)
    assert len(norms) == 6 and all(nm is gemma.model.layers[l].post_attention_layernorm for l, nm in enumerate(norms))
    nm = norms[0]
    saved = nm.weight.detach().clone()
    try:
        with torch.no_grad():
            nm.weight.normal_()
        assert torch.allclose(output_gain(nm), (1 + nm.weight).double(), atol=1e-5)   # Gemma's RMSNorm scales by 1 + weight
        ids = [torch.randint(0, 100, (1, 128), generator=torch.Generator().manual_seed(3))]
        cal = calibrate(gemma, ids, err_rows=16)
        assert (cal.out_scale > 0).all()
        W = gemma.model.layers[0].self_attn.o_proj.weight.detach()
        assert torch.allclose(cal.out_proj[0].double(), ((1 + nm.weight)[:, None] * W).double(), atol=1e-5)
    finally:
        with torch.no_grad():
            nm.weight.copy_(saved)


def test_llama_has_no_output_norm():
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnlab.llm.calibration.statistics import output_norms

    cfg = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    assert output_norms(LlamaForCausalLM(cfg)) == [None, None]


def test_the_benchmarks_ppl_makes_the_retrieval_scores_attnlab_retrieval_reads(gemma_dir, tmp_path, monkeypatch):
    bench = _benchmark()
    if not (bench.DATA / "train.txt.gz").exists():
        pytest.skip("no shakespeare data")
    from attnlab.llm.calibration.statistics import Calibration

    common = ["--model", str(gemma_dir), "--out", str(tmp_path), "--lengths", "160", "--windows", "1", "--budgets", "0.5"]
    monkeypatch.setattr("sys.argv", ["llm_structured.py", "calibrate", *common])
    bench.main()
    assert not Calibration.load(tmp_path / "calibration-160.npz").retrieval.any()      # calibrate alone makes none
    monkeypatch.setattr("sys.argv", ["llm_structured.py", "ppl", *common, "--methods", "attnlab-retrieval"])
    bench.main()
    assert Calibration.load(tmp_path / "calibration-160.npz").retrieval.any()          # made once, kept with the calibration
    rows = [json.loads(x) for x in (tmp_path / "ppl.jsonl").read_text().splitlines()]
    assert rows[-1]["method"].startswith("attnlab-retrieval") and np.isfinite(rows[-1]["ppl"])


def test_a_sliding_floor_keeps_every_sliding_band_at_least_that_wide(gemma):
    from attnlab.errors import UserError

    n, budget = 512, 0.08
    ids = [torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(s)) for s in range(2)]
    cal = calibrate(gemma, ids)
    free = choose_plan(cal, budget)
    floor = choose_plan(cal, budget, sliding_floor=24)
    assert min(h.w for l in range(5) for h in free.heads[l]) < 24                     # the knapsack cuts some sliding band below 24
    assert all(h.w >= 24 for l in range(5) for h in floor.heads[l])                    # the floor holds in every sliding layer
    assert floor.fraction(n) <= budget + 1e-9
    assert all(h.w == W - 1 for l in range(5) for h in choose_plan(cal, 0.2, sliding_floor=10**6).heads[l])  # capped at the window
    lowered = choose_plan(cal, budget, sliding_floor=10**6)                          # a floor β cannot hold: lowered to
    used = lowered.meta.get("sliding_floor", 0)                                            # the grid's largest band that fits
    assert 0 <= used < W - 1 and used in [0, *cal.w_grid] and lowered.fraction(n) <= budget + 1e-9
    assert all(h.w >= min(used, W - 1) for l in range(5) for h in lowered.heads[l])
    grid = sorted(int(w) for w in cal.w_grid if 0 < w < W - 1)
    if used:                                                                          # it fits, held as asked
        assert choose_plan(cal, budget, sliding_floor=used).meta.get("sliding_floor", 0) == used
    above = [w for w in grid if w > used]
    if above:                                                                         # the next band up does not: lowered
        assert choose_plan(cal, budget, sliding_floor=above[0]).meta.get("sliding_floor", 0) == used
    with pytest.raises(UserError, match="below the cheapest plan"):                  # below even the floorless plan: one line
        choose_plan(cal, 1e-6, sliding_floor=24)


def test_a_band_floor_keeps_every_planned_head_at_least_that_wide(gemma):
    """band_floor f: no planned head of any layer gets a band below f (a sliding layer: below min(f, window − 1)); the
    plan still within β, the floor in its meta; without it the knapsack gives some head a narrower band."""
    n, budget = 512, 0.08
    ids = [torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(s)) for s in range(2)]
    cal = calibrate(gemma, ids)
    free = choose_plan(cal, budget)
    assert min(h.w for row in free.heads for h in row if not h.is_full) < 8
    for f in (8, 16):
        plan = choose_plan(cal, budget, band_floor=f)
        assert all(h.w >= f for row in plan.heads for h in row if not h.is_full)
        assert plan.fraction(n) <= budget + 1e-9 and plan.meta["band_floor"] == f
    both = choose_plan(cal, 0.2, band_floor=8, sliding_floor=24)                      # the larger floor in sliding layers
    assert both.meta["sliding_floor"] == 24 and both.fraction(n) <= 0.2 + 1e-9
    assert all(h.w >= 24 for l in range(5) for h in both.heads[l]) and all(h.w >= 8 for h in both.heads[5] if not h.is_full)
    assert all(h.w == W - 1 for l in range(5) for h in choose_plan(cal, 0.3, band_floor=10**4).heads[l])  # capped at the window


def test_minference_runs_a_model_with_sliding_layers(gemma):
    """MInference's runner on Gemma-3: the sliding layers read their window through the plan's own prefill (a runner
    attribute once shadowed that method and every sliding layer failed), the global layer its searched pattern."""
    import numpy as np

    from attnlab.llm import methods
    from attnlab.llm.execution import sparse_patterns as sp

    n, budget = 160, 0.5
    shape = model_shape(gemma)
    cal = Calibration(shape, n)
    rec = np.zeros((shape["num_layers"], shape["num_heads"], 1, 3))
    for h, p in enumerate(["vs", "lambda", "block", "vs"]):
        rec[:, h, 0, sp.PATTERNS.index(p)] = 0.9
    cal.pattern_keys, cal.pattern_recall = [sp.budget_keys(budget, n)], rec
    m = methods.get("minference", budget)
    m.prepare(gemma, n, cal)
    ids = torch.randint(3, 100, (1, n), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = gemma(ids).logits
        with m.applied(gemma):
            sparse = gemma(ids).logits
    assert torch.isfinite(sparse).all()
    assert not torch.equal(sparse, full)                  # the global layer's patterns read fewer keys than full
    # β counts what runs: a sliding layer's heads their window (Σ_i min(i + 1, W)), the global layer's their patterns
    heads = m.heads[5]
    want = (5 * 4 * entries_of(W - 1, 0, 0, n) + sum(sp.entries(hd["pattern"], hd, n) for hd in heads)) / (6 * 4 * n * (n + 1) / 2)
    assert m.prefill_fraction(n) == pytest.approx(want)
    # decoding keeps what the model's own cache keeps: a sliding layer its window, the global layer every key
    cache = m.new_cache(gemma)
    with torch.no_grad(), m.applied(gemma):
        gemma(ids, past_key_values=cache, use_cache=True)
    assert [layer.keys.shape[2] for layer in cache.layers] == [W - 1] * 5 + [n]

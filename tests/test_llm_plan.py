"""Per-head LLM plans: calibration = exact fit, execution = dense masked reference, full plan = SDPA, KV cache, bad input.

A tiny random LlamaForCausalLM (2 layers, 4 query / 2 KV heads) stands in for a real model, so
the tests need no weights; the real-model figures come from benchmarks/llm_structured.py.
"""

from __future__ import annotations

import json
import sys
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

transformers = pytest.importorskip("transformers")
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402

from attnlab.errors import UserError  # noqa: E402
from attnlab.llm.plans import baselines  # noqa: E402
from attnlab.llm.execution.attention import apply_plan, attention_modules, plan_reference  # noqa: E402
from attnlab.llm.execution.kv_cache import PlanCache, kv_bytes  # noqa: E402
from attnlab.llm.calibration.statistics import Calibration, calibrate  # noqa: E402
from attnlab.llm.plans.plan import LAST_Q, HeadPlan, Plan, model_shape  # noqa: E402
from attnlab.llm.plans.selection import choose_plan  # noqa: E402
from attnlab.support import Support, top_columns  # noqa: E402


def tiny_model(layers=2, heads=4, kv_heads=2, seed=0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=1024)
    return LlamaForCausalLM(cfg).eval()


def mixed_plan(layers=2, kv_heads=2):
    row = [HeadPlan(support=Support(w=8, columns=np.array([0, 1])), dynamic=3), HeadPlan.full(),
           HeadPlan(support=Support(w=0, columns=np.zeros(0, dtype=np.int64)), dynamic=2), HeadPlan(support=Support(w=20))]
    return Plan([list(row) for _ in range(layers)], kv_heads, "attnlab", 0.5, 200)


@pytest.fixture(scope="module")
def model():
    return tiny_model()


def test_full_plan_equals_sdpa_exactly(model):
    ids = torch.randint(0, 100, (2, 150), generator=torch.Generator().manual_seed(1))
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        ref = model(ids).logits
        apply_plan(model, Plan.full(model_shape(model)))
        out = model(ids).logits
    assert torch.equal(out, ref)


def test_budget_one_chooses_full():
    cal = Calibration({"num_layers": 1, "num_heads": 2, "num_kv_heads": 1}, 64)
    torch.manual_seed(0)
    cal.observe(0, torch.randn(1, 2, 64, 8), torch.randn(1, 2, 64, 8), torch.randn(1, 2, 64, 8), 0.3)
    assert choose_plan(cal, 1.0).full_heads() == 2


def dense_reference(q, k, v, scaling, w, columns):
    # q: (B, H, n, d), k, v: (B, H_kv, n, d) → out (B, H, n, d): masked softmax over Support.dense ∩ causal
    B, H, n, _ = q.shape
    rep = H // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    out = torch.empty_like(q)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for b in range(B):
        for h in range(H):
            allowed = causal & Support(w=int(w[h]), columns=columns[b, h]).dense(n, n)
            s = (q[b, h] @ k[b, h].T) * scaling
            out[b, h] = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v[b, h]
    return out


@pytest.mark.parametrize("n", [37, 130])
@pytest.mark.parametrize("native", [True, False])   # the kernel reading the heads in place / the grouped copies
@pytest.mark.parametrize("layout", ["heads", "tokens", "tokens-batch"])   # (B, H, n, d) contiguous / transformers' transposed views (B = 1, 2)
def test_each_planned_head_equals_its_dense_masked_reference(model, n, native, layout, monkeypatch):
    import attnlab.nn.mechanisms.sliding_window as sw

    monkeypatch.setattr(sw, "NATIVE", native)
    apply_plan(model, mixed_plan())
    runner = attention_modules(model)[0].attnlab_layer
    torch.manual_seed(n)
    if layout == "heads":
        q, k, v = torch.randn(2, 4, n, 16), torch.randn(2, 2, n, 16), torch.randn(2, 2, n, 16)
    else:   # rows of a head H·d floats apart, as q_proj(x).view(B, n, H, d).transpose(1, 2): the kernel reads them in place
        B = 1 if layout == "tokens" else 2   # B = 2: (B, H) is not one axis of memory, a kernel call per batch entry
        q, k, v = torch.randn(B, n, 4, 16).transpose(1, 2), torch.randn(B, n, 2, 16).transpose(1, 2), torch.randn(B, n, 2, 16).transpose(1, 2)
    out, state = runner.prefill(q, k, v, 0.25)                           # chunked kernel + SDPA for the full head
    ref = dense_reference(q, k, v, 0.25, runner.w.tolist(), state.decode_columns)
    assert (out - ref).abs().max() < 1e-5
    assert (plan_reference(runner, q, k, v, 0.25, state) - ref).abs().max() < 1e-5  # the decoding path too
    cols = state.decode_columns
    assert (cols[:, 0, :2] == torch.tensor([0, 1])).all() and (cols[:, 0, 2:5] >= 0).all()  # fixed, then 3 dynamic
    assert (cols[:, 3] < 0).all()                                            # band only


@pytest.mark.parametrize("every", [1, 3])
def test_generation_with_plan_cache_equals_full_cache_and_keeps_less(model, every, monkeypatch):
    import attnlab.llm.execution.kv_cache as kv_cache

    monkeypatch.setattr(kv_cache, "EVICT_EVERY", every)  # compaction after each token / every 3 tokens
    plan = Plan([[HeadPlan(support=Support(w=8, columns=np.array([0])), dynamic=2)] * 4 for _ in range(2)], 2, "t", 0.2, 200)
    apply_plan(model, plan)
    ids = torch.randint(0, 100, (1, 200), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=8, do_sample=False, output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        cache = PlanCache(model)
        small = model.generate(ids, past_key_values=cache, **kw)
        dense = DynamicCache()
        big = model.generate(ids, past_key_values=dense, **kw)
    assert torch.equal(small.sequences, big.sequences)
    assert max((a - b).abs().max().item() for a, b in zip(small.scores, big.scores)) < 1e-4
    # 1 sink + 2 dynamic columns + window 8 (+ the newest key) per KV head, instead of 207 keys,
    # + the keys that left the window since the last compaction
    assert cache.layers[0].keys.shape[2] <= 1 + 2 * 2 + 9 + (every - 1)
    assert kv_bytes(cache) * 10 < kv_bytes(dense)
    assert cache.get_seq_length() == 207


def test_calibration_is_the_exact_fit():
    H, n = 3, 300
    torch.manual_seed(0)
    q, k, v = torch.randn(1, H, n, 16), torch.randn(1, H, n, 16), torch.randn(1, H, n, 16)
    cal = Calibration({"num_layers": 1, "num_heads": H, "num_kv_heads": H}, n)
    out = cal.observe(0, q, k, v, 0.25)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    a = torch.softmax(((q[0] @ k[0].transpose(-1, -2)) * 0.25).masked_fill(j > i, float("-inf")), -1).double()
    assert (out[0] - a.float() @ v[0]).abs().max() < 1e-5
    fit = cal.mean("fit")[0]
    for x, w in enumerate(cal.w_grid[:7]):
        off = (i - j) > w
        c = (a * off).sum(-2)                                                 # off-band column mass
        band = (a * ((i >= j) & ~off)).sum((-2, -1))
        for y, g in enumerate(cal.g_grid[:6]):
            T = top_columns(c, g)
            mass = band + torch.stack([c[h, T[h][T[h] >= 0]].sum() for h in range(H)])
            np.testing.assert_allclose(fit[:, x, y], mass.numpy() / n, atol=1e-6)  # a in float32, sums in float64


def test_plans_respect_the_budget_and_the_fit_captures_most(model):
    ids = [torch.randint(0, 100, (1, 256), generator=torch.Generator().manual_seed(s)) for s in range(2)]
    cands = sorted(set(baselines.minference_candidates(0.2, 256)))
    cal = calibrate(model, ids, cands)
    shape = model_shape(model)
    plans = {"attnlab": choose_plan(cal, 0.2, table="fit"), "streaming": baselines.streaming_llm(shape, 0.2, 256),
             "mi-mass": baselines.minference(cal, 0.2, "mass"), "mi-err": baselines.minference(cal, 0.2, "error"),
             "duo": baselines.duo_attention(cal, 0.2)}
    for name, p in plans.items():
        assert p.fraction(256) <= 0.2 + 1e-9, name
    # on the calibration text the exact fit's plan captures at least the mass of StreamingLLM's
    fit = cal.mean("fit")
    captured = plans["attnlab"].meta["captured_mass"]
    w_s = plans["streaming"].heads[0][0].w
    assert captured >= cal.mean("sink")[..., cal.w_grid.index(max(w for w in cal.w_grid if w <= w_s))].mean() - 1e-9
    assert 0 < captured <= 1 and fit.max() <= 1 + 1e-9
    # the plan runs and gives finite logits
    apply_plan(model, plans["attnlab"])
    with torch.no_grad():
        assert torch.isfinite(model(ids[0]).logits).all()


def test_plan_json_roundtrip_and_wrong_model(tmp_path, model):
    p = mixed_plan()
    path = p.save(tmp_path / "plan.json")
    q = Plan.load(path)
    assert q.to_dict() == p.to_dict()
    q.check(model)
    other = tiny_model(layers=3)
    with pytest.raises(UserError, match="another model"):
        q.check(other)
    with pytest.raises(UserError, match="another model"):
        apply_plan(tiny_model(heads=8, kv_heads=2), q)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UserError, match="not a plan file"):
        Plan.load(tmp_path / "bad.json")


@pytest.mark.parametrize("budget", [0, -0.1, 1.5, float("nan")])
def test_budget_outside_unit_interval(budget):
    cal = Calibration({"num_layers": 1, "num_heads": 1, "num_kv_heads": 1}, 64)
    with pytest.raises(ValueError, match="budget"):
        choose_plan(cal, budget)


# ---- command line (a tiny model folder with a character tokenizer) ------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from char_model_folder import save_with_char_tokenizer

    folder = save_with_char_tokenizer(tiny_model(), tmp_path_factory.mktemp("tiny-llama"))
    text = folder / "text.txt"
    text.write_text(("To be, or not to be, that is the question. " * 30).strip())
    return folder


def test_cli_plan_and_run(model_dir, tmp_path, cli):
    out = tmp_path / "p.json"
    r = cli("plan", "--hf", model_dir, "--calibrate", model_dir / "text.txt", "--budget", "0.2", "--n", "300", "--windows", "1", "--out", out)
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["num_layers"] == 2 and d["num_heads"] == 4 and d["fraction"] <= 0.2
    r = cli("plan-run", "--hf", model_dir, "--plan", out, "--file", model_dir / "text.txt", "--n", "300")
    assert r.returncode == 0, r.stderr
    assert "perplexity at n = 300" in r.stdout


def test_cli_bad_input(model_dir, tmp_path, cli):
    text = model_dir / "text.txt"
    for budget in ("0", "1.5"):
        r = cli("plan", "--hf", model_dir, "--calibrate", text, "--budget", budget, "--out", tmp_path / "x.json")
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--budget" in r.stderr, r.stderr
    r = cli("plan", "--hf", model_dir, "--calibrate", text, "--budget", "0.1", "--n", "5000", "--out", tmp_path / "x.json")
    assert r.returncode == 2 and "--n 5000: longer than the context" in r.stderr and "1024 tokens" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr  # refused from the configuration, before the model loads
    assert not (tmp_path / "x.json").exists()
    wrong = Plan.full({"num_layers": 3, "num_heads": 4, "num_kv_heads": 2}, 300).save(tmp_path / "wrong.json")
    r = cli("plan-run", "--hf", model_dir, "--plan", wrong, "--file", text, "--n", "300")
    assert r.returncode == 2 and "made for another model" in r.stderr and "num_layers 3 vs 2" in r.stderr, r.stderr


def test_gemma3_sliding_layers_full_plan_matches_sdpa():
    """Gemma-3: 5 of 6 layers slide (window 32 here); the plan applies the model's window itself."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
                           num_key_value_heads=1, head_dim=16, sliding_window=32, max_position_embeddings=512, query_pre_attn_scalar=16)
    m = Gemma3ForCausalLM(cfg).eval()
    m.set_attn_implementation("sdpa")
    ids = torch.randint(0, 100, (1, 150), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = m(ids).logits
        g_ref = m.generate(ids, max_new_tokens=6, do_sample=False)
        apply_plan(m, Plan.full(model_shape(m)))
        assert (m(ids).logits - ref).abs().max() < 1e-4
        cache = PlanCache(m)
        assert torch.equal(m.generate(ids, past_key_values=cache, max_new_tokens=6, do_sample=False), g_ref)
    from attnlab.llm.execution.kv_cache import EVICT_EVERY

    assert cache.layers[0].keys.shape[2] <= 32 + EVICT_EVERY - 1  # a sliding layer keeps its window (+ keys not yet compacted)


def test_calibration_makes_no_logits_of_the_whole_window(monkeypatch):
    """Calibration needs the attention statistics only: the LM head sees one row, not n (n × V floats:
    17 GB for Gemma-3's 262K vocabulary at 16K tokens)."""
    m = tiny_model(layers=1)
    rows = []
    monkeypatch.setattr(m.lm_head, "forward", lambda x: (rows.append(x.shape[1]), torch.zeros(*x.shape[:2], 100))[1])
    calibrate(m, [torch.randint(0, 100, (1, 64), generator=torch.Generator().manual_seed(0))])
    assert rows == [1]


def dense_last_query_mass(q, k, scaling, last_q=LAST_Q):
    """Σ_i softmax_{t ≤ i}(q_i·k_t·scaling) over the last queries i, one head and one query at a time (no batching)."""
    B, H, n, _ = q.shape
    m = k.shape[2]
    mass = torch.zeros(B, H, m)
    for b in range(B):
        for h in range(H):
            for i in range(max(0, n - last_q), n):
                p = m - n + i                                                           # the query's position
                mass[b, h, : p + 1] += torch.softmax(q[b, h, i] @ k[b, h, : p + 1].T * scaling, -1)
    return mass


@given(B=st.integers(1, 2), r=st.sampled_from([1, 2, 3]), H_kv=st.integers(1, 3), n=st.integers(1, 20),
       extra=st.integers(0, 9), last_q=st.integers(1, 12), pick=st.integers(0, 2 ** 9 - 1), tokens=st.booleans())
@settings(max_examples=40, deadline=None)
def test_last_query_mass_equals_the_summed_causal_softmax_of_the_last_queries(B, r, H_kv, n, extra, last_q, pick, tokens):
    from attnlab.llm.plans.slash_lines import last_query_mass, last_query_rows
    from attnlab.nn.mechanisms import native

    H, m, d = H_kv * r, n + extra, 8
    gen = torch.Generator().manual_seed(B * 1000 + n * 10 + extra)
    q, k = torch.randn(B, H, n, d, generator=gen), torch.randn(B, H_kv, m, d, generator=gen)
    if tokens:   # transformers' layout: rows H·d floats apart
        q, k = q.transpose(1, 2).contiguous().transpose(1, 2), k.transpose(1, 2).contiguous().transpose(1, 2)
    ref = dense_last_query_mass(q, k.repeat_interleave(r, 1), 0.4, last_q)
    assert torch.allclose(last_query_mass(q, k, 0.4, last_q), ref, atol=1e-5)      # the native column_mass where it runs
    with mock.patch.object(native, "available", lambda: False):                      # PyTorch's softmax and sum
        assert torch.allclose(last_query_mass(q, k, 0.4, last_q), ref, atol=1e-5)
    assert torch.allclose(last_query_rows(q, k, 0.4, last_q).sum(-2), ref, atol=1e-5)
    heads = [h for h in range(H) if pick >> h & 1] or [0]                               # a subset, by KV head
    kv = torch.tensor(heads) // r
    assert torch.allclose(last_query_mass(q[:, heads], k, 0.4, last_q, kv=kv), ref[:, heads], atol=1e-5)
    assert torch.allclose(last_query_rows(q[:, heads], k, 0.4, last_q, kv=kv).sum(-2), ref[:, heads], atol=1e-5)


@pytest.mark.parametrize("dynamic", [(3, 0, 4, 0), (2, 5, 1, 3), (40, 40, 0, 40)])   # some heads without dynamic columns / all / every allowed key
def test_choose_columns_takes_each_heads_fixed_then_its_top_estimate_off_the_band(dynamic):
    from attnlab.llm.execution.attention import LayerRunner

    widths, fixed = (5, 0, 9, 2), ([0, 1], [], [], [0])
    heads = [HeadPlan(support=Support(w=w, columns=np.array(f, dtype=np.int64)), dynamic=dy) for w, f, dy in zip(widths, fixed, dynamic)]
    runner = LayerRunner(heads, 0, 2)
    gen = torch.Generator().manual_seed(sum(dynamic))
    n = 40
    q, k = torch.randn(2, 4, n, 16, generator=gen), torch.randn(2, 2, n, 16, generator=gen)
    cols, _ = runner.choose_columns(q, k, 0.3)
    est = dense_last_query_mass(q, k.repeat_interleave(2, 1), 0.3)                     # (B, H, m), every head
    for b in range(2):
        for h in range(4):
            got = [int(c) for c in cols[b, h] if c >= 0]
            assert got[: len(fixed[h])] == fixed[h]
            allowed = [j for j in range(n - widths[h] - 1) if j not in fixed[h]]
            best = sorted(allowed, key=lambda j: -float(est[b, h, j]))[: dynamic[h]]   # dynamic ≥ n: every allowed key
            assert sorted(got[len(fixed[h]):]) == sorted(best), (b, h)

"""The calibration's option errors are the errors of the options as executed (LayerRunner), and the
error-table plan picks by them: cheap checks on random tensors and a tiny random Llama."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.llm.execution.attention import LayerRunner, estimate_columns
from attnlab.llm.calibration.statistics import Calibration
from attnlab.llm.plans.plan import SINKS, HeadPlan
from attnlab.llm.plans.selection import choose_plan, knapsack
from attnlab.llm.calibration.plan_error import option_errors, projection_factor, sample_rows
from attnlab.support import Support


def test_sample_rows_spread_evenly():
    assert sample_rows(8, 4).tolist() == [1, 3, 5, 7]
    assert sample_rows(3, 10).tolist() == [0, 1, 2]


def test_projection_factor_gives_the_projected_norm():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(24, 3 * 4, generator=g, dtype=torch.float64)  # (hidden, H·d)
    U = projection_factor(W, 3, 4)
    x = torch.randn(4, generator=g, dtype=torch.float64)
    for h in range(3):
        assert torch.allclose((U[h] @ x).norm(), (W[:, 4 * h : 4 * h + 4] @ x).norm())


@pytest.mark.parametrize("n", [60, 97])
def test_option_errors_equal_the_executed_plans_errors(n):
    g = torch.Generator().manual_seed(n)
    H, d = 2, 8
    q, k, v = (torch.randn(H, n, d, generator=g) * 1.5 for _ in range(3))
    k[:, 0] += 3 * q.mean(1)                         # a sink that matters
    W = torch.randn(16, H * d, generator=g)
    scaling = d ** -0.5
    rows = sample_rows(n, 9)
    w_grid, g_grid = [0, 3, 10, 40, n], [0, 1, 2, 4, 8]
    est = estimate_columns(q[None], k[None], scaling)[0]
    U = projection_factor(W, H, d)
    err, mass, _ = option_errors(q, k, v, scaling, est, rows, w_grid, g_grid, SINKS, U)
    full = torch.softmax((q @ k.transpose(-1, -2) * scaling).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")), -1)
    o = full @ v                                                         # (H, n, d)
    for z, s in enumerate((0, SINKS)):
        for x, w in enumerate(w_grid):
            for y, gg in enumerate(g_grid):
                heads = [HeadPlan(support=Support(w=w, columns=np.arange(s, dtype=np.int64)), dynamic=gg) for _ in range(H)]
                runner = LayerRunner(heads, 0, H)
                out, state = runner.prefill(q[None], k[None], v[None], scaling)
                out = out[0]                                                # (H, n, d) as executed
                diff = torch.einsum("hed,hrd->hre", U.float(), (out - o)[:, rows])
                ref = (diff ** 2).sum(-1).mean(-1).double()
                assert torch.allclose(err[:, z, x, y], ref, rtol=1e-3, atol=1e-9), (s, w, gg)
                cols = state.decode_columns[0]                              # (H, g) the executed columns
                keep = torch.zeros(H, len(rows), n, dtype=torch.bool)
                for h in range(H):
                    for r, i in enumerate(rows.tolist()):
                        keep[h, r, max(0, i - w) : i + 1] = True
                        c = cols[h][(cols[h] >= 0) & (cols[h] <= i)]
                        keep[h, r, c] = True
                m = (full[:, rows] * keep).sum(-1).mean(-1).double()
                assert torch.allclose(mass[:, z, x, y], m, rtol=1e-4), (s, w, gg)
    assert (err[:, :, -1] < 1e-10).all() and torch.allclose(mass[:, :, -1], torch.ones(()).double())  # w ≥ n − 1: full


def test_option_errors_of_a_sliding_layer_use_its_mask():
    """Window W: the exact output reads i − j < W; band w ≥ W − 1 is exact, a narrower band's error is its dense one's."""
    g = torch.Generator().manual_seed(3)
    H, d, n, W = 2, 8, 80, 12
    q, k, v = (torch.randn(H, n, d, generator=g) for _ in range(3))
    rows = sample_rows(n, 10)
    w_grid = [0, 4, W - 1, 40]
    est = estimate_columns(q[None], k[None], d ** -0.5)[0]
    err, mass, _ = option_errors(q, k, v, d ** -0.5, est, rows, w_grid, [0], SINKS, sliding=W)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    s = (q @ k.transpose(-1, -2)) * d ** -0.5
    o = torch.softmax(s.masked_fill((j > i) | (i - j >= W), float("-inf")), -1) @ v
    for x, w in enumerate(w_grid):
        o_w = torch.softmax(s.masked_fill((j > i) | (i - j > min(w, W - 1)), float("-inf")), -1) @ v
        ref = ((o_w - o)[:, rows] ** 2).sum(-1).mean(-1).double()
        assert torch.allclose(err[:, 0, x, 0], ref, rtol=1e-4, atol=1e-10), w
    assert (err[:, 0, 2:, 0] < 1e-10).all() and torch.allclose(mass[:, 0, 2:, 0], torch.ones(()).double())


def test_knapsack_takes_per_head_costs_and_never_an_infinite_loss():
    gain = np.array([[[0.0, 1.0, -np.inf, 3.0], [0.0, 2.0, 2.5, 3.0]]])     # (1, 2, 4)
    cost = np.array([[[1.0, 2.0, 3.0, 10.0], [1.0, 2.0, 3.0, 4.0]]])
    choice = knapsack(gain, cost, 6.0)
    assert choice[0, 0] != 2 and np.take_along_axis(cost, choice[..., None], -1).sum() <= 6.0
    assert choice.tolist() == [[1, 3]]                                          # 1 + 3 = 4 is the best within 6


def toy_cal(err):
    """A calibration holding only an error table: err (L, H, 2, Gw, Gg)."""
    L, H = err.shape[:2]
    cal = Calibration({"num_layers": L, "num_heads": H, "num_kv_heads": H}, 64, err_rows=8)
    cal.w_grid, cal.g_grid = [0, 8], [0, 1]
    cal.err = np.asarray(err, dtype=np.float64)
    cal.mass_exec = np.zeros_like(cal.err)
    cal.resid = np.ones(L)
    cal.windows = np.ones(L)
    return cal


def test_err_table_puts_the_budget_where_the_error_drops_most():
    # head 0 gains little from w = 8, head 1 a lot: the budget for one wide band goes to head 1
    err = np.zeros((1, 2, 2, 2, 2))
    err[0, 0, :, 0], err[0, 0, :, 1] = 1.0, 0.9
    err[0, 1, :, 0], err[0, 1, :, 1] = 1.0, 0.1
    cal = toy_cal(err)
    n = 64
    per_head = n * (n + 1) / 2
    budget = (9 * n - 36 + n) / (2 * per_head) + 1e-6   # one band w = 8, one band w = 0
    plan = choose_plan(cal, budget, table="err")
    assert [h.w for h in plan.heads[0]] == [0, 8]
    assert plan.fraction() <= budget
    # the sinks are kept when they lower the error enough for their price, dropped when not
    err2 = err.copy()
    err2[0, :, 1] -= 0.05                             # sinks help both heads a little
    assert all(len(h.columns) == SINKS for h in choose_plan(toy_cal(err2), 0.5, table="err").heads[0])
    err3 = err.copy()
    err3[0, :, 1] += 0.05                             # sinks hurt: never bought
    assert all(len(h.columns) == 0 for h in choose_plan(toy_cal(err3), 0.5, table="err").heads[0])


def test_err_rel_divides_by_the_residual_norm():
    # layer 1's errors are larger but so is its residual stream: relative to it, layer 0 needs the band
    err = np.zeros((2, 1, 2, 2, 2))
    err[0, 0, :, 0], err[0, 0, :, 1] = 1.0, 0.0
    err[1, 0, :, 0], err[1, 0, :, 1] = 5.0, 0.0
    cal = toy_cal(err)
    cal.resid = np.array([1.0, 100.0])
    n = 64
    budget = (9 * n - 36 + n) / (n * (n + 1)) + 1e-6     # two heads: one band w = 8, one w = 0
    assert [row[0].w for row in choose_plan(cal, budget, table="err").heads] == [0, 8]
    assert [row[0].w for row in choose_plan(cal, budget, table="err-rel").heads] == [8, 0]


def test_knapsack_is_optimal_on_small_instances():
    rng = np.random.default_rng(0)
    for _ in range(20):
        gain = rng.random((1, 3, 3))
        cost = np.array([1.0, 2.0, 3.0])
        limit = float(rng.integers(3, 10))
        choice = knapsack(gain, cost, limit)
        best = max((gain[0, 0, a] + gain[0, 1, b] + gain[0, 2, c], (a, b, c)) for a in range(3) for b in range(3) for c in range(3)
                   if cost[a] + cost[b] + cost[c] <= limit)
        got = gain[0, np.arange(3), choice[0]].sum()
        assert cost[choice[0]].sum() <= limit and got >= best[0] - 0.35   # the Lagrangian + greedy fill: near the optimum


def test_old_calibration_has_no_error_table(tmp_path):
    cal = Calibration({"num_layers": 1, "num_heads": 2, "num_kv_heads": 1}, 64)
    torch.manual_seed(0)
    cal.observe(0, torch.randn(1, 2, 64, 8), torch.randn(1, 2, 64, 8), torch.randn(1, 2, 64, 8), 0.3)
    cal.save(tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz") as z:   # a calibration written before the option errors: no such arrays
        np.savez(tmp_path / "c.npz", **{k: z[k] for k in z.files if k not in Calibration.OPTIONAL + ("err_rows",)})
    back = Calibration.load(tmp_path / "c.npz")
    from attnlab.errors import UserError

    with pytest.raises(UserError, match="no option errors"):
        choose_plan(back, 0.5, table="err")
    assert choose_plan(back, 0.5).meta["table"] == "fit"            # the default falls back to the captured mass
    with pytest.raises(ValueError, match="table"):
        choose_plan(back, 0.5, table="nope")


@pytest.mark.parametrize("argv, says", [(["ppl", "--methods", "attnlab,nope"], "--methods: unknown nope"),
                                        (["calibrate", "--err-rows", "-3"], "--err-rows: must be >= 0")])
def test_benchmark_bad_input(tmp_path, argv, says):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "llm_structured.py"), *argv, "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=root)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_option_errors_stay_finite_when_a_sink_dwarfs_the_band():
    # the diagonal's weight is ~e^-60 of the sink's: a prefix-sum difference would cancel to 0/0
    g = torch.Generator().manual_seed(3)
    H, n, d = 1, 50, 4
    q = torch.randn(H, n, d, generator=g)
    k = torch.randn(H, n, d, generator=g) * 0.01
    q[:] = torch.tensor([1.0, 0, 0, 0])
    k[:, 0] = torch.tensor([120.0, 0, 0, 0])                     # score 60 at the sink with scaling ½
    v = torch.randn(H, n, d, generator=g)
    rows = sample_rows(n, 5)
    est = estimate_columns(q[None], k[None], 0.5)[0]
    err, _, _ = option_errors(q, k, v, 0.5, est, rows, [0], [0], SINKS)
    ref = ((v[0, rows] - v[0, 0]) ** 2).sum(-1).mean().double()   # diagonal alone vs (almost) the sink's value
    assert torch.isfinite(err).all() and torch.allclose(err[0, 0, 0, 0], ref, rtol=1e-4)


def tiny_llama():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return transformers.LlamaForCausalLM(cfg).eval()


def test_row_gradients_match_finite_differences():
    from attnlab.llm.execution.attention import apply_plan, attention_modules
    from attnlab.llm.calibration.statistics import row_gradients
    from attnlab.llm.plans.plan import Plan, model_shape

    model = tiny_llama().double()
    ids = torch.randint(0, 100, (1, 40), generator=torch.Generator().manual_seed(2))
    apply_plan(model, Plan.full(model_shape(model)))
    mods = attention_modules(model)
    rows = sample_rows(40, 4)
    grads = row_gradients(model, ids, rows, mods)
    direction = torch.randn(32, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    layer, r, eps = 1, 2, 1e-5

    def loss_with(shift):
        def hook(mod, args, out):
            o = out[0].clone()
            o[0, rows[r]] += shift * direction
            return (o,) + tuple(out[1:])
        hd = mods[layer].register_forward_hook(hook)
        with torch.no_grad():  # summed NLL in float64 (transformers' loss casts the logits to float32)
            logits = model(ids).logits[0, :-1].double()
            value = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum").item()
        hd.remove()
        return value

    fd = (loss_with(eps) - loss_with(-eps)) / (2 * eps)
    assert abs(fd - float(grads[layer][r] @ direction)) < 1e-3 * max(1.0, abs(fd))   # the loss itself is float32 inside


def test_calibrate_records_errors_and_their_loss_change():
    from attnlab.llm.calibration.statistics import calibrate

    model = tiny_llama()
    windows = [torch.randint(0, 100, (1, 64), generator=torch.Generator().manual_seed(s)) for s in (4, 5)]
    assert not calibrate(model, windows[:1], err_rows=8).gsq.any()   # gradients only when asked
    cal = calibrate(model, windows, err_rows=8, grads=True)
    assert cal.windows.tolist() == [2, 2] and (cal.gsq > 0).all() and (cal.resid > 0).all()
    for t in ("err", "delta"):
        x = getattr(cal, t)
        assert np.isfinite(x).all() and (x >= 0).all() and x.max() > 0
        assert np.allclose(x[:, :, :, -1, -1], 0, atol=1e-12)       # widest band + every other key as a column: exact
    plan = choose_plan(cal, 0.3, table="delta")
    assert plan.fraction() <= 0.3 and plan.meta["table"] == "delta"


def test_default_rule_is_err_rel_and_beats_sinks_plus_window_on_its_objective():
    from attnlab.llm.plans import baselines
    from attnlab.llm.calibration.statistics import calibrate

    model = tiny_llama()
    n = 128
    windows = [torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(s)) for s in (6, 7)]
    cal = calibrate(model, windows, err_rows=32)
    plan = choose_plan(cal, 0.2)
    assert plan.meta["table"] == "err-rel" and plan.fraction() <= 0.2
    # StreamingLLM's support on the grid (the widest grid w within its window): a feasible choice of the
    # same knapsack, so the chosen plan's objective Σ ε_h / resid_l cannot be worse
    w_s = baselines.streaming_window(0.2, n)
    x = max(i for i, w in enumerate(cal.w_grid) if w <= w_s)
    rel = cal.mean("err") / cal.mean("resid")[:, None, None, None, None]
    streaming = rel[:, :, 1, x, 0].sum()
    assert plan.meta["mean_error"] * rel.shape[0] * rel.shape[1] <= streaming * (1 + 1e-9)
    assert plan.meta["mean_error"] > 0


@pytest.mark.parametrize("n, m, H, H_kv", [(100, 100, 6, 2), (10, 100, 4, 1), (40, 40, 3, 3)])
def test_estimate_columns_groups_kv_heads_without_copies(n, m, H, H_kv):
    """Σ of the last queries' causal attention per key, GQA by grouping = the same with the keys copied per head."""
    g = torch.Generator().manual_seed(n + m)
    q, k = torch.randn(1, H, n, 8, generator=g), torch.randn(1, H_kv, m, 8, generator=g)
    kx = k[:, torch.arange(H) // (H // H_kv)]
    nq = min(16, n)
    i, j = torch.arange(m - nq, m)[:, None], torch.arange(m)[None]
    ref = torch.softmax((q[:, :, n - nq :] @ kx.transpose(-1, -2) * 0.3).masked_fill(j > i, float("-inf")), -1).sum(-2)
    assert torch.allclose(estimate_columns(q, k, 0.3, last_q=16), ref, atol=1e-5)

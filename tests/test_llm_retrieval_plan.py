"""attnlab-retrieval: the heads of largest retrieval score stay full, the knapsack spends the rest of β."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.errors import UserError
from attnlab.llm import methods
from attnlab.llm.calibration.statistics import Calibration
from attnlab.llm.plans.selection import choose_plan


def _calibration(L=2, H=4, n=128, seed=0):
    cal = Calibration({"num_layers": L, "num_heads": H, "num_kv_heads": H // 2}, n)
    g = torch.Generator().manual_seed(seed)
    for layer in range(L):
        q, k, v = (torch.randn(1, H, n, 8, generator=g) for _ in range(3))
        cal.observe(layer, q, k, v, 0.35)
    return cal


SCORES = np.array([[0.1, 0.9, 0.0, 0.2], [0.05, 0.3, 0.8, 0.0]])   # retrieval scores: heads (0, 1) and (1, 2) lead


def scored_calibration():
    """``_calibration`` with retrieval scores ``SCORES`` (the slash-line and key-block tests use it too)."""
    cal = _calibration()
    cal.retrieval = SCORES.copy()
    return cal


def test_keep_full_heads_are_full_and_the_budget_holds():
    cal = _calibration()
    keep = np.zeros((2, 4), dtype=bool)
    keep[1, 2] = keep[0, 1] = True
    plan = choose_plan(cal, 0.4, keep_full=keep)
    assert plan.heads[1][2].is_full and plan.heads[0][1].is_full
    assert plan.fraction() <= 0.4 + 1e-9
    free = choose_plan(cal, 0.4)
    assert plan.full_heads() >= 2 and free.fraction() <= 0.4 + 1e-9


def test_too_small_a_budget_for_the_kept_heads_is_one_line():
    cal = _calibration()
    keep = np.ones((2, 4), dtype=bool)
    keep[0, 0] = False
    with pytest.raises(UserError, match="kept full"):
        choose_plan(cal, 0.5, keep_full=keep)


def test_the_method_keeps_the_top_retrieval_heads(monkeypatch):
    cal = scored_calibration()
    m = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2", tail="0")
    plan = m.make_plan(None, cal.n, cal)
    assert plan.meta["retrieval_heads"] == [[0, 1], [1, 2]]
    assert plan.heads[0][1].is_full and plan.heads[1][2].is_full
    cal.retrieval = np.zeros((2, 4))
    with pytest.raises(UserError, match="no retrieval scores"):
        m.make_plan(None, cal.n, cal)
    with pytest.raises(UserError, match="retrieval_heads"):
        methods.get("attnlab-retrieval", 0.5, retrieval_heads="-1")
    with pytest.raises(UserError, match="no option"):
        methods.get("attnlab-retrieval", 0.5, heads="2")


def test_the_eval_rows_say_how_many_heads_have_tails():
    """describe() (what an eval row records) counts the heads given tails and the read-back pages of the plan."""
    cal = scored_calibration()
    for k, T, pages in ((2, 8, 0), (3, 8, 4), (2, 0, 0)):
        m = methods.get("attnlab-retrieval", 0.5, retrieval_heads=str(k), tail=str(T), pages=str(pages))
        m.plan, m.n = m.make_plan(None, cal.n, cal), cal.n
        d = m.describe()
        assert d["tail_heads"] == (k if T else 0) and d["pages"] == pages
        assert d["full_heads"] >= (0 if T else k)


def test_retrieval_scores_survive_save_and_load(tmp_path):
    cal = _calibration()
    cal.retrieval = np.arange(8.0).reshape(2, 4)
    cal.save(tmp_path / "c.npz")
    assert np.array_equal(Calibration.load(tmp_path / "c.npz").retrieval, cal.retrieval)


def test_tails_cost_what_they_read_and_run_exactly(tmp_path):
    """A head with a tail: its last T rows equal full attention, the rows before its band; the plan's
    fraction counts the tail; decoding reads the whole cache (PlanCache keeps it)."""
    import transformers

    from attnlab.llm.execution.attention import apply_plan, attention_modules
    from attnlab.llm.execution.kv_cache import PlanCache
    from attnlab.llm.plans.plan import HeadPlan, Plan, tail_entries
    from attnlab.support import Support

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512)
    model = transformers.LlamaForCausalLM(cfg).eval()
    n, T, w = 96, 16, 4
    band = HeadPlan(support=Support(w=w, columns=np.zeros(0, dtype=np.int64)))
    plain = Plan([[band, band]], 1, "test", 0.5, n)
    tailed = Plan([[HeadPlan(support=band.support, tail=T), band]], 1, "attnlab", 0.5, n)
    assert tailed.fraction() - plain.fraction() == pytest.approx(tail_entries(w, T, n) / (2 * n * (n + 1) / 2))
    assert Plan.load(tailed.save(tmp_path / "p.json")).heads[0][0].tail == T
    x = torch.randint(0, 50, (1, n))
    captured = {}
    mod = attention_modules(model)[0]
    hook = mod.register_forward_hook(lambda m, a, kw, out: captured.setdefault("o", kw), with_kwargs=True)
    hook.remove()
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        full = model(x).logits
        apply_plan(model, plain)
        p_plain = model(x).logits
        apply_plan(model, Plan([[HeadPlan.full(), band]], 1, "test", 0.5, n))
        p_full0 = model(x).logits
        apply_plan(model, tailed)
        p_tail = model(x).logits
    assert torch.allclose(p_tail[0, n - T :], p_full0[0, n - T :], atol=1e-5)  # the tail rows: head 0 exactly full
    # one layer: the last T rows of head 0 read everything; head 1 still a band, so rows differ from full attention
    # but rows before the tail equal the plain plan exactly
    assert torch.allclose(p_tail[0, : n - T], p_plain[0, : n - T], atol=1e-6)
    assert not torch.allclose(p_tail[0, n - T :], p_plain[0, n - T :], atol=1e-4)
    runner = mod.attnlab_layer
    assert int(runner.w_read[0]) == -1 and int(runner.w_read[1]) == w
    cache = PlanCache(model)
    with torch.no_grad():
        model(x, cache=cache, use_cache=True)
    assert cache.layers[0].keys.shape[2] == n  # the KV head of a head with a tail keeps its whole cache
    del full


def test_widths_own_makes_the_plan_independent_of_the_other_methods_candidates():
    """A calibration made beside MInference holds its candidate widths too; ``widths="own"`` offers attnlab's grid
    alone, so the plan is the one of a calibration made without them; ``"all"`` may take the foreign widths."""
    from attnlab.llm.calibration.statistics import W_GRID

    def cal_with(candidates):
        cal = Calibration({"num_layers": 2, "num_heads": 4, "num_kv_heads": 2}, 128, candidates)
        g = torch.Generator().manual_seed(0)
        for layer in range(2):
            q, k, v = (torch.randn(1, 4, 128, 8, generator=g) for _ in range(3))
            cal.observe(layer, q, k, v, 0.35)
        return cal

    foreign = [(w, 4, 0) for w in (3, 5, 6, 7, 9, 11, 13)]                            # widths W_GRID does not hold
    alone, beside = cal_with(None), cal_with(foreign)
    assert set(beside.w_grid) - set(alone.w_grid) == {3, 5, 6, 7, 9, 11, 13}
    for budget in (0.1, 0.2, 0.4):
        own = choose_plan(beside, budget, widths="own")
        assert all(h.w in W_GRID for row in own.heads for h in row if not h.is_full)
        assert own.to_dict()["heads"] == choose_plan(alone, budget).to_dict()["heads"] and own.meta["widths"] == "own"
    took = {h.w for b in (0.1, 0.2, 0.4) for row in choose_plan(beside, b).heads for h in row if not h.is_full}
    assert took - set(W_GRID)                                                         # "all": the knapsack uses them
    with pytest.raises(ValueError, match="widths"):
        choose_plan(alone, 0.2, widths="mine")
    m = methods.get("attnlab-retrieval", 0.4, retrieval_heads="2", widths="own")
    beside.retrieval = SCORES.copy()
    assert all(h.w in W_GRID for row in m.make_plan(None, 128, beside).heads for h in row if not h.is_full)
    with pytest.raises(UserError, match="widths"):
        methods.get("attnlab-band", 0.2, widths="some")

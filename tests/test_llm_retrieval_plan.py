"""attnlab-retrieval: the heads of largest retrieval score stay full, the knapsack spends the rest of β."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.errors import UserError
from attnlab.llm import methods
from attnlab.llm.plan import Calibration, choose_plan


def _calibration(L=2, H=4, n=128, seed=0):
    cal = Calibration({"num_layers": L, "num_heads": H, "num_kv_heads": H // 2}, n)
    g = torch.Generator().manual_seed(seed)
    for layer in range(L):
        q, k, v = (torch.randn(1, H, n, 8, generator=g) for _ in range(3))
        cal.observe(layer, q, k, v, 0.35)
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
    cal = _calibration()
    cal.retrieval = np.array([[0.1, 0.9, 0.0, 0.2], [0.05, 0.3, 0.8, 0.0]])
    m = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2")
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


def test_retrieval_scores_survive_save_and_load(tmp_path):
    cal = _calibration()
    cal.retrieval = np.arange(8.0).reshape(2, 4)
    cal.save(tmp_path / "c.npz")
    assert np.array_equal(Calibration.load(tmp_path / "c.npz").retrieval, cal.retrieval)

"""MInference's three patterns and its offline per-head search (``minference``, patterns=search)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
from tiny_llama import tiny_model  # noqa: E402

from attnlab.errors import UserError  # noqa: E402
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.execution import sparse_patterns as sp  # noqa: E402
from attnlab.llm.execution.backend import dense_support  # noqa: E402
from attnlab.llm.execution.attention import attention_modules  # noqa: E402
from attnlab.llm.calibration.statistics import Calibration  # noqa: E402
from attnlab.llm.calibration.pattern_search import choose, counts, head_recall, measure, save_choice  # noqa: E402
from attnlab.llm.plans.plan import model_shape  # noqa: E402
from attnlab.support import Support  # noqa: E402


def dense_reference(q, k, v, scaling, allowed):
    # q: (n, d), k, v: (n, d), allowed (n, n) → (n, d)
    s = (q @ k.T) * scaling
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v


def pooled_choice_numpy(q, k, blocks):
    """Brute force: per query block the diagonal block and the top blocks − 1 earlier blocks by mean(q)·mean(k)."""
    n = q.shape[0]
    T = -(-n // 64)
    qb = np.stack([q[t * 64 : (t + 1) * 64].mean(0) for t in range(T)])
    kb = np.stack([k[t * 64 : (t + 1) * 64].mean(0) for t in range(T)])
    out = []
    for t in range(T):
        sc = qb[t] @ kb[:t].T
        out.append({t} | set(np.argsort(-sc, kind="stable")[: blocks - 1].tolist()))
    return out


def test_block_sparse_picks_the_block_of_largest_pooled_score():
    n, d = 8 * 64, 16
    blk = torch.arange(n) // 64
    q = torch.nn.functional.one_hot(blk, d).float() * 3           # block t's queries point at direction t
    k = torch.nn.functional.one_hot(blk + 3, d).float() * 3       # key block u points at u + 3: block t matches block t − 3
    k[:, 0] = 0.1 * torch.arange(n) / n                           # tiny, ordered differences elsewhere
    chosen = sp.block_choice(q[None], k[None], 2)[0]              # (T, 2)
    for t in range(8):
        got = set(chosen[t].tolist()) - {-1}
        assert got == {t, t - 3} if t >= 3 else t in got and len(got) == min(t + 1, 2)
    assert chosen[0].tolist() == [0, -1]                          # nothing before block 0: one empty slot
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(300, 8, generator=g), torch.randn(300, 8, generator=g)
    got = sp.block_choice(q[None], k[None], 3)[0]
    for t, want in enumerate(pooled_choice_numpy(q.numpy(), k.numpy(), 3)):
        assert set(got[t].tolist()) - {-1} == want


def hand_attention(n, weights):
    """Rows built from a function weights(i) → (n,) nonnegative mass over j ≤ i, normalised."""
    a = torch.zeros(n, n)
    for i in range(n):
        row = weights(i)
        row[i + 1 :] = 0
        a[i] = row / row.sum()
    return a


@pytest.mark.parametrize("kind", ["lambda", "vs", "block"])
def test_search_picks_the_pattern_of_the_head(kind):
    n, d, scaling = 512, 16, 1.0
    K = sp.budget_keys(0.4, n)                                    # 103 keys: Λ 11 + w 91, vs 51 + 52, block 2
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)
    if kind == "lambda":                                          # sinks + a local window wider than vs's band
        def weights(i):
            r = torch.zeros(n)
            r[:4] = 1.0
            r[max(0, i - 85) : i + 1] = 4.0 / min(i + 1, 86) * 20
            return r
        a = hand_attention(n, weights)
    elif kind == "vs":                                            # three strong columns + a short local band
        def weights(i):
            r = torch.zeros(n)
            r[[100, 200, 300]] = 1.0
            r[max(0, i - 20) : i + 1] += 2.0 / min(i + 1, 21)
            return r
        a = hand_attention(n, weights)
    else:                                                         # query block t reads key block t − 3 (from q, k)
        blk = torch.arange(n) // 64
        q = torch.nn.functional.one_hot(blk, d).float() * 5
        k = torch.nn.functional.one_hot(blk + 3, d).float() * 5
        i = torch.arange(n)
        a = torch.softmax((q @ k.T * scaling).masked_fill(i[None, :] > i[:, None], float("-inf")), -1)
    rec = head_recall(a, q, k, scaling, K)
    assert sp.PATTERNS[int(np.argmax(rec))] == kind, rec
    assert rec.max() > 0.9 and np.all(rec <= 1 + 1e-6)
    choice = choose(rec[None, None], K)
    assert choice[0][0]["pattern"] == kind and {**choice[0][0], "pattern": 0, "recall": 0} == {
        "pattern": 0, "recall": 0, **sp.settings(kind, K)}


def fake_calibration(model, n, K, picks):
    """A calibration whose recall table makes head h of every layer pick ``picks[h]``."""
    shape = model_shape(model)
    cal = Calibration(shape, n)
    rec = np.zeros((shape["num_layers"], shape["num_heads"], 1, 3))
    for h, p in enumerate(picks):
        rec[:, h, 0, sp.PATTERNS.index(p)] = 0.9
    cal.pattern_keys, cal.pattern_recall = [K], rec
    return cal


@pytest.mark.parametrize("n,budget", [(200, 0.9), (300, 0.9), (256, 0.6)])
def test_prefill_with_the_chosen_patterns_equals_the_masked_dense_softmax(n, budget):
    model = tiny_model()
    K = sp.budget_keys(budget, n)
    picks = ["lambda", "vs", "block", "block"]
    m = methods.get("minference", budget)
    m.prepare(model, n, fake_calibration(model, n, K, picks))
    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, 4, n, 16, generator=g) for _ in range(3))
    k, v = k[:, :2], v[:, :2]
    with m.applied(model):
        runner = attention_modules(model)[0].attnlab_layer
        out, state = runner.prefill(q, k, v, 0.25)
        sups = state.supports
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    causal = j <= i
    for h in range(4):
        pattern, sup = sups[h]
        assert pattern == picks[h]
        if pattern == "lambda":
            a, w = sup
            assert (a, w) == (sp.settings("lambda", K)["sinks"], sp.settings("lambda", K)["w"])
            allowed = causal & ((j < a) | (i - j <= w))
        elif pattern == "vs":
            allowed = causal & torch.as_tensor(Support(w=sup.w, columns=sup.columns[0], diagonals=sup.diagonals[0]).dense(n, n))
        else:
            blocks = [set(row.tolist()) - {-1} for row in sup[0]]
            allowed = causal & torch.tensor([[int(jj) // 64 in blocks[int(ii) // 64] for jj in range(n)] for ii in range(n)])
            assert all(t in blocks[t] and len(blocks[t]) == min(t + 1, sp.settings("block", K)["blocks"]) for t in range(len(blocks)))
        assert torch.equal(dense_support(state.pattern_parts, n)[0, h], allowed)   # the seam's parts: the pattern's support
        ref = dense_reference(q[0, h], k[0, h // 2], v[0, h // 2], 0.25, allowed)
        torch.testing.assert_close(out[0, h], ref, atol=1e-5, rtol=1e-5)
        assert int(allowed.sum()) <= sp.entries(pattern, m.heads[0][h], n)
    assert m.describe()["pattern_counts"] == {"lambda": 2, "vs": 2, "block": 4}


def test_decoding_reads_the_whole_cache():
    model = tiny_model(1)
    n = 130
    ids = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(1))
    m = methods.get("minference", 0.5)
    m.prepare(model, n, fake_calibration(model, n, sp.budget_keys(0.5, n), ["block", "lambda", "vs", "block"]))
    with torch.no_grad():
        with m.applied(model):
            cache = m.new_cache(model)
            model(ids, past_key_values=cache, use_cache=True)
            step = model(torch.tensor([[5]]), past_key_values=cache, use_cache=True).logits
        assert cache.layers[0].keys.shape[2] == n + 1                     # nothing evicted
        full = transformers.DynamicCache()
        for l in range(2):
            full.update(cache.layers[l].keys[:, :, :n], cache.layers[l].values[:, :, :n], l)
        ref = model(torch.tensor([[5]]), past_key_values=full, use_cache=True).logits
    torch.testing.assert_close(step, ref, atol=1e-5, rtol=1e-5)


def test_measure_runs_exact_attention_and_the_table_survives_the_file(tmp_path):
    model = tiny_model(2)
    n = 160
    ids = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(ids).logits
    import io

    from attnlab.progress import LineProgress

    said = io.StringIO()
    rec = measure(model, [ids], [8, 2 * n], LineProgress(said))     # (L, H, 2, 3)
    lines = said.getvalue().splitlines()                            # one bar over the windows' layers: its start and its end
    assert lines[0].endswith("MInference's pattern search at 8, 320 keys per row: 2 layers …"), lines
    assert "2/2 layers in" in lines[-1], lines
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ref)           # the model put back as it was
    assert rec.shape == (2, 4, 2, 3) and np.all((rec >= 0) & (rec <= 1 + 1e-6))
    np.testing.assert_allclose(rec[:, :, 1], 1.0, atol=1e-6)         # K ≥ n: every pattern reads every causal key
    cal = Calibration(model_shape(model), n)
    cal.pattern_keys, cal.pattern_recall = [8, 2 * n], rec
    cal.save(tmp_path / "c.npz")
    back = Calibration.load(tmp_path / "c.npz")
    assert back.pattern_keys == [8, 2 * n] and np.array_equal(back.pattern_recall, rec)
    choice = choose(rec[:, :, 0], 8)
    save_choice(tmp_path / "p.json", choice, {"n": n})
    import json

    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["counts"] == counts(choice) and sum(doc["counts"].values()) == 8 and len(doc["heads"]) == 2


def test_bad_options_and_missing_search_are_one_line():
    cases = [({"patterns": "all"}, "patterns"), ({"vertical": 4}, "vertical"), ({"patterns": "vs", "slash": 0}, "slash")]
    for opts, word in cases:
        with pytest.raises(UserError, match=word) as err:
            methods.get("minference", 0.1, **opts)
        assert "\n" not in str(err.value)
    model = tiny_model()
    m = methods.get("minference", 0.1)
    assert m.calibrated and not methods.get("minference", 0.1, patterns="vs").calibrated
    with pytest.raises(UserError, match="calibrat"):
        m.prepare(model, 128)
    with pytest.raises(UserError, match="keys per row") as err:
        m.prepare(model, 128, fake_calibration(model, 128, 999, ["vs"] * 4))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("n,K", [(37, 4), (300, 40), (700, 90)])
def test_recall_over_the_last_half_equals_the_whole_support_cut_to_those_rows(n, K):
    """head_recall builds each support for rows ≥ n/2 only; the same sums as the (n, n) supports cut to those rows."""
    g = torch.Generator().manual_seed(n)
    q, k = torch.randn(n, 16, generator=g), torch.randn(n, 16, generator=g)
    k[::7] *= 3
    i = torch.arange(n)
    a = torch.softmax((q @ k.T * 0.25).masked_fill(i[None, :] > i[:, None], float("-inf")), -1)
    lam, vs = sp.settings("lambda", K), sp.settings("vs", K)
    w, cols, diags = sp.vertical_slash(None, None, 0.25, vs["vertical"], vs["slash"], a=a[None, n - min(sp.LAST_Q, n):])
    whole = (sp.lambda_mask(n, lam["sinks"], lam["w"]),
             torch.as_tensor(Support(w=w, columns=cols[0], diagonals=diags[0]).dense(n, n)),
             sp.block_mask(sp.block_choice(q[None], k[None], sp.settings("block", K)["blocks"]), n)[0])
    r0 = n // 2
    expect = [float((a[r0:].double() * m[r0:]).sum(-1).mean()) for m in whole]
    assert np.allclose(head_recall(a, q, k, 0.25, K), expect, atol=1e-12)

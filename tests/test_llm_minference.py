"""MInference as published: vertical-slash lines estimated per input, executed by the kernel = the dense masked reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
from tiny_llama import tiny_model  # noqa: E402

from attnlab.errors import UserError  # noqa: E402
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.execution.attention import attention_modules  # noqa: E402
from attnlab.llm.execution.sparse_patterns import vertical_slash  # noqa: E402
from attnlab.support import NO_DIAGONAL, Support  # noqa: E402


def dense_reference(q, k, v, scaling, allowed):
    # q: (n, d), k, v: (n, d), allowed (n, n) → (n, d)
    s = (q @ k.T) * scaling
    return torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v


@pytest.mark.parametrize("n,vert,slash", [(150, 6, 110), (97, 0, 103), (200, 40, 130), (64, 3, 5)])
def test_kernel_equals_the_dense_masked_reference(n, vert, slash):
    model = tiny_model()
    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(1, 4, n, 16, generator=g) for _ in range(3))
    k, v = k[:, :2], v[:, :2]
    m = methods.get("minference", patterns="vs", vertical=vert, slash=slash)
    m.prepare(model, n)
    with m.applied(model):
        runner = attention_modules(model)[0].attnlab_layer
        out, state = runner.prefill(q, k, v, 0.25)
        sups = state.supports
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for h in range(4):
        pattern, sup = sups[h]
        assert pattern == "vs"
        allowed = causal & Support(w=sup.w, columns=sup.columns[0], diagonals=sup.diagonals[0]).dense(n, n)
        ref = dense_reference(q[0, h], k[0, h // 2], v[0, h // 2], 0.25, allowed)
        torch.testing.assert_close(out[0, h], ref, atol=1e-5, rtol=1e-5)
        # the entries read: at most v + s per row, and far diagonals exist when s > 100
        assert int(allowed.sum(-1).max()) <= vert + slash
        if slash > 101 and n > 102:
            assert (sup.diagonals[0] != NO_DIAGONAL).any()


def test_lines_are_the_top_vertical_and_slash_sums_of_the_last_64_queries():
    g = torch.Generator().manual_seed(7)
    n = 300
    q, k = torch.randn(1, n, 8, generator=g), torch.randn(1, n, 8, generator=g)
    w, cols, diags = vertical_slash(q, k, 0.5, 40, 110)
    s = (q[0] @ k[0].T).double().numpy() * 0.5
    a = np.zeros((64, n))
    for r, p in enumerate(range(n - 64, n)):
        e = np.exp(s[p, : p + 1] - s[p, : p + 1].max())
        a[r, : p + 1] = e / e.sum()
    vert = a.sum(0)
    vert[:30] = np.inf
    assert set(cols[0].tolist()) == set(np.argsort(-vert, kind="stable")[:40].tolist())
    dist = np.zeros(n)
    for r, p in enumerate(range(n - 64, n)):
        for j in range(p + 1):
            dist[p - j] += a[r, j]
    assert w == 99
    far = np.argsort(-dist[100:], kind="stable")[:10] + 100
    assert set((-diags[0]).tolist()) == set(far.tolist())


def test_mask_mod_draws_the_diagonals():
    sup = Support(w=1, columns=np.array([0]), diagonals=np.array([-5, -9, NO_DIAGONAL]))
    n = 20
    b = torch.zeros((), dtype=torch.long)
    got = torch.tensor([[bool(sup.mask_mod()(b, b, torch.tensor(i), torch.tensor(j))) for j in range(n)] for i in range(n)])
    assert torch.equal(got, torch.as_tensor(sup.dense(n, n)))
    assert sup.dense(n, n)[12, 7] and sup.dense(n, n)[12, 3] and not sup.dense(n, n)[12, 4]
    assert Support.from_dict(sup.to_dict()).diagonals.tolist() == sup.diagonals.tolist()
    assert "diagonals" not in Support(w=1).to_dict()       # plans without diagonals are written as before


def test_decoding_reads_the_whole_cache():
    model = tiny_model(1)
    ids = torch.randint(0, 100, (1, 120), generator=torch.Generator().manual_seed(1))
    m = methods.get("minference", patterns="vs", vertical=2, slash=8)
    m.prepare(model, 120)
    with torch.no_grad():
        with m.applied(model):
            cache = m.new_cache(model)
            model(ids, past_key_values=cache, use_cache=True)
            step = model(torch.tensor([[5]]), past_key_values=cache, use_cache=True).logits
        assert cache.layers[0].keys.shape[2] == 121                    # nothing evicted
        full = transformers.DynamicCache()
        for l in range(2):                                               # the same keys read by full attention
            full.update(cache.layers[l].keys[:, :, :120], cache.layers[l].values[:, :, :120], l)
        ref = model(torch.tensor([[5]]), past_key_values=full, use_cache=True).logits
    torch.testing.assert_close(step, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("opts,word", [({"slash": 0}, "slash"), ({"vertical": -1}, "vertical")])
def test_options_out_of_range_name_the_option(opts, word):
    with pytest.raises(UserError, match=word):
        methods.get("minference", patterns="vs", **opts)


def test_prefill_runs_each_pattern_through_the_devices_backend(monkeypatch):
    # the runner writes the heads' patterns as the seam's parts and makes one backend call for the layer; that output
    # is the masked dense softmax of those parts.  Measured against the former per-pattern chunked paths: 0 (Λ),
    # 3.6e-7 (vertical-slash), 1.8e-7 (block-sparse) — float rounding; the tolerance below is against the dense softmax.
    from attnlab.llm.execution.backend import dense_support
    from attnlab.llm.methods import minference_runner

    calls = []
    real = minference_runner.backend_for
    monkeypatch.setattr(minference_runner, "backend_for", lambda device: calls.append(torch.device(device).type) or real(device))
    model = tiny_model()
    n = 300
    heads = [{"pattern": "lambda", "sinks": 5, "w": 40}, {"pattern": "vs", "vertical": 10, "slash": 120},
             {"pattern": "block", "blocks": 2}, {"pattern": "vs", "vertical": 0, "slash": 101}]
    m = methods.get("minference", patterns="vs", vertical=2, slash=8)
    m.prepare(model, n)
    m.heads = [heads] * len(m.heads)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 4, n, 16, generator=g) for _ in range(3))
    k, v = k[:, :2], v[:, :2]
    with m.applied(model):
        runner = attention_modules(model)[0].attnlab_layer
        out, state = runner.prefill(q, k, v, 0.25)
    assert calls == ["cpu"]
    parts = state.pattern_parts
    assert parts.w == (40, 99, 0, 99) and parts.block_counts == (0, 0, 2, 0)
    assert parts.columns[0, 0].tolist()[:5] == [0, 1, 2, 3, 4] and (parts.columns[0, 0, 5:] == -1).all()
    allowed = dense_support(parts, n)[0]                                                # (H, n, n)
    for h in range(4):
        ref = dense_reference(q[0, h], k[0, h // 2], v[0, h // 2], 0.25, allowed[h])
        torch.testing.assert_close(out[0, h], ref, atol=2e-6, rtol=1e-5)

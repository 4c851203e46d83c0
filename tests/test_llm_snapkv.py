"""SnapKV: the positions the cache keeps after the prefill are the paper's vote, computed again in numpy.

A tiny random LlamaForCausalLM (2 layers, 4 query / 2 KV heads) runs the prefill into the method's cache;
the queries and keys of each layer are captured at the prefill and the vote is recomputed directly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
from tiny_llama import tiny_model  # noqa: E402

from attnlab.errors import UserError  # noqa: E402
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.execution.attention import attention_modules  # noqa: E402


def numpy_kept(q, k, scaling, window, kernel, kept):
    """The SnapKV rule written out: q (H, n, d), k (H_kv, n, d) → per KV head the sorted kept positions."""
    H, n, _ = q.shape
    H_kv = k.shape[0]
    out = []
    for g in range(H_kv):
        vote = np.zeros(n - window)
        for h in range(g * (H // H_kv), (g + 1) * (H // H_kv)):
            for i in range(n - window, n):
                s = q[h, i] @ k[g, : i + 1].T * scaling
                a = np.exp(s - s.max())
                a /= a.sum()
                vote += a[: n - window]
        pooled = np.convolve(np.pad(vote, kernel // 2), np.ones(kernel) / kernel, mode="valid")
        top = np.argsort(-pooled, kind="stable")[: max(0, kept - window)]
        out.append(sorted(set(top.tolist()) | set(range(n - window, n))))
    return out


def run_prefill(model, method, ids):
    """Prefill ``ids`` into the method's cache; returns the cache and each layer's (q, k) of the prefill."""
    captured = {}
    method.prepare(model, ids.shape[1])
    with method.applied(model):
        for mod in attention_modules(model):
            runner = mod.attnlab_layer
            original = runner.prefill

            def spy(q, k, v, scaling, _l=runner.layer_idx, _f=original):
                captured[_l] = (q.detach().double().numpy()[0], k.detach().double().numpy()[0], scaling)
                return _f(q, k, v, scaling)

            runner.prefill = spy
        cache = method.new_cache(model)
        with torch.no_grad():
            model(ids, past_key_values=cache, use_cache=True)
    return cache, captured


@pytest.mark.parametrize("n,window,kernel,compression", [(120, 16, 5, 0.5), (200, 32, 3, 0.75), (90, 8, 1, 0.3)])
def test_kept_positions_equal_the_vote_computed_in_numpy(n, window, kernel, compression):
    model = tiny_model()
    ids = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(n))
    m = methods.get("snapkv", window=window, kernel=kernel, compression=compression)
    cache, captured = run_prefill(model, m, ids)
    kept = int(n * (1 - compression))
    for l, layer in enumerate(cache.layers):
        q, k, scaling = captured[l]
        want = numpy_kept(q, k, scaling, window, kernel, kept)
        got = [sorted(p for p in layer.positions[0, g].tolist() if p >= 0) for g in range(k.shape[0])]
        assert got == want, f"layer {l}"
        assert all(len(p) == kept for p in got)
        assert layer.keys.shape[2] == kept


def test_the_window_is_always_kept_even_below_its_size():
    model = tiny_model(1)
    n, window = 100, 40
    ids = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(3))
    for compression in (0.0, 0.3, 0.7, 0.95):
        cache, _ = run_prefill(model, methods.get("snapkv", window=window, compression=compression), ids)
        for layer in cache.layers:
            for g in range(layer.positions.shape[1]):
                kept = set(layer.positions[0, g].tolist())
                assert set(range(n - window, n)) <= kept
                assert len(kept - {-1}) == max(window, int(n * (1 - compression)))


def test_decoding_appends_to_the_compressed_cache_and_restores_the_model():
    model = tiny_model(2)
    n = 80
    ids = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(4))
    m = methods.get("snapkv", budget=0.5, window=16)
    assert m.compression == 0.5 and m.kv_tokens(n) == 40
    m.prepare(model, n)
    before = model.config._attn_implementation
    with m.applied(model), torch.no_grad():
        cache = m.new_cache(model)
        out = model.generate(ids, past_key_values=cache, max_new_tokens=5, do_sample=False)
    assert model.config._attn_implementation == before
    assert out.shape[1] == n + 5
    for layer in cache.layers:   # 40 kept + 5 appended (the last generated token is not fed back)
        assert (layer.positions[0] >= 0).sum(-1).tolist() == [44, 44]
        assert layer.positions[0, :, -4:].tolist() == [[80, 81, 82, 83]] * 2


def test_full_budget_decodes_like_full_attention():
    model = tiny_model(3)
    ids = torch.randint(0, 100, (1, 70), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=6, do_sample=False)
        m = methods.get("snapkv", compression=0.0)
        m.prepare(model, 70)
        with m.applied(model):
            out = model.generate(ids, past_key_values=m.new_cache(model), max_new_tokens=6, do_sample=False)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("opts,word", [({"window": 0}, "window"), ({"kernel": 4}, "kernel"), ({"kernel": 99}, "kernel"),
                                       ({"compression": 1.0}, "compression"), ({"pool": 3}, "pool")])
def test_options_out_of_range_name_the_option(opts, word):
    with pytest.raises(UserError, match=word):
        methods.get("snapkv", **opts)

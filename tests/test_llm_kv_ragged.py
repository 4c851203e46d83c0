"""The plan's KV cache is ragged by KV head: a KV head one of whose query heads reads everything (a retrieval
tail, a full head) keeps every key apart, the others only their band + columns — no padding to the longest,
and decoding equals the dense cache's; appends write into spare room instead of copying the cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnlab.llm.execution.attention import apply_plan, remove_plan  # noqa: E402
from attnlab.llm.eval.greedy import kv_tokens  # noqa: E402
from attnlab.llm.execution.kv_cache import EVICT_EVERY, PlanCache, kv_bytes  # noqa: E402
from attnlab.llm.plans.plan import HeadPlan, Plan  # noqa: E402
from attnlab.support import Support  # noqa: E402

N, W, T = 160, 6, 16


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return transformers.LlamaForCausalLM(cfg).eval()


def band(w=W, columns=(0,), dynamic=0, tail=0):
    return HeadPlan(support=Support(w=w, columns=np.array(columns, dtype=np.int64)), dynamic=dynamic, tail=tail)


def plan(pages=0, both=False):
    # KV head 0 = query heads 0, 1: head 0 has a retrieval tail (reads its whole cache at decoding), head 1 too if
    # ``both`` (the slab's keys are then read without a mask); KV head 1: bands
    layer = [band(tail=T), band(tail=T) if both else band(), band(dynamic=2), band()]
    return Plan([list(layer), list(layer)], 2, "test", 0.5, N, pages=pages)


@torch.no_grad()
def run(model, plan, new_cache, steps):
    apply_plan(model, plan)
    try:
        cache = new_cache()
        ids = torch.randint(0, 100, (1, N), generator=torch.Generator().manual_seed(3))
        out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        logits = [out.logits[0, -1]]
        for _ in range(steps):
            y = logits[-1].argmax().view(1, 1)
            out = model(input_ids=y, cache=out.cache, use_cache=True)
            logits.append(out.logits[0, -1])
        return torch.stack(logits), out.cache
    finally:
        remove_plan(model)
        model.set_attn_implementation("sdpa")


@pytest.mark.parametrize("pages,both", [(0, False), (0, True), (2, False)])
def test_a_split_cache_decodes_as_the_dense_cache_and_holds_only_what_is_read(model, pages, both):
    steps = EVICT_EVERY + 5                                                        # past a second compaction
    ragged, cache = run(model, plan(pages, both), lambda: PlanCache(model), steps)
    dense, _ = run(model, plan(pages, both), lambda: transformers.DynamicCache(config=model.config), steps)
    if pages == 0:   # read-back's pages are chosen among the keys a cache misses: a dense cache misses none
        assert (ragged - dense).abs().max() < 1e-4
    for layer in cache.layers:
        seen = N + steps
        whole, other = layer.slabs
        assert whole.whole and whole.kv.tolist() == [0] and other.kv.tolist() == [1] and not other.whole
        assert whole.keys.shape[2] == seen                                         # KV head 0: every key
        assert int((other.positions >= 0).sum()) <= 1 + 2 + W + 1 + (steps - EVICT_EVERY)  # KV head 1: sink, 2 dynamic, band
        assert other.keys.shape[1] == 1 and other.keys.shape[2] < seen / 4        # not padded to KV head 0's length
    assert kv_tokens(cache) < (N + steps) * 0.6
    padded = 2 * len(cache.layers) * 2 * (N + steps) * 16 * 4                    # both KV heads at full length, K and V
    # read-back's page summaries (2·d values a page of 16 and KV head, and the pages a head's columns touch) beside
    summaries = sum(x.numel() * x.element_size() for layer in cache.layers if layer.summaries for x in layer.summaries
                    if x is not None)                                              # (no key sums: pages by the bound alone)
    assert (summaries > 0) == (pages > 0) and summaries < padded / 8
    assert kv_bytes(cache) - summaries < 0.6 * padded


def test_appends_write_into_spare_room(model):
    _, cache = run(model, plan(), lambda: PlanCache(model), 2)
    whole = cache.layers[0].slabs[0]
    ptr, L = whole.keys.untyped_storage().data_ptr(), whole.keys.shape[2]
    cache.update(torch.zeros(1, 2, 1, 16), torch.zeros(1, 2, 1, 16), 0)
    assert whole.keys.shape[2] == L + 1 and whole.keys.untyped_storage().data_ptr() == ptr  # written in place: no copy
    held = sum(s.keys.numel() * 4 * 2 for layer in cache.layers for s in layer.slabs)
    assert kv_bytes(cache) > held                                                # the spare room is counted as held


def test_a_layer_whose_kv_heads_all_read_everything_stays_one_slab(model):
    full = [band(tail=T)] * 4
    _, cache = run(model, Plan([list(full), list(full)], 2, "test", 0.5, N), lambda: PlanCache(model), 3)
    assert all(len(layer.slabs) == 1 and layer.keys.shape[2] == N + 3 for layer in cache.layers)


def test_eviction_keeps_each_heads_slots_in_order_and_stores_the_rest():
    """``Slab.evict``: per (batch row, KV head) the kept slots' keys and values, compacted in order (whole rows: read by
    index, not a gather over d), padded with −1 positions; the dropped ones in the store."""
    from attnlab.llm.execution.kv_cache import Slab

    gen = torch.Generator().manual_seed(0)
    B, H_s, L, d = 2, 3, 37, 8
    k, v = torch.randn(B, H_s, L, d, generator=gen), torch.randn(B, H_s, L, d, generator=gen)
    keep = torch.rand(B, H_s, L, generator=gen) < 0.4
    slab = Slab(torch.arange(H_s), None, None, None)
    slab.append(k, v, 0)
    slab.evict(keep, store=True)
    for b in range(B):
        for h in range(H_s):
            j = torch.nonzero(keep[b, h]).view(-1)
            assert torch.equal(slab.keys[b, h, : len(j)], k[b, h, j]) and torch.equal(slab.values[b, h, : len(j)], v[b, h, j])
            assert torch.equal(slab.positions[b, h, : len(j)], j) and bool((slab.positions[b, h, len(j) :] == -1).all())
            s = torch.nonzero(~keep[b, h]).view(-1)
            assert torch.equal(slab.store_keys[b, h, : len(s)], k[b, h, s]) and torch.equal(slab.store_pos[b, h, : len(s)], s)

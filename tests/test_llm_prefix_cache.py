"""Prompts that share a prefix reuse its full-attention prefill where a method allows it.

The grid with reuse gives the rows of the grid without (timing and ``reused_tokens`` aside); a method whose
prefill is sparse never reuses; a reused prefix gives the keys, values, logits and SnapKV choices of a prefill
of the whole prompt (to float rounding: the same sums, grouped otherwise).
"""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.llm import methods as registry
from attnlab.llm.eval.eval_grid import run_eval
from attnlab.llm.eval.eval_settings import EvalSettings, check_settings
from attnlab.llm.eval.greedy import greedy_answer
from attnlab.llm.execution.prefix_cache import FullPrefill, common_prefix

from test_llm_eval import tiny  # noqa: F401  (the module's tiny Llama fixture)

SHARING = {"full", "snapkv", "quest"}


def _strip(rows):
    drop = ("prefill_s", "decode_s", "seconds", "reused_tokens")
    return sorted(json.dumps({k: v for k, v in r.items() if k not in drop}, sort_keys=True) for r in rows)


def test_only_full_attention_prefills_share():
    """full, SnapKV and Quest prefill with full attention; every other registered method's prefill is sparse."""
    assert {name for name in registry.names() if registry.REGISTRY[name].prefill_reuse} == SHARING


def test_common_prefix():
    assert common_prefix(None, [1, 2]) == 0
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([7], [1]) == 0


def test_grid_with_reuse_equals_grid_without(tiny, tmp_path):  # noqa: F811
    folder, model, tok = tiny
    settings = EvalSettings(model=str(folder), tasks=["niah", "vt"], lengths=[500], depths=3, samples=2,
                            methods=["snapkv", "quest", "streaming-llm"], budgets=[0.5], haystack="noise", max_new=4)
    plain = run_eval(model, tok, check_settings(settings), tmp_path / "plain", reuse=False)
    shared = run_eval(model, tok, check_settings(settings), tmp_path / "shared")
    assert len(shared) == len(plain) == 4 * (3 + 1) * 2
    assert _strip(shared) == _strip(plain)          # answers, scores, KV tokens and bytes: the same
    assert all(r["reused_tokens"] == 0 for r in plain)
    by = {m: [r for r in shared if r["method"] == m] for m in ("full", "snapkv", "quest", "streaming-llm")}
    assert all(r["reused_tokens"] == 0 for r in by["streaming-llm"])             # a sparse prefill never reuses
    assert all(r["reused_tokens"] == 500 for r in by["quest"])                   # full's prefill is Quest's
    assert all(r["reused_tokens"] == 500 - 64 for r in by["snapkv"])            # the vote window is run again
    assert all(r["reused_tokens"] == 0 for r in by["full"])     # prompts share their instruction only: < MIN_SHARE, not taken
    walls = [json.loads(x) for x in (tmp_path / "shared" / "wall.jsonl").read_text().splitlines()]
    assert len(walls) == 1 and walls[0]["rows"] == len(shared) and walls[0]["reuse"] is True


def test_a_sparse_prefill_never_reuses(tiny):  # noqa: F811
    _, model, tok = tiny
    ids = [3 + i % 90 for i in range(300)]
    from attnlab.errors import UserError

    prefixes, ran = FullPrefill(), []
    cases = [(name, {}) for name in sorted(set(registry.names()) - SHARING)] + [("minference", {"patterns": "vs"})]
    for name, opts in cases:
        method = registry.get(name, 0.5, **opts)
        name = name + "".join(f":{k}={v}" for k, v in opts.items())
        try:
            method.prepare(model, len(ids))
        except UserError:            # calibrated, or a gate file to give: the class field above covers them
            continue
        ans = greedy_answer(model, tok, method, ids, 2, prefixes=prefixes)
        assert ans.reused == 0 and prefixes.ids is None, name          # the shared prefill was never even made
        ran.append(name)
    assert {"streaming-llm", "minference:patterns=vs", "oracle-topk"} <= set(ran)


def _prefill(model, ids):
    from transformers import DynamicCache

    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), cache=DynamicCache(config=model.config), use_cache=True, logits_to_keep=1)
    return out.logits[0, -1], [(l.keys, l.values) for l in out.cache.layers]


def test_a_cropped_prefix_gives_the_whole_prefill(tiny):  # noqa: F811
    _, model, _ = tiny
    g = torch.Generator().manual_seed(1)
    a = torch.randint(3, 100, (400,), generator=g).tolist()
    b = a[:250] + torch.randint(3, 100, (150,), generator=g).tolist()
    prefixes = FullPrefill()
    assert prefixes.ensure(model, a)[:2] == (True, 0)
    made, p, _ = prefixes.ensure(model, b)
    assert made and p == common_prefix(a, b) >= 250
    assert prefixes.ensure(model, b)[:2] == (False, 400)
    assert FullPrefill(min_share=0.7).ensure(model, a)[:2] == (True, 0)   # below the share asked: a whole prefill
    logits, kv = _prefill(model, b)
    torch.testing.assert_close(prefixes.logits, logits, rtol=1e-5, atol=1e-5)
    for (k1, v1), (k2, v2) in zip(prefixes.kv, kv):
        torch.testing.assert_close(k1, k2, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(v1, v2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [16, 64])
def test_snapkv_after_a_reused_prefix_keeps_what_its_own_prefill_keeps(tiny, window):  # noqa: F811
    _, model, _ = tiny
    ids = torch.randint(3, 100, (300,), generator=torch.Generator().manual_seed(2)).tolist()
    method = registry.get("snapkv", 0.3, window=window)
    method.prepare(model, len(ids))
    with torch.no_grad(), method.applied(model):
        cache = method.new_cache(model)
        own = model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True, logits_to_keep=1)
    prefixes = FullPrefill()
    prefixes.ensure(model, ids)
    with method.applied(model):
        logits, reused = prefixes.resume(model, method, ids)
    torch.testing.assert_close(logits, own.logits[0, -1], rtol=1e-5, atol=1e-5)
    for mine, theirs in zip(reused.layers, own.cache.layers):
        assert torch.equal(mine.positions, theirs.positions)                     # the same keys voted in
        assert mine.seen == theirs.seen == len(ids) and mine.evicted_at == theirs.evicted_at
        torch.testing.assert_close(mine.keys, theirs.keys, rtol=1e-5, atol=1e-5)
    assert max(l.keys.shape[2] for l in reused.layers) == method.kv_tokens(len(ids)) < len(ids)


def test_a_model_with_sliding_layers_is_not_reused():
    import transformers

    cfg = transformers.MistralConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     num_key_value_heads=1, sliding_window=32)
    model = transformers.MistralForCausalLM(cfg).eval()
    assert not FullPrefill().supports(model)


def test_full_answers_after_the_previous_prompts_prefix_as_without(tiny):  # noqa: F811
    _, model, tok = tiny
    g = torch.Generator().manual_seed(3)
    a = torch.randint(3, 100, (300,), generator=g).tolist()
    b = a[:200] + torch.randint(3, 100, (100,), generator=g).tolist()
    full = registry.get("full")
    full.prepare(model, 300)
    prefixes = FullPrefill()
    greedy_answer(model, tok, full, a, 6, prefixes=prefixes)
    again = greedy_answer(model, tok, full, b, 6, prefixes=prefixes)
    alone = greedy_answer(model, tok, full, b, 6)
    assert again.reused == common_prefix(a, b) >= 200 and alone.reused == 0
    assert (again.text, again.tokens, again.kv_bytes, again.kv_tokens) == (alone.text, alone.tokens, alone.kv_bytes, alone.kv_tokens)

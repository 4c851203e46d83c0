"""Read-back (Plan.pages): a planned head's evicted keys go to a store and its decoding query reads the pages of
largest Quest bound; with every page in budget it reads what full decoding reads, with none it is today's plan."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnlab.errors import UserError  # noqa: E402
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.execution.attention import LayerRunner, apply_plan, attention_modules, remove_plan  # noqa: E402
from attnlab.llm.execution.input_state import InputState  # noqa: E402
from attnlab.llm.execution.kv_cache import EVICT_EVERY, PlanCache, PlanLayer, read_tokens, store_bytes, store_tokens  # noqa: E402
from attnlab.llm.execution.pages import page_upper_bound  # noqa: E402
from attnlab.llm.plans.plan import FULL, HeadPlan, Plan  # noqa: E402
from attnlab.support import Support  # noqa: E402
from tests.attnlab_cli import run_main  # noqa: E402
from tests.tiny_llama import tiny_model  # noqa: E402


def band(w: int, columns=()) -> HeadPlan:
    return HeadPlan(support=Support(w=w, columns=torch.tensor(list(columns), dtype=torch.long).numpy()))


def plan_of(model, heads_of_layer, pages=0, mean_pages=0) -> Plan:
    cfg = model.config
    heads = [list(heads_of_layer) for _ in range(cfg.num_hidden_layers)]
    return Plan(heads, cfg.num_key_value_heads, "test", 1.0, 0, pages=pages, mean_pages=mean_pages)


@torch.no_grad()
def greedy_logits(model, plan, ids, steps, cache_kind="plan", full_decoding=False):
    """(tokens, logits per step, cache): the plan's prefill, then ``steps`` greedy steps.  ``full_decoding``: every
    head then reads every cached key (a DynamicCache keeps them all): the reference read-back must reach."""
    apply_plan(model, plan)
    try:
        cache = PlanCache(model) if cache_kind == "plan" else transformers.DynamicCache(config=model.config)
        out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        cache = out.cache
        if full_decoding:
            for mod in attention_modules(model):
                mod.attnlab_layer.w_read = torch.full_like(mod.attnlab_layer.w_read, FULL)
        toks, logits = [], []
        for _ in range(steps):
            logits.append(out.logits[0, -1])
            y = int(out.logits[0, -1].argmax())
            toks.append(y)
            out = model(input_ids=torch.tensor([[y]]), cache=cache, use_cache=True)
        return toks, logits, cache
    finally:
        remove_plan(model)
        model.set_attn_implementation("sdpa")


IDS = torch.randint(0, 100, (1, 90), generator=torch.Generator().manual_seed(5))
STEPS = EVICT_EVERY + 8   # past a second eviction


def test_every_page_read_back_decodes_like_full_decoding_after_the_plans_prefill():
    """(a) K ≥ every page: each planned head reads every key at decoding = planned prefill + full decoding."""
    model = tiny_model(3)
    heads = [band(4, [0]), band(6), band(3), band(8, [1])]
    toks, logits, cache = greedy_logits(model, plan_of(model, heads, pages=1000), IDS, STEPS)
    ref_toks, ref_logits, _ = greedy_logits(model, plan_of(model, heads), IDS, STEPS, "dynamic", full_decoding=True)
    assert toks == ref_toks
    for a, b in zip(logits, ref_logits):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    # the keys really left the resident cache: they were read from the store
    assert store_tokens(cache) > 50 and store_bytes(cache) > 0 and read_tokens(cache) > 50
    assert all(int((layer.positions >= 0).sum(-1).max()) < 20 for layer in cache.layers)
    # and without read-back the same plan decodes otherwise
    plain, plain_logits, _ = greedy_logits(model, plan_of(model, heads), IDS, STEPS)
    assert not all(torch.allclose(a, b, atol=1e-3) for a, b in zip(plain_logits, logits))


def test_no_pages_decodes_as_the_plan_did_before():
    """(c) pages = 0: no store, nothing read back, the same tokens and logits as decoding band + columns over a
    cache that keeps everything (the plan's decoding semantics, before read-back)."""
    model = tiny_model(4)
    heads = [band(4, [0]), band(6), HeadPlan.full(), band(8, [1])]
    toks, logits, cache = greedy_logits(model, plan_of(model, heads), IDS, STEPS)
    ref_toks, ref_logits, _ = greedy_logits(model, plan_of(model, heads), IDS, STEPS, "dynamic")
    assert toks == ref_toks
    for a, b in zip(logits, ref_logits):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert all(layer.store_keys is None and layer.page is None for layer in cache.layers)
    assert store_tokens(cache) == 0 and read_tokens(cache) == 0
    # a plan with pages whose heads all decode FULL reads nothing back: the same as pages = 0
    runner = LayerRunner([HeadPlan.full()] * 4, 0, 2, pages=4)
    assert runner.pages == 0 and not runner.reads.any()


def needle_layer(L=64, d=8, needle=20, seed=0):
    """A PlanLayer of L keys (1 batch row, 2 KV heads) with a key of large norm at ``needle`` in KV head 0."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(1, 2, L, d, generator=g) * 0.1
    v = torch.randn(1, 2, L, d, generator=g)
    k[0, 0, needle] = 3.0                                                      # the needle
    k[0, 0, 40] = -3.0                                                         # another fact, opposite way
    layer = PlanLayer()
    layer.update(k, v)
    return layer, k, v


def test_an_evicted_needle_is_read_back_through_its_page():
    """(b) The needle's key leaves the cache of a band-4 head; its page's bound is the largest for a query along it,
    so that head reads the page (16 keys) back and its output is the softmax over band ∪ that page; a sibling
    query head of the same KV head picks its own page."""
    L, d, needle, w = 64, 8, 20, 4
    layer, k, v = needle_layer(L, d, needle)
    runner = LayerRunner([band(w)] * 4, 0, 2, pages=1)                         # query heads 0, 1 → KV head 0
    state = InputState()                                                       # the input chose no columns
    layer.flags = runner.column_flags(layer.positions, state)
    layer.page = runner.page
    layer.evict(runner.keep(layer.positions, L, state, layer.flags), store=True)
    assert layer.positions.tolist() == [[list(range(L - w, L))] * 2]          # the band alone stays resident
    assert needle in layer.store_pos[0, 0].tolist()
    (part,) = layer.parts()                                                    # resident ∪ stored, the store's slots last
    keys, values, pos, flags, stored = part.keys, part.values, part.positions, part.flags, part.stored
    q = torch.zeros(1, 4, 1, d)
    q[0, 0, 0] = 1.0                                                           # head 0 asks along the needle
    q[0, 1, 0] = -1.0                                                          # head 1 (same KV head) for the other fact
    q[0, 2:, 0] = torch.randn(2, d, generator=torch.Generator().manual_seed(1))
    q_pos = torch.tensor([L])
    out = runner.decode(q, keys, values, 0.5, q_pos, pos, state, flags)
    U = page_upper_bound(q, keys, torch.where(pos < L - w, pos, -1), 16)      # (1, 4, 1, P): the pages' keys off the band
    for h in range(4):
        kv = h // 2
        best = int(torch.argmax(U[0, h, 0]))
        if h == 0:
            assert best == needle // 16
        if h == 1:
            assert best == 40 // 16
        read = sorted(set(range(L - w, L + 1)) & set(range(L)) | set(range(16 * best, 16 * best + 16)))
        s = (q[0, h, 0] @ k[0, kv, read].T) * 0.5
        torch.testing.assert_close(out[0, h, 0], torch.softmax(s, -1) @ v[0, kv, read])
    assert bool(state.page_slots[0, 0, (pos[0, 0] == needle).nonzero()[0, 0]])
    # without read-back the needle is gone for head 0
    plain = LayerRunner([band(w)] * 4, 0, 2)
    s = (q[0, 0, 0] @ k[0, 0, L - w :].T) * 0.5
    alone = plain.decode(q, k[:, :, L - w :], v[:, :, L - w :], 0.5, q_pos, layer.positions, state, layer.flags)
    torch.testing.assert_close(alone[0, 0, 0], torch.softmax(s, -1) @ v[0, 0, L - w :])
    assert not torch.allclose(alone[0, 0, 0], out[0, 0, 0], atol=1e-3)


def test_plan_pages_round_trip_and_old_files_read_none(tmp_path):
    """(d) pages and page survive save/load; a file without them reads 0; bad values: one line naming field and file."""
    heads = [[band(4, [0]), HeadPlan.full()]]
    p = Plan(heads, 1, "attnlab", 0.5, 64, pages=3, page=8, mean_pages=2)
    p.save(tmp_path / "p.json")
    back = Plan.load(tmp_path / "p.json")
    assert (back.pages, back.page, back.mean_pages) == (3, 8, 2) and back.to_dict() == p.to_dict()
    old = Plan(heads, 1, "attnlab", 0.5, 64)
    old.save(tmp_path / "old.json")
    assert json.loads((tmp_path / "old.json").read_text())["pages"] == 0     # every field written, 0 included
    assert Plan.load(tmp_path / "old.json").pages == Plan.load(tmp_path / "old.json").mean_pages == 0
    d = p.to_dict()
    for field, bad in (("pages", -1), ("pages", 1.5), ("pages", True), ("pages", "3"), ("pages", 10**7), ("page", 0), ("page", 2048),
                       ("mean_pages", 4), ("mean_pages", -1), ("mean_pages", 1.0)):
        f = tmp_path / f"bad-{field}.json"
        f.write_text(json.dumps({**d, field: bad}))
        with pytest.raises(UserError, match=rf"bad-{field}\.json: field {field}: ") as err:
            Plan.load(f)
        assert "\n" not in str(err.value)


def test_the_methods_take_pages():
    m = methods.get("attnlab-retrieval", 0.5, pages="4")
    assert m.opts["pages"] == 4
    assert methods.get("attnlab-band", 0.5, pages="2").opts["pages"] == 2
    assert methods.get("attnlab-err", 0.5, pages="2").opts["pages"] == 2
    with pytest.raises(UserError, match="pages"):
        methods.get("attnlab-retrieval", 0.5, pages="-1")
    with pytest.raises(UserError, match="pages"):
        methods.get("attnlab-band", 0.5, pages="x")
    assert methods.get("attnlab-retrieval", 0.5, pages="4", mean_pages="2").opts["mean_pages"] == 2
    with pytest.raises(UserError, match=r"mean_pages=5 needs pages >= 5"):
        methods.get("attnlab-retrieval", 0.5, pages="4", mean_pages="5")


def test_a_page_of_keys_that_answer_the_query_is_read_by_its_mean_key_not_by_its_bound():
    """Page 1's keys all lie along q (q·k = 1 each), page 2's are noise with one key far out on q's axis and the
    opposite way on another (a loose bound, q·k̄ ≈ 0): with one page the bound reads page 2, the mean key page 1, and a
    split (K = 2, k = 1) both."""
    from attnlab.llm.execution.pages import choose_pages, mean_score, page_upper_bound

    d, page = 4, 4
    q = torch.tensor([1.0, 0.0, 0.0, 0.0]).view(1, 1, 1, d)
    k = torch.zeros(1, 1, 12, d)
    k[0, 0, 4:8, 0] = 1.0                                                                  # page 1: q·k = 1 on every key
    k[0, 0, 8:12, 1] = torch.tensor([0.5, -0.5, 0.2, -0.2])
    k[0, 0, 8, 0], k[0, 0, 9, 0] = 3.0, -3.0                                               # page 2: U = 3, μ = 0
    U = page_upper_bound(q, k, torch.arange(12).view(1, 1, 12), page)                     # (1, 1, 1, 3)
    mu = mean_score(q, k.view(1, 1, 3, page, d).sum(3), torch.full((3,), float(page)))
    assert U[0, 0, 0].tolist() == [0.0, 1.0, 3.0] and mu[0, 0, 0].tolist() == [0.0, 1.0, 0.0]
    cand = torch.tensor([False, True, True]).view(1, 1, 1, 3)
    assert choose_pages(U, mu, cand, 1).view(-1).tolist() == [False, False, True]
    assert choose_pages(U, mu, cand, 1, 1).view(-1).tolist() == [False, True, False]
    assert choose_pages(U, mu, cand, 2, 1).view(-1).tolist() == [False, True, True]


@pytest.mark.parametrize("args,word", [
    (["--pages", "-1"], "--pages"),
    (["--pages", "x"], "--pages"),
    (["--pages", "2000000"], "--pages"),
    (["--method", "attnlab-retrieval:pages=-2"], "pages"),
    (["--pages", "2", "--method", "attnlab-retrieval:pages=3"], "--pages"),
])
def test_plan_cli_refuses_bad_pages_in_one_line(args, word, tmp_path, capsys):
    """(e) exit 2, one line naming the option, before any model loads."""
    text = tmp_path / "t.txt"
    text.write_text("hello world\n")
    code, out, err = run_main(["plan", "--hf", str(tmp_path / "no-model"), "--calibrate", str(text),
                               "--out", str(tmp_path / "p.json"), *args], capsys)
    assert code == 2
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and word in lines[0], err


def test_the_table_shows_read_back_and_store_apart():
    """The eval table: resident KV tokens, + stored tokens read per step, stored tokens; "–" for rows made before."""
    from attnlab.llm.eval.eval_report import markdown, summarise

    base = {"kind": "answer", "task": "niah", "n": 100, "depth": 0.0, "score": 1.0, "beta": 0.1, "kv_tokens": 20.0,
            "prefill_s": 0.0, "decode_s": 0.0}
    rows = [{**base, "method": "full", "budget": 1.0, "kv_tokens": 100.0},
            {**base, "method": "x:pages=2", "budget": 0.1, "kv_read_tokens": 31.5, "kv_store_tokens": 80.0, "kv_store_bytes": 9}]
    table = markdown(summarise(rows))
    assert "| KV tokens | + read/step | stored |" in table
    assert "| x:pages=2 | 0.1 | 0.100 | 20 | 31.5 | 80 | 1 |" in table
    assert "| full | 1 | 0.100 | 100 | – | – | 1 |" in table


def test_a_sink_column_does_not_take_a_page():
    """A head's own column (a sink of large key at 0) is outside its page summaries: the one page read back is
    the needle's, not the sink's page (whose bound over all its keys would be the largest)."""
    L, d, w = 64, 8, 4
    layer, k, v = needle_layer(L, d, needle=40)
    k[0, 0, 0] = -10.0                                                         # the sink: a column of every head
    layer.keys[0, 0, 0] = -10.0
    runner = LayerRunner([band(w, [0])] * 4, 0, 2, pages=1)
    state = InputState(decode_columns=torch.zeros(1, 4, 1, dtype=torch.long))  # as a prefill makes it: T_h = {0}
    layer.flags = runner.column_flags(layer.positions, state)
    layer.page = runner.page
    layer.evict(runner.keep(layer.positions, L, state, layer.flags), store=True)
    (part,) = layer.parts()                                                    # resident ∪ stored, the store's slots last
    keys, values, pos, flags, stored = part.keys, part.values, part.positions, part.flags, part.stored
    q = torch.zeros(1, 4, 1, d)
    q[0, 0, 0] = -1.0                                                          # along the fact at 40 (k = −3)
    assert int(torch.argmax(page_upper_bound(q, keys, pos, 16)[0, 0, 0])) == 0  # Quest's own summary: the sink's page
    runner.decode(q, keys, values, 0.5, torch.tensor([L]), pos, state, flags)
    got = sorted(pos[0, 0][state.page_slots[0, 0]].tolist())
    assert got == list(range(32, 48))


def test_the_cached_page_summaries_are_those_of_the_keys_resident_and_stored():
    """The summaries made after the prefill and folded at each step (PlanLayer.summaries: per KV head, and per query
    head the pages its columns touch) are each query head's min / max over the resident ∪ stored keys of every page,
    its own columns left out — what a step without a PlanCache makes from its keys — after evictions; and so are their
    key sums and sizes (the mean key's)."""
    from attnlab.llm.execution.pages import _minmax, _sums

    model = tiny_model(3)
    heads = [band(4, [0]), band(6), band(3), band(8, [1])]
    _, _, cache = greedy_logits(model, plan_of(model, heads, pages=2, mean_pages=1), IDS, STEPS)
    assert store_tokens(cache) > 0
    touched = 0
    for layer in cache.layers:
        P = -(-layer.seen // 16)
        m, M, pc, mc, Mc, row, sums, count, sc, cc = layer.summaries
        assert m.shape[1:3] == (layer.num_kv_heads, P) and row.tolist() == list(range(layer.num_kv_heads))   # every KV head reads
        r = len(heads) // layer.num_kv_heads
        for part in layer.parts():                                                       # split by KV head (ragged)
            B, H_s, L, d = part.keys.shape
            hq = (part.kv[:, None] * r + torch.arange(r)).reshape(-1)
            own = torch.where(part.flags, -1, part.positions[:, :, None, :]).reshape(B, H_s * r, L)
            k_h = part.keys[:, :, None].expand(B, H_s, r, L, d).reshape(B, H_s * r, L, d)
            want = [*_minmax(k_h, own, 16, P), *_sums(k_h, own, 16, P)]
            for x, h in enumerate(hq.tolist()):                                           # the per-head view of the parts
                got = [y[:, int(h) // r].clone() for y in (m, M, sums)] + [count.expand(B, P).clone()]   # (B, P, ·)
                for c, p in enumerate(pc[0, h].tolist()):
                    if p >= 0:
                        got[0][:, p], got[1][:, p], got[2][:, p], got[3][:, p] = mc[:, h, c], Mc[:, h, c], sc[:, h, c], cc[:, h, c]
                        touched += 1
                for a, b in zip(got, want):
                    torch.testing.assert_close(a, b[:, x])
    assert touched   # some head's column pages were summarised without its columns
    _, _, bound_only = greedy_logits(model, plan_of(model, heads, pages=2), IDS, STEPS)
    assert all(layer.summaries.s is None and layer.summaries.column_sum is None for layer in bound_only.layers)   # no sums kept


@pytest.mark.parametrize("pages,heads,mean", [(2, "bands", 0), (3, "mixed", 0), (6, "narrow", 0), (6, "padded", 0),
                                              (2, "bands", 1), (6, "narrow", 3), (6, "padded", 6)])
def test_the_step_without_joining_the_store_reads_what_the_joined_step_reads(pages, heads, mean, monkeypatch):
    """decode_read_back (resident slots, each chosen page gathered by position from the store) gives the logits and
    the stored tokens read of the step over resident ∪ stored slots joined (read_back on the joined part) — the pages
    chosen by the bound, or ``mean`` of them by the mean key."""
    model = tiny_model(3)
    row = {"bands": [band(4, [0]), band(6), band(3), band(8, [1])], "mixed": [band(4, [0, 2]), HeadPlan.full(), band(5), band(2, [1])],
           "narrow": [band(1, [0]), band(2), band(1), band(0, [1])],
           "padded": [band(10, [0]), band(10, [0, 1]), band(10, [0]), band(10, [0])]}[heads]
    # narrow: tokens appended since the last eviction leave the band before the next one; padded: one slab for both KV
    # heads (13 and 12 slots: within RAGGED), the shorter padded, its new tokens after the padding read back from there
    fast_toks, fast_logits, fast = greedy_logits(model, plan_of(model, row, pages=pages, mean_pages=mean), IDS, STEPS)
    monkeypatch.setattr(PlanLayer, "parts", lambda self, resident=False: [s.part() for s in self.slabs])
    toks, logits, joined = greedy_logits(model, plan_of(model, row, pages=pages, mean_pages=mean), IDS, STEPS)
    assert fast_toks == toks
    for a, b in zip(fast_logits, logits):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert read_tokens(fast) == pytest.approx(read_tokens(joined)) and read_tokens(fast) > 0


def test_folding_keys_into_a_column_page_still_filling_equals_summarising_them_all():
    """A prefill of 20 keys leaves page 1 partial; head 0's column 17 lies there: the keys that arrive (20 … 37) join
    the KV head's summaries and head 0's own summary of page 1 (its column still out) — as if summarised at once."""
    from attnlab.llm.execution.pages import fold_keys, page_summaries

    g = torch.Generator().manual_seed(4)
    k = torch.randn(1, 2, 38, 8, generator=g)
    cols = torch.tensor([[[17, 0], [3, -1], [-1, -1], [30, 5]]])                        # (B, H = 4, g)
    kv_of = torch.tensor([0, 0, 1, 1])
    s = page_summaries(k[:, :, :20], cols, kv_of, 16)
    for t in range(20, 38, 6):
        s = fold_keys(s, k[:, :, t:t + 6], t, 16)
    ref = page_summaries(k, torch.where(cols < 20, cols, -1), kv_of, 16)                  # column 30 arrives after the prefill
    for a, b in zip(s, ref):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)   # exact but for the key sums' order of addition
    assert s[2][0, 0].tolist() == [1, 0] or s[2][0, 0].tolist() == [0, 1]                # head 0: pages 0 and 1 its own


@pytest.mark.parametrize("n", [1, 15, 16, 17, 100])
def test_the_prefill_page_summaries_are_the_min_and_max_of_each_run_of_keys(n):
    """page_summaries' KV-head part (a min / max over consecutive keys) equals the per-key scatter over their pages."""
    from attnlab.llm.execution.pages import _minmax, page_summaries

    torch.manual_seed(n)
    k = torch.randn(2, n, 3, 8).transpose(1, 2)                                      # (B, H_kv, n, d), transformers' strides
    kv_of = torch.arange(6) // 2
    s = page_summaries(k, torch.full((2, 6, 0), -1, dtype=torch.long), kv_of, 16)
    m, M = _minmax(k, torch.arange(n).expand(2, 3, n), 16, -(-n // 16))
    assert torch.equal(s.m, m) and torch.equal(s.M, M)

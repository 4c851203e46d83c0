"""Key blocks chosen per query block (``HeadPlan.blocks``, ``attnlab.llm.plans.key_blocks``): the blocks are those of
largest pooled score that the band does not hold, the kernel runs band ∪ columns ∪ blocks exactly, a head with
blocks and no tail keeps a compressed cache at decoding, the plan file and the method carry the field, bad values are refused."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, __import__("os").path.dirname(__file__))

from attnlab.errors import UserError  # noqa: E402
from test_llm_retrieval_plan import scored_calibration  # noqa: E402  (2 layers × 4 heads, n = 128, retrieval scores)
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.execution import cpu_backend  # noqa: E402
from attnlab.llm.execution.attention import LayerRunner, apply_plan, attention_modules  # noqa: E402
from attnlab.llm.plans.key_blocks import BLOCK, block_extras, block_keys, top_blocks  # noqa: E402
from attnlab.llm.plans.plan import HeadPlan, Plan, entries_of  # noqa: E402
from attnlab.support import Support  # noqa: E402


def head(w, fixed=(), dynamic=0, tail=0, blocks=0):
    return HeadPlan(support=Support(w=w, columns=np.asarray(fixed, dtype=np.int64)), dynamic=dynamic, tail=tail, blocks=blocks)


def direct_blocks(q, k, w, K, b=BLOCK):
    """B_t for one head, a query block at a time (numpy): the K blocks J < t with J·b < t·b + b − 1 − w of largest
    q̄_t·k̄_J (ties: the earlier block, as the stable sort)."""
    n = q.shape[0]
    T = -(-n // b)
    qb = [q[t * b:(t + 1) * b].mean(0) for t in range(T)]
    kb = [k[t * b:(t + 1) * b].mean(0) for t in range(T)]
    out = []
    for t in range(T):
        cand = [J for J in range(t) if J * b < t * b + b - 1 - w]
        s = np.array([float(qb[t] @ kb[J]) for J in cand])
        out.append(sorted(cand[i] for i in np.argsort(-s, kind="stable")[:K]))
    return out


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 90), w=st.integers(0, 40), K=st.integers(0, 5), seed=st.integers(0, 10**6))
def test_top_blocks_are_the_largest_pooled_scores_off_the_band(n, w, K, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, 1, n, 8, generator=g, dtype=torch.float64), torch.randn(1, 1, n, 8, generator=g, dtype=torch.float64)
    got = top_blocks(q, k, [w], K, b=8)
    want = direct_blocks(q[0, 0].numpy(), k[0, 0].numpy(), w, K, b=8)
    assert got.shape == (1, 1, -(-n // 8), min(K, -(-n // 8)))
    for t, blocks in enumerate(want):
        row = got[0, 0, t]
        assert sorted(row[row >= 0].tolist()) == blocks


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 90), B=st.integers(1, 2), H=st.integers(1, 4), b=st.sampled_from([1, 4, 16]), tokens=st.booleans())
def test_block_means_are_the_means_of_each_block_in_either_layout(n, B, H, b, tokens):
    # x̄_t = mean of x over I_t = [t·b, min(n, (t + 1)·b)), for (B, H, n, d) tensors and transformers' (B, n, H, d) seen
    # as (B, H, n, d) (reduced in the order they lie in memory)
    from attnlab.llm.plans.key_blocks import block_means

    x = torch.randn(B, n, H, 8, generator=torch.Generator().manual_seed(n * 10 + H)).transpose(1, 2)
    x = x if tokens else x.contiguous()
    want = torch.stack([x[:, :, t * b : (t + 1) * b].mean(2) for t in range(-(-n // b))], 2)
    assert torch.allclose(block_means(x, b), want, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 400), B=st.integers(1, 2), K=st.integers(1, 9), b=st.sampled_from([4, 16]), seed=st.integers(0, 10**6))
def test_the_native_block_choice_is_the_top_k_over_the_masked_rows(n, B, K, b, seed):
    """native.block_topk (each row's prefix of candidates, an insertion into the K best) chooses what
    top_pooled_blocks' top-k over the masked row does, in its order (largest first, −1 past the candidates)."""
    from attnlab.llm.plans.key_blocks import block_means, top_pooled_blocks
    from attnlab.nn.mechanisms import native

    if not native.available():
        pytest.skip(f"native kernel off: {native.unavailable_reason()}")
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, 3, n, 16, generator=g), torch.randn(B, 3, n, 16, generator=g)
    w = torch.randint(0, 3 * b, (3,), generator=g).tolist()
    qb, kb = block_means(q, b), block_means(k, b)
    want = top_pooled_blocks(qb, kb, w, K, b)
    got = top_pooled_blocks(qb, kb, w, K, b, choose=native.block_topk)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_the_native_block_choice_breaks_ties_to_the_lower_block():
    # equal pooled scores (repeated text: equal block means): the lower block first — torch's top-k has no defined order
    from attnlab.nn.mechanisms import native

    if not native.available():
        pytest.skip(f"native kernel off: {native.unavailable_reason()}")
    s = torch.tensor([1.0, 3.0, 2.0, 3.0, 2.0, 0.0]).expand(6, 6).reshape(1, 1, 6, 6).contiguous()
    got = native.block_topk(s, [0], 3, 4)[0, 0]                          # w = 0: every J < t a candidate
    assert got[5].tolist() == [1, 3, 2] and got[3].tolist() == [1, 2, 0] and got[1].tolist() == [0, -1, -1]
    assert got[0].tolist() == [-1, -1, -1]


@settings(max_examples=25, deadline=None)
@given(T=st.integers(1, 90), K=st.integers(1, 6), w=st.integers(0, 40), levels=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_the_native_block_choice_on_long_rows_with_ties_is_the_stable_order(T, K, w, levels, seed):
    # rows longer than a vector of candidates (the pre-scan that skips VEC at a time) with few distinct scores: the K
    # best in the order (largest ŝ, then lower J) over J < min(t, ⌈(t·b + b − 1 − w) / b⌉)
    from attnlab.nn.mechanisms import native

    if not native.available():
        pytest.skip(f"native kernel off: {native.unavailable_reason()}")
    b = 4
    s = torch.randint(0, levels, (1, 2, T, T), generator=torch.Generator().manual_seed(seed)).float()
    got = native.block_topk(s, [w, 0], K, b)
    for h, wh in enumerate([w, 0]):
        for t in range(T):
            bound = t * b + b - 1 - wh
            end = min(t, -(-bound // b) if bound > 0 else 0)
            best = sorted(range(end), key=lambda J: (-float(s[0, h, t, J]), J))[:K]
            assert got[0, h, t].tolist() == best + [-1] * (K - len(best))


def dense_reference(q, k, v, scaling, runner, blocks, cols):
    """Masked softmax over causal ∩ (band ∪ columns ∪ key blocks of the query's block) (tails: the last rows full);
    cols (B, H, g) the columns the prefill chose (−1: empty)."""
    B, H, n, _ = q.shape
    kv = runner.kv_of
    out = torch.empty_like(q)
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    causal = j <= i
    for b in range(B):
        for h in range(H):
            w = int(runner.w[h])
            if w == -1:
                allowed = causal
            else:
                allowed = causal & ((i - j <= w) | torch.isin(j, cols[b, h][cols[b, h] >= 0]))
                if runner.blocks[h]:
                    blk = blocks[b][h]                                   # (T, K) block indices, −1 empty
                    rows_blocks = blk[i[:, 0] // BLOCK]                  # (n, K)
                    allowed = allowed | (causal & ((j // BLOCK)[None] == rows_blocks[..., None]).any(1))
                if runner.tail[h]:
                    allowed[n - runner.tail[h]:] = causal[n - runner.tail[h]:]
            s = (q[b, h] @ k[b, kv[h]].T) * scaling
            out[b, h] = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v[b, kv[h]]
    return out


@pytest.mark.parametrize("n,ws,blocks", [(40, (2, 5, 3, -1), (2, 0, 1, 0)), (130, (4, 4, 9, 20), (3, 5, 0, 2)),
                                         (300, (16, 3, 0, 40), (4, 4, 8, 6))])
@pytest.mark.parametrize("kernel", [True, False])
def test_prefill_with_key_blocks_equals_the_dense_reference(n, ws, blocks, kernel, monkeypatch):
    # kernel: the native kernel reads each chunk's keys in place; False: the PyTorch path (per-chunk extras), as on a
    # machine without the kernel
    if not kernel:
        monkeypatch.setattr(cpu_backend, "native_heads_ready", lambda *a: False)
    heads = [head(w, (0, 1) if h == 0 and w >= 0 else (), 2 if h in (0, 3) and w >= 0 else 0, 5 if h == 1 else 0, K)
             for h, (w, K) in enumerate(zip(ws, blocks))]
    runner = LayerRunner(heads, 0, 2)                                             # GQA: 4 query heads, 2 KV heads
    g = torch.Generator().manual_seed(n)
    q = torch.randn(2, 4, n, 16, generator=g)
    k, v = torch.randn(2, 2, n, 16, generator=g), torch.randn(2, 2, n, 16, generator=g)
    out, state = runner.prefill(q, k, v, 0.3)
    chosen = [[top_blocks(q[b:b + 1, h:h + 1], k[b:b + 1, int(runner.kv_of[h]):int(runner.kv_of[h]) + 1], [max(ws[h], 0)],
                          blocks[h])[0, 0] for h in range(4)] for b in range(2)]
    columns = state.decode_columns
    g = columns.shape[-1] - max(blocks) * BLOCK               # the prefill's columns, then block keys
    ref = dense_reference(q, k, v, 0.3, runner, chosen, columns[..., :g])
    assert (out - ref).abs().max() < 1e-5
    # decoding goes on reading the keys of the blocks the last query block chose: block keys, more decoding columns
    # (−1: none)
    for b in range(2):
        for h in range(4):
            last = columns[b, h, g:]
            want = block_keys(chosen[b][h][-1], n) if runner.blocks[h] else torch.empty(0, dtype=torch.long)
            assert last[: len(want)].tolist() == want.tolist() and (last[len(want):] == -1).all()
    plain = LayerRunner([head(h.w, h.columns, h.dynamic, h.tail) if not h.is_full else h for h in heads], 0, 2)
    assert not torch.allclose(plain.prefill(q, k, v, 0.3)[0], out, atol=1e-4)   # the blocks change the rows they reach
    # decoding: key blocks are a prefill choice; a head with a tail (h = 1) reads (and its KV head keeps) every cached key
    assert runner.whole.tolist() == [h == 1 and w >= 0 for h, w in enumerate(ws)]
    every = runner.whole | (runner.w == -1)                                        # a tail or a full head: every key
    assert runner.whole_kv().tolist() == [bool(every[:2].any()), bool(every[2:].any())]


def test_block_extras_put_the_columns_first_and_own_no_empty_slot():
    blocks = torch.tensor([[[[-1, -1], [0, -1], [1, 0]]]])                           # (1, 1, T=3, K=2)
    cols = torch.tensor([[[0, -1]]])
    idx, own = block_extras(blocks, cols, n=40, b=16)
    assert idx.shape == (1, 1, 3, 2 + 32) and own.shape == (1, 1, 3, 1, 34)
    assert own[0, 0, 0, 0].tolist() == [True, False] + [False] * 32
    assert idx[0, 0, 1, 2:18].tolist() == list(range(16)) and own[0, 0, 1, 0, 2:18].all() and not own[0, 0, 1, 0, 18:].any()
    assert idx[0, 0, 2, 2:18].tolist() == list(range(16, 32)) and own[0, 0, 2, 0, 2:34].all()


def test_entries_json_roundtrip_and_bad_values(tmp_path):
    n, w = 200, 8
    plain, blocked = head(w, (0,), 2, 16), head(w, (0,), 2, 16, blocks=3)
    assert blocked.entries(n) - plain.entries(n) == 3 * BLOCK * (n - w - 1) == entries_of(w, 1, 2, n, 0, 3) - entries_of(w, 1, 2, n)
    assert head(w, blocks=100).entries(n) <= n * (n + 1) // 2                       # a bound, never above the causal entries
    old = Plan([[plain, HeadPlan.full()]], 1, "attnlab", 0.5, n)
    path = old.save(tmp_path / "old.json")
    assert json.loads(path.read_text())["heads"][0][0]["blocks"] == 0               # every part written, 0 included
    new = Plan([[blocked, HeadPlan.full()]], 1, "attnlab", 0.5, n)
    back = Plan.load(new.save(tmp_path / "new.json"))
    assert back.heads[0][0].blocks == 3 and back.to_dict() == new.to_dict() and back.block_heads() == 1
    assert Plan([[blocked, blocked]], 1, "test", 0.5, n, windows=[16]).block_heads() == 0    # a sliding layer: band only
    d = json.loads((tmp_path / "new.json").read_text())
    for bad in ("x", -1, 1.5, True, 10**7):
        d["heads"][0][0]["blocks"] = bad
        (tmp_path / "bad.json").write_text(json.dumps(d))
        with pytest.raises(UserError, match=r"field heads\.0\.0\.blocks: "):
            Plan.load(tmp_path / "bad.json")


def test_the_method_gives_the_retrieval_heads_blocks_within_the_budget():
    cal = scored_calibration()
    m = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2", tail="8", blocks="2")
    m.plan, m.n = m.make_plan(None, cal.n, cal), cal.n
    got = {(l, h) for l, row in enumerate(m.plan.heads) for h, hp in enumerate(row) if hp.blocks}
    assert got == {(0, 1), (1, 2)} and all(m.plan.heads[l][h].blocks == 2 and m.plan.heads[l][h].tail == 8 for l, h in got)
    assert m.plan.fraction() <= 0.5 + 1e-9 and m.plan.meta["blocks"] == 2
    d = m.describe()
    assert d["block_heads"] == 2 and d["blocks"] == 2
    lined = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2", tail="8", blocks="2", slashes="2").make_plan(None, cal.n, cal)
    assert all((hp.slashes, hp.blocks) == ((0, 2) if (l, h) in got else (2, 0))
               for l, row in enumerate(lined.heads) for h, hp in enumerate(row) if not hp.is_full)   # blocks: no slash lines
    for bad in ("-1", "x", "1.5"):
        with pytest.raises(UserError, match="blocks"):
            methods.get("attnlab-retrieval", 0.5, blocks=bad)
    with pytest.raises(UserError, match="key blocks"):
        methods.get("attnlab-retrieval", 0.05, retrieval_heads="2", blocks="8").make_plan(None, cal.n, cal)
    with pytest.raises(UserError, match="needs tail"):
        methods.get("attnlab-retrieval", 0.5, tail="0", blocks="2")                  # refused before any work


def test_other_blocks_go_to_every_other_planned_head_within_the_budget():
    """other_blocks=K': the heads that are neither retrieval heads nor full get K' prefill key blocks and no tail (their
    cache stays compressed); the bound is taken from β before the knapsack; a budget below it is one line."""
    cal = scored_calibration()
    m = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2", tail="8", blocks="2", other_blocks="1")
    m.plan, m.n = m.make_plan(None, cal.n, cal), cal.n
    retrieval = {(0, 1), (1, 2)}
    for l, row in enumerate(m.plan.heads):
        for h, hp in enumerate(row):
            if (l, h) in retrieval:
                assert (hp.tail, hp.blocks) == (8, 2)
            elif not hp.is_full:
                assert (hp.tail, hp.blocks) == (0, 1)
    assert m.plan.fraction() <= 0.5 + 1e-9 and m.plan.meta["other_blocks"] == 1
    assert m.plan.block_heads() == sum(not hp.is_full for row in m.plan.heads for hp in row)
    alone = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2", tail="8", other_blocks="1").make_plan(None, cal.n, cal)
    assert {(l, h) for l, row in enumerate(alone.heads) for h, hp in enumerate(row) if hp.blocks} == \
        {(l, h) for l, row in enumerate(alone.heads) for h, hp in enumerate(row) if not hp.is_full and (l, h) not in retrieval}
    # the bound: what K' blocks may add on every row of the 6 other heads, off β before the knapsack spends the rest
    bound = 6 * 1 * BLOCK * (cal.n - 1) / (8 * cal.n * (cal.n + 1) / 2)
    with pytest.raises(UserError, match="other heads' 2 key blocks"):
        methods.get("attnlab-retrieval", bound * 2 * 0.99, retrieval_heads="2", tail="8", other_blocks="2").make_plan(None, cal.n, cal)
    for bad in ("-1", "x"):
        with pytest.raises(UserError, match="other_blocks"):
            methods.get("attnlab-retrieval", 0.5, other_blocks=bad)


def test_a_head_with_key_blocks_and_no_tail_keeps_a_compressed_cache():
    """Key blocks are a prefill choice: at decoding such a head reads its band, its columns and the keys its last query
    block chose; its KV head keeps those, not every key."""
    from tiny_llama import tiny_model

    from attnlab.llm.eval.greedy import kv_tokens
    from attnlab.llm.execution.kv_cache import PlanCache

    model = tiny_model()
    n = 120
    heads = [head(4, (0,), 0, 0, blocks=2)] * 4
    plan = Plan([heads, heads], 2, "test", 0.5, n)
    x = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        apply_plan(model, plan)
        cache = PlanCache(model)
        model(input_ids=x, cache=cache, use_cache=True)
        runner = attention_modules(model)[0].attnlab_layer
        assert not runner.whole_kv().any()
        last = cache.layers[0].state.decode_columns[0, :, 1:]                         # after the one fixed column
        assert ((last >= 0).sum(-1) > 0).all()                                        # the last block chose keys
        # resident per KV head: the band (w + 1 keys of the last row), the column, its 2 query heads' block keys (< n)
        assert kv_tokens(cache) <= 5 + 1 + 2 * 2 * BLOCK < n
        out = model.generate(x, past_key_values=cache, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == n + 3


def test_tiny_model_end_to_end_with_key_blocks():
    """A tiny Llama with key blocks on some heads: the logits differ from the plan without them; generation runs with
    the plan's cache and the blocked heads' KV heads keep every key."""
    from tiny_llama import tiny_model

    from attnlab.llm.execution.kv_cache import PlanCache

    model = tiny_model()
    n = 100
    heads = [head(6, (0, 1), 2, 8, blocks=2), head(3), HeadPlan.full(), head(10, (0,), 1)]
    plan = Plan([heads, heads[::-1]], 2, "test", 0.5, n)
    plain = Plan([[head(h.w, h.columns, h.dynamic, h.tail) if not h.is_full else h for h in row] for row in plan.heads],
                 2, "test", 0.5, n)
    x = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        apply_plan(model, plan)
        logits = model(x).logits
        apply_plan(model, plain)
        assert not torch.allclose(model(x).logits, logits, atol=1e-4)
        apply_plan(model, plan)
        cache = PlanCache(model)
        out = model.generate(x, past_key_values=cache, max_new_tokens=4, do_sample=False)
        assert attention_modules(model)[0].attnlab_layer.whole_kv()[0]
    assert out.shape[1] == n + 4


from test_llm_plan_slashes import model_dir  # noqa: E402,F401  (the tiny model folder with a character tokenizer)


def test_cli_refuses_bad_key_blocks_in_one_line_writing_nothing(model_dir, tmp_path, cli):  # noqa: F811
    text = model_dir / "text.txt"
    base = ("plan", "--hf", model_dir, "--calibrate", text, "--budget", "0.3", "--n", "300", "--windows", "1")
    for spec, needle in (("attnlab-retrieval:blocks=-1", "blocks"), ("attnlab-retrieval:blocks=x", "blocks"),
                         ("attnlab-retrieval:tail=0:blocks=4", "needs tail"), ("attnlab-retrieval:other_blocks=-1", "other_blocks")):
        out = tmp_path / "p.json"
        code, _, err = cli(*base, "--method", spec, "--out", out)
        assert code == 2 and err.count("\n") == 1 and needle in err and "Traceback" not in err, err
        assert not out.exists()
        code, _, err = cli("eval", "--hf", model_dir, "--task", "niah", "--lengths", "300", "--method", spec, "--budget", "0.3",
                           "--calibrate", text, "--out", tmp_path / "ev")
        assert code == 2 and err.count("\n") == 1 and needle in err, err
        assert not (tmp_path / "ev").exists()
    out = tmp_path / "ok.json"   # the summary line counts the heads by their number of key blocks
    code, text, err = cli(*base, "--method", "attnlab-retrieval:retrieval_heads=2:tail=8:blocks=2:other_blocks=1", "--out", out)
    p = Plan.load(out)
    others = sum(h.blocks == 1 for r in p.heads for h in r)
    assert code == 0 and "2 with 2 key blocks" in text and f"{others} with 1 key blocks" in text and others > 0, (text, err)
    out = tmp_path / "p.json"   # a budget below the other heads' key blocks: the plan refuses (eval: a skipped row, said)
    code, _, err = cli(*base, "--method", "attnlab-retrieval:retrieval_heads=2:other_blocks=64", "--out", out)
    # refused after the model has loaded: the progress lines of the loading come first, then the one error line
    errors = [line for line in err.splitlines() if not line.startswith("attnlab: ") or line.startswith("attnlab: error:")]
    assert code == 2 and errors == [err.splitlines()[-1]] and "other heads' 64 key blocks" in err and not out.exists(), err
    d = Plan([[head(4, (0,), 0, 8, blocks=2)] * 4] * 2, 2, "attnlab", 0.5, 300).to_dict()
    d["heads"][1][3]["blocks"] = -2
    (tmp_path / "bad.json").write_text(json.dumps(d))
    code, _, err = cli("plan-run", "--hf", model_dir, "--plan", tmp_path / "bad.json", "--file", text, "--n", "300")
    assert code == 2 and err.count("\n") == 1 and "field heads.1.3.blocks: " in err, err

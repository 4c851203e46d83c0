"""The retrieval heads' decoding KV: whole KV groups (``by_kv``) and the tail rows' vote (``tail_keep`` / ``HeadPlan.kept``)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from attnlab.errors import UserError  # noqa: E402
from test_llm_retrieval_plan import scored_calibration  # noqa: E402  (2 layers × 4 heads, 2 KV heads, retrieval scores)
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.execution.attention import LayerRunner, apply_plan, attention_modules  # noqa: E402
from attnlab.llm.plans.key_blocks import BLOCK  # noqa: E402
from attnlab.llm.plans.plan import HeadPlan, Plan  # noqa: E402
from attnlab.support import Support  # noqa: E402


def head(w, fixed=(), tail=0, blocks=0, kept=0, vote_next=0):
    return HeadPlan(support=Support(w=w, columns=np.asarray(fixed, dtype=np.int64)), tail=tail, blocks=blocks, kept=kept,
                    vote_next=vote_next)


def test_by_kv_takes_whole_kv_groups_ranked_by_their_best_query_head():
    # SCORES: layer 0 (0.1, 0.9 | 0.0, 0.2), layer 1 (0.05, 0.3 | 0.8, 0.0); KV groups of 2 query heads
    cal = scored_calibration()
    for k, want in ((1, {(0, 0), (0, 1)}), (2, {(0, 0), (0, 1)}), (3, {(0, 0), (0, 1), (1, 2), (1, 3)})):
        plan = methods.get("attnlab-retrieval", 0.5, retrieval_heads=str(k), tail="8", by_kv="1").make_plan(None, cal.n, cal)
        assert {tuple(x) for x in plan.meta["retrieval_heads"]} == want and plan.meta["by_kv"] == 1
        assert {(l, h) for l, row in enumerate(plan.heads) for h, hp in enumerate(row) if hp.tail} == want
    plain = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2", tail="8").make_plan(None, cal.n, cal)
    assert {tuple(x) for x in plain.meta["retrieval_heads"]} == {(0, 1), (1, 2)}   # by head: two KV groups
    for bad in ("2", "-1", "x"):
        with pytest.raises(UserError, match="by_kv"):
            methods.get("attnlab-retrieval", 0.5, by_kv=bad)


def vote_reference(q, k, scaling, T, w, taken, P, b=BLOCK, s_next=0):
    """The kept keys of one head (numpy): the tail rows' softmax over causal keys, m_j = Σ_i a_ij on keys not in the last
    row's band nor ``taken``, the ⌈P / b⌉ blocks J of largest V_J = Σ_{u=0…s} m_{J−u} (m_J = Σ_{j∈J} m_j; V > 0), their
    keys not already held."""
    n = q.shape[0]
    s = (q[n - T:] @ k.T) * scaling
    i, j = np.arange(n - T, n)[:, None], np.arange(n)[None, :]
    s = np.where(j <= i, s, -np.inf)
    a = np.exp(s - s.max(1, keepdims=True))
    a /= a.sum(1, keepdims=True)
    m = a.sum(0)
    off = np.ones(n, bool)
    off[max(0, n - 1 - w):] = False
    off[list(taken)] = False
    m = np.where(off, m, 0.0)
    m_J = [m[J * b:(J + 1) * b].sum() for J in range(-(-n // b))]
    blocks = [(sum(m_J[J - u] for u in range(s_next + 1) if J - u >= 0), J) for J in range(len(m_J))]
    best = sorted(blocks, key=lambda x: -x[0])[: -(-P // b)]
    return {J * b + x for s_, J in best if s_ > 0 for x in range(b) if J * b + x < n and off[J * b + x]}


@pytest.mark.parametrize("n,P,s", [(100, 40, 0), (300, 16, 0), (257, 64, 0), (300, 48, 1), (257, 64, 2)])
def test_the_tail_vote_keeps_the_blocks_its_rows_attended_most(n, P, s):
    heads = [head(4, (0,), 8, kept=P, vote_next=s), head(4, (0,), 8), head(3), head(6, (1,), blocks=2)]
    runner = LayerRunner(heads, 0, 2)                                                 # GQA: heads 0, 1 → KV 0; 2, 3 → KV 1
    g = torch.Generator().manual_seed(n)
    q = torch.randn(1, 4, n, 16, generator=g)
    k, v = torch.randn(1, 2, n, 16, generator=g), torch.randn(1, 2, n, 16, generator=g)
    out, state = runner.prefill(q, k, v, 0.3)
    # the prefill is unchanged: the same rows as the head without a vote (which runs its tail as SDPA)
    plain = LayerRunner([head(4, (0,), 8)] + heads[1:], 0, 2)
    assert (plain.prefill(q, k, v, 0.3)[0] - out).abs().max() < 1e-5
    cols = state.decode_columns[0, 0]
    voted = {int(x) for x in cols[1:] if x >= 0}                                       # after the fixed column 0
    assert voted == vote_reference(q[0, 0].numpy(), k[0, 0].numpy(), 0.3, 8, 4, {0}, P, s_next=s)
    assert len(voted) == int((cols[1:] >= 0).sum()) and 0 < len(voted) <= -(-P // BLOCK) * BLOCK
    # decoding: the voting head reads its band, columns and votes (not its whole cache); the head with a plain tail does
    assert runner.whole.tolist() == [False, True, False, False] and runner.whole_kv().tolist() == [True, False]
    alone = LayerRunner([heads[0], head(4, (0,)), heads[2], heads[3]], 0, 2)
    alone.prefill(q, k, v, 0.3)
    assert not alone.whole_kv().any()


def test_kept_in_the_plan_file_and_its_bad_values(tmp_path):
    hp = head(8, (0,), 16, blocks=2, kept=64)
    back = HeadPlan.from_dict(json.loads(json.dumps(hp.to_dict())))
    assert (back.w, back.columns, back.tail, back.blocks, back.kept) == (8, [0], 16, 2, 64)
    assert head(8, (0,), 16).to_dict()["kept"] == 0                                  # every part written, 0 too
    for bad in (-1, "x", True, 1.5):
        with pytest.raises(ValueError, match="kept"):
            HeadPlan.from_dict({**hp.to_dict(), "kept": bad})
    with pytest.raises(ValueError, match="only with a tail"):
        HeadPlan.from_dict({**head(8, (0,)).to_dict(), "kept": 32})
    nxt = head(8, (0,), 16, kept=64, vote_next=1)
    assert HeadPlan.from_dict(json.loads(json.dumps(nxt.to_dict()))).vote_next == 1 and hp.to_dict()["vote_next"] == 0
    for bad in (-1, "x", True):
        with pytest.raises(ValueError, match="vote_next"):
            HeadPlan.from_dict({**nxt.to_dict(), "vote_next": bad})
    with pytest.raises(ValueError, match="only with kept"):
        HeadPlan.from_dict({**head(8, (0,), 16).to_dict(), "vote_next": 1})


def test_a_vote_with_vote_next_keeps_the_block_after_the_words_the_question_finds():
    """The tail rows find keys 100…111 (block 6); the value starts block 7: one kept block is block 6 without vote_next,
    block 7 with it (V_7 = m_7 + m_6), and with two kept blocks both."""
    n, d = 256, 8
    q, k, v = torch.zeros(1, 1, n, d), torch.zeros(1, 1, n, d), torch.randn(1, 1, n, d)
    k[0, 0, 100:112, 0], q[0, 0, -4:, 0] = 10.0, 1.0
    for s, P, want in ((0, 16, {6}), (1, 16, {7}), (1, 32, {6, 7})):
        runner = LayerRunner([head(16, (), 4, kept=P, vote_next=s)], 0, 1)
        columns = runner.prefill(q, k, v, 1.0)[1].decode_columns
        assert set((columns[columns >= 0] // BLOCK).tolist()) == want


def test_the_method_gives_the_vote_to_the_retrieval_heads_and_refuses_it_without_a_tail():
    cal = scored_calibration()
    plan = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2", tail="8", tail_keep="32").make_plan(None, cal.n, cal)
    got = {(l, h): hp.kept for l, row in enumerate(plan.heads) for h, hp in enumerate(row) if hp.kept}
    assert got == {(0, 1): 32, (1, 2): 32} and plan.meta["tail_keep"] == 32
    m = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2", tail="8", tail_keep="32")
    m.plan, m.n = plan, cal.n
    assert (m.describe()["kept_heads"], m.describe()["kept"]) == (2, 32)                 # shown by attnlab eval's rows
    with pytest.raises(UserError, match="tail_keep=32 needs tail"):
        methods.get("attnlab-retrieval", 0.5, tail="0", tail_keep="32")                 # refused before any work
    with pytest.raises(UserError, match="vote_next=1 needs tail_keep"):
        methods.get("attnlab-retrieval", 0.5, tail="8", vote_next="1")
    nxt = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2", tail="8", tail_keep="32", vote_next="1").make_plan(None, cal.n, cal)
    assert {(l, h) for l, row in enumerate(nxt.heads) for h, hp in enumerate(row) if hp.vote_next == 1} == {(0, 1), (1, 2)}
    assert nxt.meta["vote_next"] == 1 and "vote_next" not in plan.meta
    for bad in ("-1", "x"):
        with pytest.raises(UserError, match="tail_keep"):
            methods.get("attnlab-retrieval", 0.5, tail_keep=bad)


def test_a_voting_head_keeps_a_compressed_cache_and_generates():
    from tiny_llama import tiny_model

    from attnlab.llm.eval.greedy import kv_tokens
    from attnlab.llm.execution.kv_cache import PlanCache

    model = tiny_model()
    n = 120
    row = [head(4, (0,), 8, kept=32)] * 4
    x = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        apply_plan(model, Plan([row, row], 2, "test", 0.5, n))
        cache = PlanCache(model)
        model(input_ids=x, cache=cache, use_cache=True)
        assert not attention_modules(model)[0].attnlab_layer.whole_kv().any()
        # per KV head: the band (w + 1), the column, its 2 query heads' votes (≤ 32 each)
        assert kv_tokens(cache) <= 5 + 1 + 2 * 32 < n
        out = model.generate(x, past_key_values=cache, max_new_tokens=3, do_sample=False)
        whole = Plan([[head(4, (0,), 8)] * 4] * 2, 2, "test", 0.5, n)                 # the same heads reading every key
        apply_plan(model, whole)
        cache = PlanCache(model)
        model(input_ids=x, cache=cache, use_cache=True)
        assert kv_tokens(cache) == n
    assert out.shape[1] == n + 3


from test_llm_plan_slashes import model_dir  # noqa: E402,F401  (the tiny model folder with a character tokenizer)


def test_cli_refuses_bad_kv_options_in_one_line_writing_nothing(model_dir, tmp_path, cli):  # noqa: F811
    text = model_dir / "text.txt"
    base = ("plan", "--hf", model_dir, "--calibrate", text, "--budget", "0.3", "--n", "300", "--windows", "1")
    for spec, needle in (("attnlab-retrieval:by_kv=2", "by_kv"), ("attnlab-retrieval:tail_keep=-4", "tail_keep"),
                         ("attnlab-retrieval:tail=0:tail_keep=64", "needs tail")):
        out = tmp_path / "p.json"
        code, _, err = cli(*base, "--method", spec, "--out", out)
        assert code == 2 and err.count("\n") == 1 and needle in err and "Traceback" not in err, err
        assert not out.exists()
    out = tmp_path / "ok.json"
    code, text, err = cli(*base, "--method", "attnlab-retrieval:retrieval_heads=2:tail=8:tail_keep=32:by_kv=1:pages=4", "--out", out)
    assert code == 0 and "2 decoding from 32 voted keys" in text and "4 pages read back a step" in text, (text, err)
    p = Plan.load(out)
    assert p.meta["tail_keep"] == 32 and p.meta["by_kv"] == 1 and sum(h.kept == 32 for r in p.heads for h in r) == 2
    d = p.to_dict()
    d["heads"][0][0] = {**d["heads"][0][0], "kept": -3}
    (tmp_path / "bad.json").write_text(json.dumps(d))
    code, _, err = cli("plan-run", "--hf", model_dir, "--plan", tmp_path / "bad.json", "--file", text, "--n", "300")
    assert code == 2 and err.count("\n") == 1 and "field heads.0.0.kept: " in err, err


def test_page_score_calibrated_splits_the_pages_where_the_calibration_text_ranks_the_split_better():
    """page_score=calibrated: K/2 pages by the mean key (mean_pages = K − K/2) where the calibration's recall@K of the
    split beats the bound's, none otherwise or where no row read far; refused without a ranking at that K, beside
    mean_pages, or without pages (one line each)."""
    cal = scored_calibration()
    m = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2", tail="8", pages="16", page_score="calibrated")
    assert m.page_ranking_pages == 16 and methods.get("attnlab-retrieval", 0.5, pages="16").page_ranking_pages == 0
    with pytest.raises(UserError, match="page ranking at K = 16 .it has none.; recalibrate"):
        m.make_plan(None, cal.n, cal)
    for bound, split, want in ((0.6, 0.75, 8), (0.75, 0.7, 0), (np.nan, np.nan, 0)):
        cal.page_ranking = np.array([16, 100, bound, 0.5, split, 0.7, 0.6, 0.8])
        plan = m.make_plan(None, cal.n, cal)
        assert plan.mean_pages == want and plan.meta["page_score"]["mean_pages"] == want
        json.dumps(plan.to_dict(), allow_nan=False)                                 # the plan file stays plain JSON
    cal.page_ranking[0] = 8
    with pytest.raises(UserError, match="it has K = 8"):
        m.make_plan(None, cal.n, cal)
    for opts, needle in (({"pages": "16", "mean_pages": "4"}, "give one of them"), ({}, "needs pages > 0")):
        with pytest.raises(UserError, match=needle):
            methods.get("attnlab-retrieval", 0.5, page_score="calibrated", **opts)
    with pytest.raises(UserError, match="page_score"):
        methods.get("attnlab-retrieval", 0.5, page_score="mean")


def test_the_calibration_ranks_the_page_scores_once_for_the_methods_that_read_them(tmp_path):
    """build_calibration adds the page ranking at the K a method asks (and only then), on one window of its text;
    a saved calibration keeps it, one made before reads K = 0."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    from attnlab.llm.calibration.build import build_calibration
    from attnlab.llm.calibration.statistics import Calibration
    from tests.char_model_folder import tiny_llama_folder

    folder = tiny_llama_folder(tmp_path / "m")
    model, tok = LlamaForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40 + "\n")
    cal, _ = build_calibration(model, tok, [methods.get("attnlab-band", 0.5)], 256, text, 1)
    assert cal.page_ranking[0] == 0                                                    # not asked: not measured
    reads = methods.get("attnlab-retrieval", 0.5, retrieval_heads="0", tail="0", pages="4", page_score="calibrated")
    cal, changed = build_calibration(model, tok, [reads], 256, text, 1, cal=cal)
    assert changed and cal.page_ranking[0] == 4 and cal.page_ranking[1] >= 0
    assert model.config._attn_implementation == "sdpa"                                   # the model as it was
    cal.save(tmp_path / "c.npz")
    np.testing.assert_array_equal(Calibration.load(tmp_path / "c.npz").page_ranking, cal.page_ranking)
    assert build_calibration(model, tok, [reads], 256, text, 1, cal=cal)[1] is False     # kept: not measured again

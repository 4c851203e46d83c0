"""The decoding cache's budget apart from the prefill's β: a band capped at decoding (``decode_band``) and one vote a
KV group (``group_vote``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_llm_retrieval_kv import head, vote_reference  # noqa: E402
from test_llm_retrieval_plan import scored_calibration  # noqa: E402
from attnlab.errors import UserError  # noqa: E402
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.execution.attention import LayerRunner, apply_plan  # noqa: E402
from attnlab.llm.plans.plan import FULL, Plan  # noqa: E402


def qkv(n, seed, H=4, H_kv=2, d=16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, H, n, d, generator=g), torch.randn(1, H_kv, n, d, generator=g),
            torch.randn(1, H_kv, n, d, generator=g))


def test_a_capped_band_reads_and_keeps_at_most_c_keys_at_decoding_and_the_prefill_is_unchanged():
    """w_read_at(h) = min(w_h, c) for a planned head; FULL and a retrieval tail stay whole; a sliding layer
    min(W − 1, c).  keep(j): j ≥ seen − w_read_at or a column.  The prefill's rows are the uncapped plan's."""
    heads = [head(40, (0,)), head(8, (1,)), head(FULL), head(30, (0,), 8)]
    n, c = 120, 16
    q, k, v = qkv(n, 0)
    plain, capped = LayerRunner(heads, 0, 2), LayerRunner(heads, 0, 2, decode_band=c)
    (out_plain, plain_state), (out_capped, capped_state) = plain.prefill(q, k, v, 0.25), capped.prefill(q, k, v, 0.25)
    assert (out_plain - out_capped).abs().max() == 0
    assert capped.w_read.tolist() == [16, 8, FULL, FULL] and plain.w_read.tolist() == [40, 8, FULL, FULL]
    assert [capped.w_read_at(h, n) for h in range(4)] == [16, 8, FULL, 16]        # a tail's band: 16 (it reads all)
    pos = torch.arange(n).expand(1, 2, n)
    keep = capped.keep(pos, n, capped_state)         # KV 0: heads 0 (w 16 now, column 0), 1 (w 8, column 1)
    want = (pos[0, 0] >= n - 16) | (pos[0, 0] <= 1)
    assert torch.equal(keep[0, 0], want) and bool(keep[0, 1].all())   # KV 1: a FULL head and a tail read everything
    assert int(plain.keep(pos, n, plain_state)[0, 0].sum()) == 40 + 2
    sliding = LayerRunner([head(FULL), head(100)], 0, 1, sliding_window=64, decode_band=c)
    assert [sliding.w_read_at(h, n) for h in range(2)] == [16, 16]
    assert [LayerRunner([head(FULL), head(100)], 0, 1, sliding_window=64).w_read_at(h, n) for h in range(2)] == [63, 63]


def test_a_capped_band_decodes_as_the_same_heads_planned_with_that_band():
    """A decoding step of a head with band w capped at c reads what a head planned with band c reads; in a model, the
    cache keeps as many keys as that plan's, and generation runs."""
    from tiny_llama import tiny_model

    from attnlab.llm.eval.greedy import kv_tokens
    from attnlab.llm.execution.kv_cache import PlanCache

    n = 96
    q, k, v = qkv(n + 3, 7)
    capped = LayerRunner([head(40, (0,))] * 4, 0, 2, decode_band=12)
    planned = LayerRunner([head(12, (0,))] * 4, 0, 2)
    states = [r.prefill(q[:, :, :n], k[:, :, :n], v[:, :, :n], 0.25)[1] for r in (capped, planned)]
    q_pos, k_pos = torch.arange(n, n + 3), torch.arange(n + 3).expand(1, 2, n + 3)
    a = capped.decode(q[:, :, n:], k, v, 0.25, q_pos, k_pos, states[0])
    b = planned.decode(q[:, :, n:], k, v, 0.25, q_pos, k_pos, states[1])
    assert (a - b).abs().max() < 1e-5
    assert (a - LayerRunner([head(40, (0,))] * 4, 0, 2).decode(q[:, :, n:], k, v, 0.25, q_pos, k_pos, states[0])
            ).abs().max() > 1e-3
    model = tiny_model()
    x = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(5))
    count = {}
    with torch.no_grad():
        for name, row, band in (("capped", [head(40, (0,))] * 4, 12), ("planned", [head(12, (0,))] * 4, 0)):
            apply_plan(model, Plan([row, row], 2, "test", 0.5, n, decode_band=band))
            cache = PlanCache(model)
            out = model.generate(x, cache=cache, max_new_tokens=3, do_sample=False)
            count[name] = kv_tokens(cache)
    assert count["capped"] == count["planned"] < n and out.shape[1] == n + 3


@pytest.mark.parametrize("n,P", [(100, 32), (257, 48)])
def test_one_vote_a_kv_group_sums_the_masses_of_its_voting_heads(n, P):
    """group_vote: the voting heads 0 and 1 (KV 0) keep the same blocks — those of largest m_0 + m_1 — and head 2
    (KV 1, alone in its vote) the blocks of its own mass."""
    heads = [head(4, (), 8, kept=P), head(4, (), 8, kept=P), head(4, (), 8, kept=P), head(3)]
    q, k, v = qkv(n, n)
    runner = LayerRunner(heads, 0, 2, group_vote=1)
    _, state = runner.prefill(q, k, v, 0.3)
    voted = [{int(x) for x in state.decode_columns[0, h] if x >= 0} for h in range(3)]
    assert voted[0] == voted[1] and 0 < len(voted[0]) <= P + 15
    assert voted[2] == vote_reference(q[0, 2].numpy(), k[0, 1].numpy(), 0.3, 8, 4, set(), P)
    # the reference of the group: each head's tail rows' softmax over KV 0's causal keys, summed over rows and heads
    i, j = np.arange(n - 8, n)[:, None], np.arange(n)[None, :]
    m = np.zeros(n)
    for h in (0, 1):
        s = np.where(j <= i, (q[0, h, n - 8:] @ k[0, 0].T).numpy() * 0.3, -np.inf)
        a = np.exp(s - s.max(1, keepdims=True))
        m += (a / a.sum(1, keepdims=True)).sum(0)
    m[n - 5:] = 0.0                                                                     # the band (w = 4) holds these
    per_block = np.array([m[J * 16:(J + 1) * 16].sum() for J in range(-(-n // 16))])
    best = set(np.argsort(-per_block, kind="stable")[: -(-P // 16)].tolist())
    assert {x // 16 for x in voted[0]} == best
    alone = LayerRunner(heads, 0, 2)                                                     # without: each its own vote
    _, alone_state = alone.prefill(q, k, v, 0.3)
    alone_voted = {int(x) for x in alone_state.decode_columns[0, 0] if x >= 0}
    assert alone_voted == vote_reference(q[0, 0].numpy(), k[0, 0].numpy(), 0.3, 8, 4, set(), P)


def test_the_method_options_the_plan_file_and_bad_values(tmp_path):
    cal = scored_calibration()
    m = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2", tail="8", tail_keep="32", group_vote="1",
                    decode_band="24")
    plan = m.make_plan(None, cal.n, cal)
    assert (plan.decode_band, plan.group_vote) == (24, 1) and plan.meta["decode_band"] == 24 and plan.meta["group_vote"] == 1
    path = tmp_path / "plan.json"
    plan.save(path)
    back = Plan.load(path)
    assert (back.decode_band, back.group_vote) == (24, 1)
    d = json.loads(path.read_text())
    for key, bad in (("decode_band", -1), ("decode_band", "x"), ("group_vote", 2), ("group_vote", True)):
        path.write_text(json.dumps({**d, key: bad}))
        with pytest.raises(UserError, match=key):
            Plan.load(path)
    plain = methods.get("attnlab-retrieval", 0.5, retrieval_heads="2", tail="8").make_plan(None, cal.n, cal)
    assert plain.to_dict()["decode_band"] == plain.to_dict()["group_vote"] == 0   # every field written, 0 too
    with pytest.raises(UserError, match="group_vote=1 needs tail_keep"):
        methods.get("attnlab-retrieval", 0.5, tail="8", group_vote="1")
    for key, bad in (("decode_band", "-1"), ("group_vote", "2"), ("decode_band", "x")):
        with pytest.raises(UserError, match=key):
            methods.get("attnlab-retrieval", 0.5, **{key: bad})

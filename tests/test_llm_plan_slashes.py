"""Per-input slash lines inside a plan (``HeadPlan.slashes``): chosen from the last queries, run by the kernel
with the band and columns at the prefill, counted in the plan's entries, written into the plan file."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))

from attnlab.errors import UserError  # noqa: E402
from test_llm_retrieval_plan import scored_calibration  # noqa: E402  (2 layers × 4 heads, n = 128, retrieval scores)
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.execution.attention import STATE, LayerRunner, apply_plan, attention_modules  # noqa: E402
from attnlab.llm.plans.plan import LAST_Q, HeadPlan, Plan, entries_of, slash_fraction  # noqa: E402
from attnlab.llm.plans.slash_lines import slash_mass, top_slashes  # noqa: E402
from attnlab.support import NO_DIAGONAL, Support, diagonal_mask  # noqa: E402


def head(w, fixed=(), dynamic=0, slashes=0, tail=0):
    return HeadPlan(support=Support(w=w, columns=np.asarray(fixed, dtype=np.int64)), dynamic=dynamic, tail=tail, slashes=slashes)


def dense_reference(q, k, v, scaling, w, columns, diagonals):
    """Masked softmax over causal ∩ (band ∪ columns ∪ diagonals): q (B, H, n, d), k, v (B, H_kv, n, d)."""
    B, H, n, _ = q.shape
    rep = H // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    out = torch.empty_like(q)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for b in range(B):
        for h in range(H):
            if w[h] == -1:
                allowed = causal
            else:
                allowed = causal & Support(w=int(w[h]), columns=columns[b, h]).dense(n, n)
                allowed = allowed | (causal & diagonal_mask(diagonals[b, h], n, n))
            s = (q[b, h] @ k[b, h].T) * scaling
            out[b, h] = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1) @ v[b, h]
    return out


def direct_slashes(q, k, kv_of, scaling, w, s, columns):
    """The top-s offsets δ < −w of Σ_r â_{r, p_r + δ} over the last LAST_Q queries and the keys off the head's
    columns, one head and row at a time (numpy)."""
    B, H, n, _ = q.shape
    nq = min(LAST_Q, n)
    out = {}
    for b in range(B):
        for h in range(H):
            if not s[h]:
                continue
            qq, kk = q[b, h].double().numpy(), k[b, kv_of[h]].double().numpy()
            mass = np.zeros(n)
            for p in range(n - nq, n):
                sc = qq[p] @ kk[: p + 1].T * scaling
                a = np.exp(sc - sc.max())
                a /= a.sum()
                held = set(columns[b, h].tolist())
                for j in range(p + 1):
                    mass[p - j] += 0.0 if j in held else a[j]
            d = [x for x in np.argsort(-mass, kind="stable") if x > w[h] and mass[x] > 0][: s[h]]
            out[b, h] = sorted(-x for x in d)
    return out


@pytest.mark.parametrize("n,ws,slashes", [(37, (2, 2, 5, -1), (3, 0, 2, 0)), (130, (4, 4, 9, 1), (8, 2, 4, 5)),
                                          (300, (16, 3, 3, 40), (4, 4, 1, 6))])
def test_prefill_with_slashes_equals_the_dense_reference_and_picks_the_top_lines(n, ws, slashes):
    heads = [head(w, (0, 1) if h == 0 and w >= 0 else (), 3 if h in (0, 2) and w >= 0 else 0, s)
             for h, (w, s) in enumerate(zip(ws, slashes))]
    runner = LayerRunner(heads, 0, 2)                                              # GQA: 4 query heads, 2 KV heads
    g = torch.Generator().manual_seed(n)
    q = torch.randn(2, 4, n, 16, generator=g)
    k, v = torch.randn(2, 2, n, 16, generator=g), torch.randn(2, 2, n, 16, generator=g)
    k[:, :, ::7] *= 3                                                              # some keys stand out: lines with mass
    out, state = runner.prefill(q, k, v, 0.3)
    ref = dense_reference(q, k, v, 0.3, runner.w.tolist(), state.decode_columns, state.diagonals)
    assert (out - ref).abs().max() < 1e-5
    want = direct_slashes(q, k, runner.kv_of.tolist(), 0.3, runner.w.tolist(), [0 if w < 0 else s for w, s in zip(ws, slashes)],
                          state.decode_columns)
    for (b, h), deltas in want.items():
        got = state.diagonals[b, h]
        assert sorted(got[got != NO_DIAGONAL].tolist()) == deltas
        assert len(deltas) == min(slashes[h], n - ws[h] - 1)
    assert (state.diagonals[:, [h for h in range(4) if not slashes[h] or ws[h] < 0]] == NO_DIAGONAL).all()
    if any(s and w >= 0 for w, s in zip(ws, slashes)):
        plain = LayerRunner([head(h.w, h.columns, h.dynamic) if not h.is_full else h for h in heads], 0, 2)
        assert not torch.allclose(plain.prefill(q, k, v, 0.3)[0], out, atol=1e-4)   # the lines change rows they reach


def test_top_slashes_per_head_counts_and_the_band():
    mass = torch.tensor([[5.0, 4.0, 0.0, 3.0, 1.0, 2.0], [1.0, 1.0, 1.0, 0.5, 0.25, 0.0]])
    d = top_slashes(mass, torch.tensor([0, 2]), torch.tensor([3, 1]))
    assert d.tolist() == [[-1, -3, -5], [-3, NO_DIAGONAL, NO_DIAGONAL]]           # d ≤ w is the band's
    a = torch.softmax(torch.randn(2, 3, 5, 9), -1).tril(4)                          # rows of queries 4..8 over 9 keys
    m = slash_mass(a)
    for dist in range(9):
        assert torch.allclose(m[..., dist], sum(a[..., r, 4 + r - dist] for r in range(5) if 4 + r - dist >= 0))


def test_entries_json_roundtrip_and_old_files_unchanged(tmp_path):
    n, w = 200, 8
    plain, lined = head(w, (0,), 2), head(w, (0,), 2, slashes=5)
    assert lined.entries(n) - plain.entries(n) == 5 * (n - w - 1) == entries_of(w, 1, 2, n, 5) - entries_of(w, 1, 2, n)
    old = Plan([[plain, HeadPlan.full()]], 1, "attnlab", 0.5, n)
    path = old.save(tmp_path / "old.json")
    assert json.loads(path.read_text())["heads"][0][0]["slashes"] == 0             # every part written, 0 included
    assert Plan.load(path).to_dict() == old.to_dict()
    new = Plan([[lined, HeadPlan.full()]], 1, "attnlab", 0.5, n)
    back = Plan.load(new.save(tmp_path / "new.json"))
    assert back.heads[0][0].slashes == 5 and back.to_dict() == new.to_dict() and back.slash_heads() == 1
    assert new.fraction() - old.fraction() == pytest.approx(5 * (n - w - 1) / (2 * n * (n + 1) / 2))
    slid = Plan([[lined, lined]], 1, "test", 0.5, n, windows=[16])
    assert slid.heads[0][0].slashes == 0                                            # a sliding layer: band only
    d = json.loads((tmp_path / "new.json").read_text())
    for bad in ("x", -1, 1.5, True):
        d["heads"][0][0]["slashes"] = bad
        (tmp_path / "bad.json").write_text(json.dumps(d))
        with pytest.raises(UserError, match=r"field heads\.0\.0\.slashes: "):
            Plan.load(tmp_path / "bad.json")


@pytest.mark.parametrize("name,opts", [("attnlab-retrieval", {"retrieval_heads": "2", "tail": "8"}), ("attnlab-band", {})])
def test_methods_take_the_slashes_from_the_budget(name, opts):
    cal = scored_calibration()
    m = methods.get(name, 0.3, slashes="3", **opts)
    m.plan, m.n = m.make_plan(None, cal.n, cal), cal.n
    planned = [h for row in m.plan.heads for h in row if not h.is_full]
    assert planned and all(h.slashes == 3 for h in planned)
    assert m.plan.fraction() <= 0.3 + 1e-9
    assert slash_fraction(None, 2, 4, 3, cal.n) == pytest.approx(8 * 3 * 127 / (8 * 128 * 129 / 2))
    d = m.describe()
    assert d["slashes"] == 3 and d["slash_heads"] == len(planned)
    for bad in ("-1", "x", "1.5"):
        with pytest.raises(UserError, match="slashes"):
            methods.get(name, 0.3, slashes=bad, **opts)
    with pytest.raises(UserError, match="slash lines"):
        methods.get(name, 0.001, slashes="60", **opts).make_plan(None, cal.n, cal)


def test_tiny_model_end_to_end_prefill_and_decoding(monkeypatch):
    """A tiny Llama with slash lines on its planned heads: the model's logits equal those of the same model whose
    layers run the dense masked reference (band ∪ columns ∪ chosen diagonals); the lines change the logits;
    generation runs with the plan's cache (decoding reads band + columns: the lines are prefill-only)."""
    from tiny_llama import tiny_model

    from attnlab.llm.execution.kv_cache import PlanCache

    model = tiny_model()
    n = 160
    heads = [head(6, (0, 1), 2, slashes=4), head(3, (), 0, slashes=2), HeadPlan.full(), head(10, (0,), 1)]
    plan = Plan([heads, heads[::-1]], 2, "test", 0.5, n)
    plain = Plan([[head(h.w, h.columns, h.dynamic) if not h.is_full else h for h in row] for row in plan.heads], 2, "test", 0.5, n)
    x = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        apply_plan(model, plan)
        logits = model(x).logits
        diagonals = getattr(attention_modules(model)[0], STATE).diagonals   # the last prefill's, transformers' cache
        assert (diagonals[0, 0] != NO_DIAGONAL).sum() == 4 and (diagonals[0, 1] != NO_DIAGONAL).sum() == 2
        assert (diagonals[0, 2:] == NO_DIAGONAL).all()

        def reference(self, q, k, v, scaling):
            columns, diagonals = self.choose_columns(q, k, scaling)
            return (dense_reference(q, k, v, scaling, self.w.tolist(), columns, diagonals),
                    self.new_state(decode_columns=columns, diagonals=diagonals))

        with monkeypatch.context() as mp:
            mp.setattr(LayerRunner, "prefill", reference)
            assert torch.allclose(model(x).logits, logits, atol=1e-4)
        apply_plan(model, plain)
        assert not torch.allclose(model(x).logits, logits, atol=1e-4)
        apply_plan(model, plan)
        out = model.generate(x, past_key_values=PlanCache(model), max_new_tokens=4, do_sample=False)
    assert out.shape[1] == n + 4


# ---- command line: attnlab plan --slashes (a tiny model folder with a character tokenizer) ----------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from char_model_folder import save_with_char_tokenizer
    from tiny_llama import tiny_model

    folder = save_with_char_tokenizer(tiny_model(), tmp_path_factory.mktemp("tiny-llama"))
    (folder / "text.txt").write_text(("To be, or not to be, that is the question. " * 30).strip())
    return folder


def test_cli_plan_writes_the_slashes_and_refuses_bad_input(model_dir, tmp_path, cli):
    text, out = model_dir / "text.txt", tmp_path / "p.json"
    base = ("plan", "--hf", model_dir, "--calibrate", text, "--budget", "0.3", "--n", "300", "--windows", "1")
    code, stdout, err = cli(*base, "--slashes", "3", "--out", out)
    assert code == 0, err
    d = json.loads(out.read_text())
    planned = [h for row in d["heads"] for h in row if h["w"] != -1]
    assert planned and all(h["slashes"] == 3 for h in planned) and d["fraction"] <= 0.3 and d["meta"]["slashes"] == 3
    assert "slash lines" in stdout
    code, _, err = cli(*base, "--method", "attnlab-band:slashes=2", "--out", tmp_path / "m.json")
    assert code == 0, err
    assert {h["slashes"] for row in json.loads((tmp_path / "m.json").read_text())["heads"] for h in row if h["w"] != -1} == {2}
    bad = [("--slashes", "-1"), ("--slashes", "x"), ("--slashes", "1.5"), ("--method", "attnlab-band:slashes=-1"),
           ("--method", "attnlab-band:slashes=x"), ("--method", "streaming-llm", "--slashes", "2"),
           ("--method", "attnlab-band:slashes=2", "--slashes", "2")]
    for extra in bad:
        x = tmp_path / "x.json"
        code, _, err = cli(*base, *extra, "--out", x)
        assert code == 2 and err.count("\n") == 1 and "slashes" in err, (extra, err)
        assert not x.exists()
    for m in ("attnlab-retrieval:slashes=-1", "attnlab-band:slashes=x"):     # attnlab eval refuses them before the model loads
        x = tmp_path / "eval"
        code, _, err = cli("eval", "--hf", model_dir, "--task", "niah", "--lengths", "300", "--method", m,
                           "--budget", "0.1", "--calibrate", text, "--out", x)
        assert code == 2 and err.count("\n") == 1 and "slashes" in err, err
        assert not x.exists()
    d = json.loads(out.read_text())
    d["heads"][0][0]["slashes"] = "x"
    (tmp_path / "bad.json").write_text(json.dumps(d))
    code, _, err = cli("plan-run", "--hf", model_dir, "--plan", tmp_path / "bad.json", "--file", text, "--n", "300")
    assert code == 2 and err.count("\n") == 1 and "field heads.0.0.slashes: " in err, err


def test_a_sink_column_does_not_draw_the_lines():
    """A sink (key 0, most of every last query's mass) puts MInference's top lines through it — δ = −p_r, reachable
    from the last rows only; a plan head holding the sink as a column estimates its lines without it."""
    from attnlab.llm.execution.attention import last_query_rows

    n, g = 200, torch.Generator().manual_seed(3)
    q, k, v = torch.randn(1, 1, n, 16, generator=g), torch.randn(1, 1, n, 16, generator=g), torch.randn(1, 1, n, 16, generator=g)
    u = torch.nn.functional.normalize(torch.randn(16, generator=g), dim=0) * 6
    q[0, 0, -LAST_Q:] += u                                                           # every last query looks at key 0
    k[0, 0, 0] = u
    sink_lines = set(range(-(n - 1), -(n - LAST_Q) + 1))
    plain = top_slashes(slash_mass(last_query_rows(q, k, 0.3)), 4, 3)[0, 0].tolist()
    assert set(plain) <= sink_lines                                                  # the rows as they are: sink lines
    runner = LayerRunner([head(4, (0,), 0, slashes=3)], 0, 1)
    _, state = runner.prefill(q, k, v, 0.3)
    assert not set(state.diagonals[0, 0].tolist()) & sink_lines

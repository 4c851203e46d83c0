"""attnlab eval-why --layers: each layer of a method's plan restored to full attention, one at a time, and the share of
the answer token's log-probability gap it closes (attnlab.llm.eval.lost_layers) — on a tiny Llama."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from char_model_folder import tiny_llama_folder

NARROW = "streaming-llm:compression=0.9"   # a window of 21 keys of 256: the value, far back, is out of every band


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from attnlab.llm import methods as registry
    from attnlab.llm.models.loading import load_causal_lm

    folder = tiny_llama_folder(tmp_path_factory.mktemp("tiny-llama"))
    model, tok = load_causal_lm(str(folder))
    m = registry.get("streaming-llm", 0.1, compression=0.9)
    m.prepare(model, 256)
    torch.manual_seed(0)
    forced = torch.randint(0, 90, (259,)).tolist()
    return model, tok, folder, m, forced


def lost_run(model, tok, folder, out, method: str) -> None:
    """An eval run of ``method`` on one pass-key prompt, its rows rescored so that full found it and the method lost it."""
    from attnlab.llm.eval.eval_grid import run_eval
    from attnlab.llm.eval.eval_settings import EvalSettings, check_settings

    settings = EvalSettings(model=str(folder), tasks=["passkey-bare"], lengths=[256], depths=1, samples=1,
                            methods=[method], template="none", max_new=2)
    run_eval(model, tok, check_settings(settings), out)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for r in rows:
        r["score"] = 1.0 if r["method"] == "full" else 0.0
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_every_layer_restored_is_full_attention_and_none_is_the_method(tiny):
    from attnlab.llm.eval.lost_layers import row_logprob, with_full_layers

    model, _, _, m, forced = tiny
    L = len(m.plan.heads)
    for q in (255, 258):                              # the prompt's last row (the prefill), a decoding step after it
        token = forced[q + 1] if q + 1 < len(forced) else 0
        full, a_full = row_logprob(model, None, forced, q, 256, token)
        method, _ = row_logprob(model, m, forced, q, 256, token)
        every, a_every = row_logprob(model, with_full_layers(m, range(L)), forced, q, 256, token)
        none, _ = row_logprob(model, with_full_layers(m, []), forced, q, 256, token)
        assert every == pytest.approx(full, abs=1e-4) and a_every == a_full
        assert none == pytest.approx(method, abs=1e-6)
        assert abs(method - full) > 1e-3              # the narrow window changes the row: there is a gap to close


def test_restoring_a_layer_leaves_the_method_and_its_plan_as_they_were(tiny):
    from attnlab.llm.eval.lost_layers import with_full_layers

    _, _, _, m, _ = tiny
    before = [[h.w for h in row] for row in m.plan.heads]
    r = with_full_layers(m, [1])
    assert all(h.is_full for h in r.plan.heads[1]) and not any(h.is_full for h in r.plan.heads[0])
    assert [[h.w for h in row] for row in m.plan.heads] == before and r.plan is not m.plan and r.budget == m.budget


def test_the_shares_and_the_set_that_brings_the_token_back(tiny):
    """r_l = (ℓ_{M⊕l} − ℓ_M) / (ℓ_F − ℓ_M), the layers sorted by it; R: the fewest layers in that order whose restoring
    makes full's token the argmax (all layers restored are full attention, so with ``most`` = L a set is found)."""
    from attnlab.llm.eval.lost_layers import restored, row_logprob, with_full_layers

    model, _, _, m, _ = tiny
    L = len(m.plan.heads)
    q = 258
    for seed in range(20):     # a prompt where the method gives full attention's next token less than full does
        forced = torch.randint(0, 90, (259,), generator=torch.Generator().manual_seed(seed)).tolist()
        full, token = row_logprob(model, None, forced, q, 256, 0)
        full, _ = row_logprob(model, None, forced, q, 256, token)
        method, method_arg = row_logprob(model, m, forced, q, 256, token)
        if full - method > 1e-3 and method_arg != token:
            break
    else:
        pytest.fail("no prompt of 20 where the narrow window loses full attention's next token")
    seen = []
    got = restored(model, m, forced, q, 256, token, top=L, most=L, progress=lambda i, n: seen.append((i, n)))
    assert seen == [(i + 1, L) for i in range(L)]
    gap = got["logp_full"] - got["logp_method"]
    shares = [x["share"] for x in got["layers"]]
    assert len(shares) == L and shares == sorted(shares, reverse=True)
    for x in got["layers"]:
        assert x["share"] == pytest.approx((x["logp"] - got["logp_method"]) / gap, abs=1e-3 + 2e-4 / gap)  # ℓ to 4 decimals
    assert got["half"] == sum(1 for s in shares if s >= 0.5) and got["of"] == L
    R = got["together"]["layers"]
    order = [x["layer"] for x in got["layers"]]
    assert sorted(order[: len(R)]) == R
    assert row_logprob(model, with_full_layers(m, R), forced, q, 256, token)[1] == token
    if len(R) > 1:                                      # one layer fewer in that order does not
        assert row_logprob(model, with_full_layers(m, order[: len(R) - 1]), forced, q, 256, token)[1] != token


def test_a_method_without_a_plan_of_heads_is_refused_in_one_line(tiny, cli, tmp_path):
    """MInference, SnapKV, Quest and the oracle run their own runners: --layers is refused before the model loads,
    nothing written; the function refuses them too."""
    from attnlab.errors import UserError
    from attnlab.llm import methods as registry
    from attnlab.llm.eval.lost_layers import check_restorable

    model, tok, folder, _, _ = tiny
    for name in ("snapkv", "quest", "oracle-topk", "minference"):
        with pytest.raises(UserError, match="--layers"):
            check_restorable(registry.get(name, 0.1))
    check_restorable(registry.get("attnlab", 0.1))
    out = tmp_path / "run"
    lost_run(model, tok, folder, out, "snapkv")
    before = sorted(p.name for p in out.iterdir())
    r = cli("eval-why", "--out", out, "--method", "snapkv", "--layers")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "--layers" in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in out.iterdir()) == before


def test_the_command_writes_the_layers_and_says_them(tiny, cli, tmp_path):
    model, tok, folder, _, _ = tiny
    out = tmp_path / "run"
    lost_run(model, tok, folder, out, NARROW)
    r = cli("eval-why", "--out", out, "--method", NARROW, "--top", "2", "--layers", "--quiet")
    assert r.returncode == 0, r.stderr
    (row,) = [json.loads(line) for line in (out / "lost-prompts.jsonl").read_text().splitlines()]
    got = row["restored_layers"]
    assert len(got["layers"]) == 2 and got["of"] == 2
    assert "one layer restored to full attention closes L" in r.stdout and "of the gap" in r.stdout
    plain = tmp_path / "plain"
    shutil.copytree(out, plain)
    r = cli("eval-why", "--out", plain, "--method", NARROW, "--top", "2", "--quiet")   # without --layers: no such field
    (row,) = [json.loads(line) for line in (plain / "lost-prompts.jsonl").read_text().splitlines()]
    assert r.returncode == 0 and "restored_layers" not in row and "restored" not in r.stdout


def test_a_head_restored_alone_and_every_head_of_a_layer(tiny):
    """M ⊕ (l, h): only that head runs full, the plan of the method untouched; every head of a layer restored one by
    one together is the layer restored."""
    from attnlab.llm.eval.lost_layers import head_words, row_logprob, with_full_heads, with_full_layers

    model, _, _, m, forced = tiny
    H = len(m.plan.heads[1])
    r = with_full_heads(m, [(1, 0)])
    assert r.plan.heads[1][0].is_full and not any(h.is_full for h in r.plan.heads[1][1:])
    assert not any(h.is_full for h in m.plan.heads[1]) and head_words(r.plan.heads[1][0]) == "full"
    assert head_words(m.plan.heads[1][0]).startswith(f"w {m.plan.heads[1][0].w}")
    token = forced[256]
    heads, _ = row_logprob(model, with_full_heads(m, [(1, h) for h in range(H)]), forced, 255, 256, token)
    layer, _ = row_logprob(model, with_full_layers(m, [1]), forced, 255, 256, token)
    assert heads == pytest.approx(layer, abs=1e-6)


def test_the_heads_of_the_layers_that_close_most_of_the_gap(tiny):
    """restored(heads=1): each planned head of the layer of largest r_l alone, r_{l.h} as r_l, sorted."""
    from attnlab.llm.eval.lost_layers import restored, row_logprob, with_full_heads

    model, _, _, m, forced = tiny
    q, token = 255, forced[256]
    seen = []
    got = restored(model, m, forced, q, 256, token, top=10, heads=1,
                   progress=lambda i, n, what="layer": seen.append(what))
    H = got["heads"]
    top = got["layers"][0]["layer"]
    assert H["in_layers"] == [top] and H["of"] == sum(1 for h in m.plan.heads[top] if not h.is_full) > 0
    assert seen.count("head") == H["of"] and len(H["top"]) == H["of"]
    assert [x["logp"] for x in H["top"]] == sorted((x["logp"] for x in H["top"]), reverse=True)
    gap = got["logp_full"] - got["logp_method"]
    for x in H["top"]:
        assert x["layer"] == top
        alone, arg = row_logprob(model, with_full_heads(m, [(top, x["head"])]), forced, q, 256, token)
        assert x["logp"] == pytest.approx(alone, abs=1e-4) and x["argmax_is_value"] == (arg == token)
        assert x["share"] == pytest.approx((alone - got["logp_method"]) / gap, abs=1e-3 + 2e-4 / gap)
    assert H["half"] == sum(1 for x in H["top"] if x["share"] >= 0.5)
    assert "heads" not in restored(model, m, forced, q, 256, token, top=2)


def test_the_command_says_the_heads_and_refuses_a_negative_count(tiny, cli, tmp_path):
    model, tok, folder, _, _ = tiny
    out = tmp_path / "run"
    lost_run(model, tok, folder, out, NARROW)
    before = sorted(p.name for p in out.iterdir())
    r = cli("eval-why", "--out", out, "--method", NARROW, "--heads", "-1")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "--heads" in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in out.iterdir()) == before
    r = cli("eval-why", "--out", out, "--method", NARROW, "--top", "2", "--heads", "1", "--quiet")   # implies --layers
    assert r.returncode == 0, r.stderr
    (row,) = [json.loads(line) for line in (out / "lost-prompts.jsonl").read_text().splitlines()]
    assert row["restored_layers"]["heads"]["in_layers"] == [row["restored_layers"]["layers"][0]["layer"]]
    assert "one head of L" in r.stdout and "planned heads close half or more" in r.stdout

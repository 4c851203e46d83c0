"""attnlab eval-why: the prompts a method lost that full attention answered, the heads that read the needle, and what
the method's plan let them read (attnlab.llm.eval.lost_prompts, lost_reads) — on a tiny Llama's eval folder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from char_model_folder import tiny_llama_folder

NARROW, WIDE = "streaming-llm:compression=0.9", "streaming-llm:compression=0.01"   # a window of 21 keys, of 249


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """An eval folder of a tiny Llama (one-character tokenizer): pass key at 256 tokens, depths 0 and 1, full and
    streaming-llm with a narrow and a wide window.  A random model answers nothing, so the scores are set as a folder
    with lost prompts has them: full 1 (but at depth 1 for WIDE's comparison: 0), the methods 0."""
    from attnlab.llm.eval.eval_grid import run_eval
    from attnlab.llm.eval.eval_settings import EvalSettings, check_settings
    from attnlab.llm.models.loading import load_causal_lm

    folder = tiny_llama_folder(tmp_path_factory.mktemp("tiny-llama"))
    model, tok = load_causal_lm(str(folder))
    out = tmp_path_factory.mktemp("eval") / "run"
    settings = EvalSettings(model=str(folder), tasks=["passkey-bare"], lengths=[256], depths=2, samples=1, methods=[NARROW, WIDE],
                            template="none", max_new=2)
    run_eval(model, tok, check_settings(settings), out)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for r in rows:
        r["score"] = 1.0 if r["method"] == "full" else 0.0
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model, tok, out


def test_the_lost_prompts_are_those_full_answered_and_the_method_did_not():
    from attnlab.llm.eval.lost_prompts import lost_pairs

    row = {"task": "passkey", "n": 256, "sample": 0}
    rows = [{**row, "method": "full", "depth": 0.0, "score": 1.0}, {**row, "method": "full", "depth": 1.0, "score": 0.0},
            {**row, "method": "m", "depth": 0.0, "score": 0.0}, {**row, "method": "m", "depth": 1.0, "score": 0.0},
            {**row, "method": "other", "depth": 0.0, "score": 0.0}]
    pairs = lost_pairs(rows, "m")
    assert [(f["depth"], m["depth"]) for f, m in pairs] == [(0.0, 0.0)]   # depth 1: full lost it too; "other": not asked
    rows[2]["score"] = 1.0
    assert lost_pairs(rows, "m") == []


def test_the_needle_positions_hold_the_value_every_time_it_is_said(run):
    from attnlab.llm.eval.eval_settings import EvalSettings, check_settings
    from attnlab.llm.eval.lost_prompts import answer_row, value_positions
    from attnlab.llm.eval.tasks import TASKS, Haystack

    _, tok, _ = run
    smp = TASKS["passkey-bare"].make(tok, Haystack.noise(tok), 256, 0.0, 0, 0, EvalSettings("x", template="none").format())
    (value,) = smp.answers
    pos = value_positions(tok, smp, smp.answers)
    text = "".join(tok.convert_ids_to_tokens([smp.ids[j] for j in pos]))
    assert text == value * 2                                         # "The pass key is K. Remember it. K is the pass key."
    a, b = smp.spans[0]
    assert all(a <= j < b for j in pos) and len(pos) == 2 * len(value)
    forced, q, nxt = answer_row(tok, smp.ids, value)
    assert forced[: len(smp.ids)] == smp.ids and q == len(smp.ids)   # " K": the space first, row n predicts K's first digit
    assert tok.convert_ids_to_tokens([nxt]) == [value[0]] and forced[q] == tok.convert_tokens_to_ids(" ")
    wrong = value[:2] + ("0" if value[2] != "0" else "1") + value[3:]   # an answer that leaves the value at its 3rd digit
    forced, q, nxt = answer_row(tok, smp.ids, value, "parted", " " + wrong)
    assert q == len(smp.ids) + 2 and tok.convert_ids_to_tokens([nxt]) == [value[2]]   # row n + 2 predicts the 3rd digit
    assert forced == answer_row(tok, smp.ids, value, "value")[0] + [forced[-2], nxt]
    _, q_short, _ = answer_row(tok, smp.ids, value, "parted", " " + value[:4] + ".")  # a copy that stops after 4 digits
    assert q_short == len(smp.ids) + 4
    # a model that answers ": K" (Gemma-3 on the multi-key needles): the row follows full's own answer, not " " + K
    said = ": " + value + ". The special magic number"
    forced, q, nxt = answer_row(tok, smp.ids, value, "value", "", said)
    assert tok.decode(forced[len(smp.ids) :]).replace(" ", "") == ":" + value[0] and tok.decode([nxt]).strip() == value[0]
    forced_p, q_p, nxt_p = answer_row(tok, smp.ids, value, "parted", ": " + wrong + ".", said)
    assert q_p == q + 2 and tok.decode([nxt_p]) == value[2] and forced_p[: q + 2] == forced[: q + 2]
    assert answer_row(tok, smp.ids, value, "first", "", said)[1] == len(smp.ids) - 1


def test_the_verdict_follows_whether_the_band_covers_the_needle(run):
    from attnlab.llm.eval.lost_prompts import FILE, explain

    model, tok, out = run
    narrow = explain(model, tok, out, NARROW, top=3)
    wide = explain(model, tok, out, WIDE, top=3)
    assert {r["depth"] for r in narrow} == {r["depth"] for r in wide} == {0.0, 1.0}
    for r in narrow + wide:
        assert r["query_row"] == 256 and len(r["heads"]) == 3 and r["summary"].startswith(r["method"])
        masses = [h["mass"] for h in r["heads"]]
        assert masses == sorted(masses, reverse=True) and 0 < masses[0] <= 1
    for r in narrow:   # 21 recent keys + 4 sinks: the value, 200 tokens back, is evicted in every head
        for h in r["heads"]:
            assert "band w=21" in h["role"] and h["read"] == 0 and h["not_read"] == {"evicted": len(r["needle"])}
            assert h["mass_method"] == 0.0
    for r in wide:     # a band of 249 keys holds it: read, by the band, with mass under the method
        for h in r["heads"]:
            assert h["read"] == len(r["needle"]) and h["read_by"] == {"band": len(r["needle"])} and h["mass_method"] > 0
    written = [json.loads(line) for line in (out / FILE).read_text().splitlines()]
    assert sorted(r["method"] for r in written) == sorted([NARROW] * 2 + [WIDE] * 2)   # one method's rows replace only its own


def test_a_prompt_row_is_judged_by_the_prefill_support(run):
    """The row that predicts the answer's first token is a prompt row (q = n − 1) when that token holds a digit: the
    verdict is the prefill's band / columns / tail at that row."""
    from attnlab.llm import methods as registry
    from attnlab.llm.eval.lost_reads import method_row

    model, _, _ = run
    ids = torch.randint(0, 90, (256,)).tolist()
    needle = list(range(30, 40))
    for spec, read in ((dict(compression=0.9), 0), (dict(compression=0.01), 10)):
        m = registry.get("streaming-llm", 0.1, **spec)
        m.prepare(model, 256)
        heads, _, _ = method_row(model, m, ids, 255, 256, needle)
        assert {v["read"] for v in heads.values()} == {read}
        assert all(("band" in v["read_by"]) == bool(read) for v in heads.values())
        assert all(v["not_read"] == ({} if read else {"outside its band, columns, diagonals and key blocks": 10}) for v in heads.values())


def test_a_key_kept_for_another_head_of_its_kv_group_is_not_read_by_a_narrow_head(run):
    """KV head 0 of layer 0 keeps every key for its full query head 0; query head 1 (band 21) reads its band and sinks
    only: the value is in its cache, not in what it reads — at a decoding step, fused native step or not."""
    from attnlab.llm import methods as registry
    from attnlab.llm.eval.lost_reads import method_row
    from attnlab.llm.plans.plan import HeadPlan

    model, _, _ = run
    ids = torch.randint(0, 90, (257,)).tolist()
    m = registry.get("streaming-llm", 0.1, compression=0.9)
    m.prepare(model, 256)
    m.plan.heads[0][0] = HeadPlan.full()
    heads, _, _ = method_row(model, m, ids, 256, 256, list(range(30, 40)))
    assert heads[(0, 0)]["read_by"] == {"whole cache": 10} and heads[(0, 0)]["role"] == "full head"
    assert heads[(0, 1)]["read"] == 0 and heads[(0, 1)]["not_read"] == {"kept, not in its band or columns": 10}
    assert heads[(0, 2)]["not_read"] == heads[(1, 0)]["not_read"] == {"evicted": 10}


def test_row_first_measures_the_prompts_last_row_under_the_prefill(run):
    from attnlab.llm.eval.lost_prompts import explain

    model, tok, out = run
    for r in explain(model, tok, out, NARROW, top=2, row="first"):
        assert r["query_row"] == 255 and r["predicts"] == " " and "first token" not in r["summary"]
        for h in r["heads"]:   # the narrow band at row 255 does not reach the value, 200 tokens back
            assert h["read"] == 0 and h["not_read"] == {"outside its band, columns, diagonals and key blocks": len(r["needle"])}


def test_one_row_of_the_prefill_support_is_dense_supports_row():
    from attnlab.llm.eval.lost_reads import prefill_row_reads
    from attnlab.llm.execution.backend import PrefillParts, dense_support
    from attnlab.support import NO_DIAGONAL

    torch.manual_seed(1)
    B, H, n, b = 1, 4, 96, 16
    cols = torch.randint(-1, n, (B, H, 3))
    diags = torch.tensor([[[-40, NO_DIAGONAL], [-20, -33], [NO_DIAGONAL, NO_DIAGONAL], [-50, -60]]])
    blocks = torch.randint(-1, n // b, (B, H, n // b, 2))
    parts = PrefillParts(w=(4, 10, -1, 2), columns=cols, diagonals=diags, blocks=blocks, block_counts=(0, 2, 0, 1),
                         tails=(0, 0, 0, 8), kv_of=torch.tensor([0, 0, 1, 1]), block=b)
    dense = dense_support(parts, n)
    for i in range(n):
        got = torch.stack(list(prefill_row_reads(parts, i, n).values())).any(0)
        assert torch.equal(got, dense[:, :, i]), i


def test_the_command_writes_and_prints_a_line_per_prompt(run, cli):
    _, _, out = run
    r = cli("eval-why", "--out", out, "--method", NARROW, "--top", "2", "--quiet")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith(NARROW) for line in lines[:2]) and "2 prompts" in lines[-1]


def test_bad_input_is_one_line_exit_2_nothing_written(run, cli, tmp_path):
    _, _, out = run
    bare = tmp_path / "bare"
    shutil.copytree(out, bare)
    (bare / "lost-prompts.jsonl").unlink(missing_ok=True)
    rows = [json.loads(line) for line in (bare / "results.jsonl").read_text().splitlines()]
    nofull = tmp_path / "nofull"
    shutil.copytree(bare, nofull)
    (nofull / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["method"] != "full"))
    cases = [((tmp_path / "nosuch", NARROW), "no such folder"), ((bare, "snapkv"), "not in"), ((bare, "full"), "reference"),
             ((nofull, NARROW), "no full-attention rows"), ((tmp_path, NARROW), "no config.json")]
    for (folder, method), words in cases:
        r = cli("eval-why", "--out", folder, "--method", method)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("attnlab: error: ") and words in lines[0], r.stderr
        assert "Traceback" not in r.stderr and not (folder / "lost-prompts.jsonl").exists()
    for option, value in (("--top", "0"), ("--row", "last")):
        r = cli("eval-why", "--out", bare, "--method", NARROW, option, value)
        assert r.returncode == 2 and option in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_bad_folder_is_refused_before_torch_loads(tmp_path):
    probe = ("import json, sys; sys.argv = ['attnlab', 'eval-why', '--out', sys.argv[1], '--method', 'attnlab']\n"
             "from attnlab.cli import main\ntry:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
             "print(json.dumps([code, 'torch' in sys.modules]))")
    proc = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "nosuch")], capture_output=True, text=True, timeout=120)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [2, False], proc.stderr


def test_results_doc_lists_why_each_prompt_was_lost_under_the_table(run):
    from pathlib import Path

    from attnlab.llm.eval.lost_prompts import FILE, explain

    model, tok, out = run
    if not (out / FILE).exists():
        explain(model, tok, out, NARROW, top=2)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import results

    table = results.eval_table(out)
    summaries = [json.loads(line)["summary"] for line in (out / FILE).read_text().splitlines()]
    assert "**Why lost**" in table and all(f"- {s}" in table for s in summaries)
    assert table.index("**Why lost**") > table.index("| ")                       # under the table
    assert not any(name == FILE for name, _ in results.folder_tables(out)[1:])   # not a table of its own
    (out / FILE).rename(out / "aside.txt")
    try:
        assert "Why lost" not in results.eval_table(out)
    finally:
        (out / "aside.txt").rename(out / FILE)


def test_full_row_of_a_model_with_sliding_layers():
    """Gemma-3's sliding layers keep their window only: their weights come back over all q + 1 keys, 0 before the window."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from attnlab.llm.eval.lost_reads import full_row

    torch.manual_seed(0)
    W = 16
    cfg = Gemma3TextConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
                           num_key_value_heads=1, head_dim=16, sliding_window=W, max_position_embeddings=256, query_pre_attn_scalar=16)
    model = Gemma3ForCausalLM(cfg).eval()
    q = 40
    A, _, _ = full_row(model, list(range(3, 3 + q + 1)), q, q + 1)
    assert A.shape == (6, 4, q + 1)
    torch.testing.assert_close(A.sum(-1), torch.ones(6, 4))
    assert float(A[:5, :, : q + 1 - W].abs().sum()) == 0.0 and float(A[5, :, : q + 1 - W].sum()) > 0   # sliding vs global
    ids = [int(t) for t in torch.randint(3, 100, (q + 1,))]
    with torch.no_grad():
        argmax = model(input_ids=torch.tensor([ids])).logits[0].argmax(-1).tolist()   # every row's next token
    for n in (q + 1, q, q - 3):          # the answer's first token predicted at row n − 1: at q, or before it
        _, at_q, first = full_row(model, ids, q, n)
        assert at_q == argmax[q] and first == argmax[n - 1]


@pytest.mark.parametrize("K", [1, 2])
def test_an_unchosen_read_back_page_ranks_below_the_pages_read(run, K):
    """StreamingLLM's plan with K pages read back (its evicted keys go to the store): at the decoding step, a needle key
    not read is in a page whose rank by Quest's bound among the candidate pages is past K (read-back takes the top K),
    and the verdict names that rank and the page's ranks by its best q·k and by its mean key."""
    import re

    from attnlab.llm import methods as registry
    from attnlab.llm.eval.lost_reads import method_row

    model, _, _ = run
    torch.manual_seed(0)
    ids = torch.randint(0, 90, (258,)).tolist()
    m = registry.get("streaming-llm", 0.1, compression=0.9)
    m.prepare(model, 256)
    m.plan.pages = K
    heads, _, _ = method_row(model, m, ids, 257, 256, list(range(30, 40)))
    seen, read_back = 0, 0
    for v in heads.values():
        read_back += v["read_by"].get("page read back", 0)
        for why, count in v["not_read"].items():
            got = re.fullmatch(r"in the store, page not chosen \(page (\d+): (\d+)\w\w of (\d+) by Quest's bound, "
                               r"(\d+)\w\w by its best q·k, (\d+)\w\w by its mean key\)", why)
            assert got, why
            page, bound, C, score, mean = map(int, got.groups())
            assert page in (30 // 16, 39 // 16) and K < bound <= C and 1 <= score <= C == 15   # pages 0 … 14 off the band
            assert 1 <= mean <= C
            seen += count
    assert seen and read_back and seen + read_back == 10 * len(heads)


def test_ordinals():
    from attnlab.llm.eval.lost_reads import _ordinal

    assert [_ordinal(x) for x in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "111th", "112th"]


def test_an_answer_holding_another_keys_value_is_named():
    from attnlab.llm.eval.lost_prompts import other_value, summary_line

    others = ["4887885", "9917472", "9375422"]
    assert other_value(" 9917472.", others) == "9917472"
    assert other_value(" 1293643.", others) is None and other_value(" 12936", []) is None
    row = {"method": "m", "budget": 0.1, "task": "niah-multikey", "n": 64, "depth": 0.0, "sample": 1,
           "expected": ["1293642"], "answer": " 9917472.", "other_value": "9917472", "query_row": 64, "first": " ",
           "full_first": " ", "method_first": " ", "predicts": "1", "full_next": "1", "method_next": "9", "needle": [1, 2],
           "heads": [], "plan_differs": []}
    assert "answered ' 9917472.' (another key's value, 9917472);" in summary_line(row)
    assert "another key" not in summary_line({**row, "other_value": None})


def test_a_copied_distractor_names_the_heads_that_moved_to_it(tmp_path):
    """A multi-key prompt the method answers with another key's value: the row holds that value's positions and the
    heads whose mass there grows most from full attention to the method, sorted by that growth."""
    from attnlab.llm.eval.eval_grid import run_eval
    from attnlab.llm.eval.eval_settings import EvalSettings, check_settings
    from attnlab.llm.eval.lost_prompts import explain
    from attnlab.llm.models.loading import load_causal_lm

    folder = tiny_llama_folder(tmp_path / "tiny-llama")
    model, tok = load_causal_lm(str(folder))
    out = tmp_path / "run"
    settings = EvalSettings(model=str(folder), tasks=["niah-multikey"], lengths=[1024], depths=1, samples=1, methods=[WIDE],
                            template="none", max_new=2)
    run_eval(model, tok, check_settings(settings), out)
    from attnlab.llm.eval.tasks import TASKS, Haystack

    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    smp = TASKS["niah-multikey"].make(tok, Haystack.noise(tok), 1024, rows[0]["depth"], 0, 0, settings.format())
    copied = smp.others[1]
    for r in rows:   # full answers the asked value, the method another needle's
        r["score"], r["answer"] = (1.0, " " + smp.answers[0] + ".") if r["method"] == "full" else (0.0, " " + copied + ".")
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (row,) = explain(model, tok, out, WIDE, top=4, row="parted")
    assert row["other_value"] == copied
    assert tok.decode([smp.ids[j] for j in row["other_needle"]]).replace(" ", "") == copied
    assert not set(row["other_needle"]) & set(row["needle"])
    gains = [c["mass_other_method"] - c["mass_other"] for c in row["confused_heads"]]
    assert len(gains) == 4 and all(a >= b - 2e-4 for a, b in zip(gains, gains[1:]))   # sorted (the masses: to 4 decimals)
    assert all(0 <= c[k] <= 1 + 1e-6 for c in row["confused_heads"] for k in ("mass_other", "mass_other_method", "mass"))
    assert "the other key's value, under full → the method: L" in row["summary"]
    assert all("mass_other_method" in h for h in row["heads"])

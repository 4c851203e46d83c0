"""Skip-gram: the gradients of the text against autograd, training, files, neighbours, W_E init."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from attnlab.errors import UserError
from attnlab.nn.skipgram import SkipGram, full_softmax_gradient, negative_sampling_gradient
from attnlab.train.skipgram import (
    WordVectors,
    epoch_pairs,
    init_embeddings,
    neighbours,
    pca_2d,
    plot_pca,
    sentences_to_ids,
    train_skipgram,
    word_tokens,
)


def _tiny_model(V=7, d=4, seed=0):
    torch.manual_seed(seed)
    m = SkipGram(V, d).double()
    with torch.no_grad():  # random context vectors (the initial W_out is 0, too easy a point)
        m.W_in.weight.normal_()
        m.W_out.weight.normal_()
    return m


def test_full_softmax_loss_is_minus_log_p_o_given_c():
    """J(c, o) = −log P(o | c) = −u_oᵀv_c + log Σ_w exp(u_wᵀv_c)."""
    m = _tiny_model()
    c, o = 2, 5
    v_c, U = m.W_in.weight[c], m.W_out.weight
    by_hand = -(U[o] @ v_c) + torch.logsumexp(U @ v_c, 0)
    torch.testing.assert_close(m.loss_full(torch.tensor([c]), torch.tensor([o])), by_hand)


@pytest.mark.parametrize("c, o", [(0, 0), (2, 5), (6, 1)])
def test_full_softmax_gradient_closed_form_matches_autograd(c, o):
    """∂J/∂v_c = Uᵀ(ŷ − y) and ∂J/∂U = (ŷ − y) v_cᵀ, on a vocabulary of 7 words."""
    m = _tiny_model()
    m.loss_full(torch.tensor([c]), torch.tensor([o])).backward()
    g_v, g_U = full_softmax_gradient(m.W_in.weight[c].detach(), m.W_out.weight.detach(), o)
    torch.testing.assert_close(m.W_in.weight.grad[c], g_v, atol=1e-12, rtol=0)
    others = torch.arange(7) != c
    assert torch.all(m.W_in.weight.grad[others] == 0)  # only the centre vector moves
    torch.testing.assert_close(m.W_out.weight.grad, g_U, atol=1e-12, rtol=0)


def test_negative_sampling_gradient_closed_form_matches_autograd():
    """∂J/∂v_c = (σ(u_oᵀv_c) − 1)u_o + Σ_i σ(u_{n_i}ᵀv_c)u_{n_i}, ∂J/∂u_o = (σ − 1)v_c, ∂J/∂u_{n_i} = σ(u_{n_i}ᵀv_c)v_c."""
    m = _tiny_model(V=9, d=5)
    c, o, negs = 1, 4, [0, 7, 8]  # distinct words, so each row of W_out gets one term
    loss = m.loss_negative(torch.tensor([c]), torch.tensor([o]), torch.tensor([negs]))
    by_hand = -(torch.nn.functional.logsigmoid(m.W_out.weight[o] @ m.W_in.weight[c])
                + torch.nn.functional.logsigmoid(-(m.W_out.weight[negs] @ m.W_in.weight[c])).sum())
    torch.testing.assert_close(loss, by_hand)
    loss.backward()
    W_in, W_out = m.W_in.weight.detach(), m.W_out.weight.detach()
    g_v, g_o, g_n = negative_sampling_gradient(W_in[c], W_out[o], W_out[negs])
    torch.testing.assert_close(m.W_in.weight.grad[c], g_v, atol=1e-12, rtol=0)
    torch.testing.assert_close(m.W_out.weight.grad[o], g_o, atol=1e-12, rtol=0)
    torch.testing.assert_close(m.W_out.weight.grad[negs], g_n, atol=1e-12, rtol=0)


def test_word_tokens_are_lower_cased_words():
    assert word_tokens("Tom's here. Don't GO!") == ["tom's", "here", "don't", "go"]


def test_epoch_pairs_stay_inside_sentences_and_windows():
    sentences = [["a", "b", "c", "d"], ["e", "f"], ["g"]]
    words, counts, ids, sent = sentences_to_ids(sentences, min_count=1)
    rng = np.random.default_rng(0)
    pairs = epoch_pairs(ids, sent, np.ones(len(words)), window=1, rng=rng)
    assert len(pairs) == 2 * (3 + 1 + 0)  # window 1: each adjacent pair, both directions
    got = {(words[c], words[o]) for c, o in pairs}
    assert got == {("a", "b"), ("b", "a"), ("b", "c"), ("c", "b"), ("c", "d"), ("d", "c"), ("e", "f"), ("f", "e")}
    pairs = epoch_pairs(ids, sent, np.ones(len(words)), window=3, rng=rng)
    pos = {w: i for s in sentences for i, w in enumerate(s)}
    sid = {w: k for k, s in enumerate(sentences) for w in s}
    for c, o in pairs:
        assert sid[words[c]] == sid[words[o]] and 1 <= abs(pos[words[c]] - pos[words[o]]) <= 3
    never = epoch_pairs(ids, sent, np.zeros(len(words)), window=3, rng=rng)  # subsampling drops all
    assert len(never) == 0


def test_vocabulary_min_count_and_order():
    words, counts, ids, sent = sentences_to_ids([["x", "y", "x"], ["x", "z", "y"]], min_count=2)
    assert words == ["x", "y"] and counts.tolist() == [3, 2]
    assert ids.tolist() == [0, 1, 0, 0, 1] and sent.tolist() == [0, 0, 0, 1, 1]


def _topic_corpus(n=400, seed=0):
    """Two topics that never share a sentence: animals and vehicles."""
    rng = random.Random(seed)
    topics = [["cat", "dog", "pet", "fur", "paw", "tail"], ["car", "road", "wheel", "engine", "tyre", "fuel"]]
    return [[rng.choice(topics[i % 2]) for _ in range(6)] for i in range(n)]


@pytest.mark.parametrize("negative", [0, 3])
def test_training_separates_two_topics(negative):
    """Words of one topic end up nearer each other (cosine) than words of the other topic."""
    wv = train_skipgram(_topic_corpus(), dim=8, window=2, negative=negative, min_count=1, subsample=0,
                        epochs=15, batch_size=256, lr=0.05)
    assert wv.meta["loss"] == ("full softmax" if negative == 0 else "negative sampling")
    assert wv.losses[-1] < wv.losses[0]
    for w in ("cat", "car"):
        topic = {"cat", "dog", "pet", "fur", "paw", "tail"} if w == "cat" else {"car", "road", "wheel", "engine", "tyre", "fuel"}
        assert {x for x, _ in neighbours(wv, w, 5)} == topic - {w}


def test_auto_loss_full_softmax_for_small_vocabularies():
    wv = train_skipgram(_topic_corpus(40), dim=4, window=2, min_count=1, subsample=0, epochs=1)
    assert wv.meta["negative"] == 0 and wv.meta["loss"] == "full softmax"


def test_save_load_neighbours_and_errors(tmp_path):
    vectors = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0]])
    wv = WordVectors(vectors, ["king", "queen", "apple", "anti"], torch.tensor([4, 3, 2, 1]), {"dim": 2})
    path = wv.save(tmp_path / "v.safetensors")
    back = WordVectors.load(path)
    assert back.words == wv.words and torch.equal(back.vectors, vectors) and back.meta == {"dim": 2}
    near = neighbours(path, "king", k=3)
    assert [w for w, _ in near] == ["queen", "apple", "anti"]
    assert near[0][1] == pytest.approx(0.9 / math.hypot(0.9, 0.1))
    assert neighbours(path, "KING", k=1)[0][0] == "queen"  # falls back to lower case
    with pytest.raises(UserError, match="not in the vocabulary"):
        neighbours(path, "prince")
    with pytest.raises(UserError, match="no such"):
        neighbours(tmp_path / "missing.safetensors", "king")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match="junk.safetensors"):
        WordVectors.load(tmp_path / "junk.safetensors")


def test_training_bad_input():
    with pytest.raises(ValueError, match="no words"):
        train_skipgram([[], []])
    with pytest.raises(ValueError, match="min_count"):
        train_skipgram([["a", "b"]], min_count=5)
    with pytest.raises(ValueError, match="no \\(centre, context\\) pairs"):
        train_skipgram([["a"], ["b"]], min_count=1)
    with pytest.raises(ValueError, match="window"):
        train_skipgram([["a", "b"]], window=0, min_count=1)


def test_pca_and_plot(tmp_path):
    x = torch.randn(50, 6) * torch.tensor([5.0, 2.0, 0.1, 0.1, 0.1, 0.1])
    xy = pca_2d(x)
    assert xy.shape == (50, 2)
    assert xy[:, 0].var() > xy[:, 1].var() > 0  # first axis carries the most variance
    wv = WordVectors(x, [f"w{i}" for i in range(50)], torch.arange(50, 0, -1))
    png = plot_pca(wv, tmp_path / "pca.png", top=20)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(UserError, match="nope"):
        plot_pca(wv, tmp_path / "p2.png", words=["w1", "nope"])


def test_init_embeddings_copies_matching_pieces():
    """init_embeddings copies the vector of each tokenizer piece found in the file into W_E."""
    from attnlab.data.tokenizer import Tokenizer

    tok = Tokenizer.train_word(["The cat sat .", "A dog ran ."])
    wv = WordVectors(torch.randn(4, 8), ["cat", "dog", "the", "zebra"], torch.tensor([5, 4, 3, 2]))
    W_E = torch.nn.Parameter(torch.randn(tok.vocab_size, 8) * 0.1)
    before = W_E.detach().clone()
    n = init_embeddings(W_E, tok, wv)
    assert n == 3  # cat, dog, The (piece "▁The" → "the"); zebra is not in the tokenizer
    rows = [i for i in range(tok.vocab_size) if tok.id_to_piece(i).replace("▁", "").lower() in {"cat", "dog", "the"}]
    changed = (W_E.detach() != before).any(1).nonzero().flatten().tolist()
    assert sorted(changed) == sorted(rows)
    assert torch.equal(W_E.detach()[:4], before[:4])  # specials untouched
    # match_norm: one common factor, so the cosines of the copied vectors are those of the file
    cat, dog = (tok.encode(w)[0] for w in ("cat", "dog"))
    cos = torch.nn.functional.cosine_similarity
    assert cos(W_E[cat], W_E[dog], dim=0).item() == pytest.approx(cos(wv.vectors[0], wv.vectors[1], dim=0).item(), abs=1e-6)
    assert W_E.detach()[rows].norm(dim=1).mean().item() == pytest.approx(before[rows].norm(dim=1).mean().item(), rel=1e-5)
    W_small = torch.zeros(tok.vocab_size, 5)
    with pytest.raises(UserError, match="dimension 8"):
        init_embeddings(W_small, tok, wv)

"""Tokenizers (BPE, word, char): fixed special ids, exact round trip, one json file; encode_pairs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.data import Pair, ParallelCorpus, Tokenizer, encode_pairs, load_corpus
from attnlab.errors import UserError

ITALIAN = ["Perché l'albero è più alto?", "Sì, c'è un'isola là.", "Non so cos'è.",
           "Tom è già andato all'università.", "Dov'è la città più bella?", "Ho visto Maria ieri: è felice!"]
ENGLISH = ["Why is the tree taller?", "Yes, there's an island there.", "I don't know what it is.",
           "Tom has already gone to the university.", "Where's the most beautiful city?"]


@pytest.fixture(scope="module")
def texts():
    c = load_corpus("synthetic", n=2000)
    return c.sources + c.targets + ITALIAN + ENGLISH


@pytest.fixture(scope="module", params=["bpe", "word", "char"])
def tok(request, texts):
    if request.param == "bpe":
        return Tokenizer.train_bpe(texts, vocab_size=600)
    if request.param == "word":
        return Tokenizer.train_word(texts)
    return Tokenizer.train_char(texts)


def test_special_ids_and_kind(tok):
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert [tok.id_to_piece(i) for i in range(4)] == ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]
    assert tok.kind in ("bpe", "word", "char")
    ids = tok.encode("la macchina rossa")
    assert min(ids) >= 4  # no specials from encode
    assert tok.decode([tok.bos_id] + ids + [tok.eos_id, tok.pad_id]) == "la macchina rossa"


@pytest.mark.parametrize("text", ITALIAN + ENGLISH + ["il cane di Anna dorme nel giardino"])
def test_round_trip_accents_and_apostrophes(tok, text):
    assert tok.decode(tok.encode(text)) == text
    pieces = tok.pieces(text)
    assert len(pieces) == len(tok.encode(text))
    assert [tok.id_to_piece(i) for i in tok.encode(text)] == pieces


_ALPHABET = sorted(set("".join(ITALIAN + ENGLISH)) - {" "})
_BPE = Tokenizer.train_bpe(ITALIAN + ENGLISH, vocab_size=120)
_CHAR = Tokenizer.train_char(ITALIAN + ENGLISH)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet=_ALPHABET, min_size=1, max_size=12), min_size=1, max_size=8))
def test_round_trip_property(words):
    """Any single-spaced text over the training alphabet round-trips exactly (BPE and char)."""
    text = " ".join(words)
    assert _BPE.decode(_BPE.encode(text)) == text
    assert _CHAR.decode(_CHAR.encode(text)) == text
    assert _BPE.unk_id not in _BPE.encode(text)


def test_bpe_vocab_and_compression(texts):
    tok = Tokenizer.train_bpe(texts, vocab_size=500)
    assert tok.vocab_size == 500 and tok.kind == "bpe"
    ch = Tokenizer.train_char(texts)
    s = "la macchina rossa grande di Anna"
    assert len(tok.encode(s)) < len(ch.encode(s)) == len(s) + 1  # + the leading ▁


def test_word_level_vocab_size_and_unk(texts):
    w = Tokenizer.train_word(texts, vocab_size=50)
    assert w.vocab_size == 50
    assert w.unk_id in w.encode("zzzqqq")


def test_save_load_one_json(tok, tmp_path):
    path = tok.save(tmp_path)
    assert path == tmp_path / "tokenizer.json" and list(tmp_path.iterdir()) == [path]
    assert tok.save(tmp_path / "new_run") == tmp_path / "new_run" / "tokenizer.json"  # a new folder is created
    assert tok.save(tmp_path / "new_run" / "bpe.json").is_file()  # or the file itself
    json.loads(path.read_text())  # one plain json file
    back = Tokenizer.load(path)
    assert back.kind == tok.kind and back.vocab_size == tok.vocab_size
    for t in ITALIAN:
        assert back.encode(t) == tok.encode(t)
    from tokenizers import Tokenizer as HF  # a standard Hugging Face tokenizer file

    assert HF.from_file(str(path)).encode(ITALIAN[0], add_special_tokens=False).ids == tok.encode(ITALIAN[0])


def test_load_bad_files(tmp_path):
    with pytest.raises(UserError, match="no tokenizer file"):
        Tokenizer.load(tmp_path / "missing.json")
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "BPE"')  # truncated
    with pytest.raises(UserError, match="not a valid tokenizer.json"):
        Tokenizer.load(bad)


def test_encode_pairs_truncates_and_counts(texts):
    tok = Tokenizer.train_char(texts)
    corpus = ParallelCorpus([Pair("abc", "de"), Pair("abcdefgh", "xy"), Pair("ab", "abcdefghij")])
    enc, n_truncated = encode_pairs(corpus, tok, max_len=6)
    assert n_truncated == 2
    assert len(enc) == 3 and enc.max_len == 6
    src, tgt = enc[0]
    assert list(src) == tok.encode("abc") + [tok.eos_id] and list(tgt) == tok.encode("de")
    assert all(len(enc[r][0]) <= 6 and len(enc[r][1]) + 1 <= 6 for r in range(3))
    assert enc[1][0][-1] == tok.eos_id
    with pytest.raises(ValueError, match="max_len"):
        encode_pairs(corpus, tok, max_len=1)

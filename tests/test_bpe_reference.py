"""BPE as defined in the text: the worked example, agreement with HF tokenizers, bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from attnlab.data.bpe_reference import count_pairs, learn_bpe, merge_pair


def test_worked_example_abacabbcc():
    """Alphabet {a, b, c}, corpus abacabbcc → first merge ab, V1 = {a, b, c, ab},
    C1 = ab a c ab b c c, second merge aba (all pairs of C1 occur once: the first one wins)."""
    r = learn_bpe("abacabbcc", vocab_size=5)
    assert r.alphabet == ["a", "b", "c"]
    assert r.steps[0].pair == ("a", "b") and r.steps[0].count == 2 and not r.steps[0].tie
    assert set(r.vocabulary(1)) == {"a", "b", "c", "ab"}
    assert r.corpus(1) == [["ab", "a", "c", "ab", "b", "c", "c"]]
    assert r.steps[1].symbol == "aba" and r.steps[1].count == 1 and r.steps[1].tie
    assert r.corpus(2) == [["aba", "c", "ab", "b", "c", "c"]]
    assert len(r.vocabulary()) == 5


def test_count_and_merge_are_the_two_steps():
    c = [list("abab"), list("ba")]
    assert list(count_pairs(c).items()) == [(("a", "b"), 2), (("b", "a"), 2)]  # first-occurrence order
    assert merge_pair(c, ("a", "b")) == [["ab", "ab"], ["b", "a"]]
    assert merge_pair([list("aaa")], ("a", "a")) == [["aa", "a"]]  # left to right, no overlap


def test_merges_never_cross_words():
    r = learn_bpe(["ab", "ab", "ba"], vocab_size=3)
    assert r.merges == [("a", "b")]
    assert r.corpus() == [["ab"], ["ab"], ["b", "a"]]


def hf_bpe_merges(words: list[str], vocab_size: int) -> list[tuple[str, str]]:
    """Merges learnt by the Hugging Face ``tokenizers`` BPE trainer, words split on whitespace."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=[])
    tok.train_from_iterator([" ".join(words)], trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


@pytest.mark.parametrize(
    "counts, merges",
    [
        ({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}, 4),  # the classic example: ug, un, hug, pun
        ({"bbaee": 7, "dba": 18, "beb": 30, "eeb": 37, "ac": 17}, 6),
    ],
)
def test_same_merges_as_hf_tokenizers_without_ties(counts, merges):
    """On a corpus where no step has a tie, the definition and the HF trainer learn the same merges."""
    words = [w for w, n in counts.items() for _ in range(n)]
    r = learn_bpe(words, vocab_size=len(set("".join(words))) + merges)
    assert len(r.steps) == merges
    assert not any(s.tie for s in r.steps)  # the premise: no ties
    assert hf_bpe_merges(words, len(r.vocabulary())) == r.merges


def test_hug_example_merges():
    words = [w for w, n in {"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}.items() for _ in range(n)]
    r = learn_bpe(words, vocab_size=7 + 4)
    assert [s.symbol for s in r.steps] == ["ug", "un", "hug", "pun"]
    assert [s.count for s in r.steps] == [20, 16, 15, 12]


@pytest.mark.parametrize(
    "corpus, vocab_size, message",
    [
        ("", 5, "empty"),
        ([], 5, "empty"),
        (["", ""], 5, "empty"),
        ("abacabbcc", 2, "smaller than the alphabet"),
        ("abacabbcc", 100, "allows only"),  # more merges requested than the corpus allows
    ],
)
def test_bad_input_raises_value_error(corpus, vocab_size, message):
    with pytest.raises(ValueError, match=message):
        learn_bpe(corpus, vocab_size)


def test_cli_bpe_steps_prints_the_worked_example_and_one_line_errors():
    from typer.testing import CliRunner

    from attnlab.cli import app

    ok = CliRunner().invoke(app, ["bpe-steps", "abacabbcc", "--vocab-size", "5"])
    assert ok.exit_code == 0, ok.output
    assert "merge 1: a + b → ab  (count 2)  C_1 = ab a c ab b c c" in ok.stdout
    assert "merge 2: ab + a → aba" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "attnlab", "bpe-steps", "abacabbcc", "--vocab-size", "100"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.startswith("attnlab: error: vocab_size=100") and bad.stderr.count("\n") == 1

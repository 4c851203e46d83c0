"""Byte-pair encoding exactly as defined in the text (a reference, not the trainer).

    V_0 = the alphabet (the symbols of the corpus),  C_0 = the corpus as symbols
    repeat until |V_t| = vocab_size:
        count every adjacent pair (x, y) of C_t
        (x*, y*) = the most frequent pair; ties → the pair that occurs first in C_t
        V_{t+1} = V_t ∪ {x*y*},  C_{t+1} = C_t with every (x*, y*) replaced, left to
        right, by the new symbol x*y*

Worked example of the text: alphabet {a, b, c}, corpus ``abacabbcc`` →
first merge ``ab`` (2 occurrences), V_1 = {a, b, c, ab}, C_1 = ``ab a c ab b c c``;
all pairs of C_1 occur once, so the first one wins: second merge ``aba``.

The corpus may be one string (one sequence, as in the worked example) or a list
of words: pairs are then counted inside each word only, never across two words,
which is what the Hugging Face ``tokenizers`` BPE trainer does after splitting
on whitespace (it gives the same merges when no step has a tie).  The HF trainer
stays the one used for training (``attnlab.data`` tokenizers); this file is for
reading and checking the definition.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class BPEStep:
    """One merge: the pair, its count in C_t, and whether another pair had the same count."""

    pair: tuple[str, str]
    count: int
    tie: bool

    @property
    def symbol(self) -> str:
        return self.pair[0] + self.pair[1]


@dataclass
class BPEResult:
    alphabet: list[str]  # V_0, in order of first occurrence
    steps: list[BPEStep] = field(default_factory=list)  # merge t+1 made from C_t
    corpora: list[list[list[str]]] = field(default_factory=list)  # C_0, C_1, …: each a list of words of symbols

    @property
    def merges(self) -> list[tuple[str, str]]:
        return [s.pair for s in self.steps]

    def vocabulary(self, t: int | None = None) -> list[str]:
        """V_t (t = number of merges; default: all of them)."""
        t = len(self.steps) if t is None else t
        return self.alphabet + [s.symbol for s in self.steps[:t]]

    def corpus(self, t: int | None = None) -> list[list[str]]:
        """C_t as a list of words, each a list of symbols."""
        return self.corpora[len(self.steps) if t is None else t]


def count_pairs(c: list[list[str]]) -> Counter:
    """How often each adjacent pair (x, y) occurs in C (inside words).

    Counter keeps insertion order, so its keys are the pairs in order of first occurrence.
    """
    counts: Counter = Counter()
    for word in c:
        counts.update(zip(word, word[1:]))
    return counts


def merge_pair(c: list[list[str]], pair: tuple[str, str]) -> list[list[str]]:
    """Replace every occurrence of (x, y), scanning left to right, by the symbol xy."""
    x, y = pair
    out = []
    for word in c:
        merged, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and word[i] == x and word[i + 1] == y:
                merged.append(x + y)
                i += 2
            else:
                merged.append(word[i])
                i += 1
        out.append(merged)
    return out


def learn_bpe(corpus: str | Sequence[str], vocab_size: int) -> BPEResult:
    """Run the merge procedure of the text until |V| = vocab_size.

    corpus: one string (a single sequence of characters) or a list of words.
    Raises ValueError for an empty corpus, a vocab_size smaller than the alphabet,
    or a vocab_size that needs more merges than the corpus allows.
    """
    words = [corpus] if isinstance(corpus, str) else list(corpus)
    c0 = [list(w) for w in words if len(w) > 0]
    if not c0:
        raise ValueError("corpus is empty: BPE needs at least one symbol")
    alphabet = list(dict.fromkeys(s for w in c0 for s in w))  # V_0, first-occurrence order
    if vocab_size < len(alphabet):
        raise ValueError(f"vocab_size={vocab_size} is smaller than the alphabet ({len(alphabet)} symbols)")
    result = BPEResult(alphabet=alphabet, corpora=[c0])
    c = c0
    while len(alphabet) + len(result.steps) < vocab_size:
        counts = count_pairs(c)
        if not counts:
            raise ValueError(
                f"vocab_size={vocab_size} needs {vocab_size - len(alphabet)} merges, "
                f"but the corpus allows only {len(result.steps)} (every word is one symbol)"
            )
        best = max(counts.values())
        winners = [p for p, n in counts.items() if n == best]  # in order of first occurrence
        result.steps.append(BPEStep(pair=winners[0], count=best, tie=len(winners) > 1))
        c = merge_pair(c, winners[0])
        result.corpora.append(c)
    return result

"""A parallel corpus: a sequence of sentence pairs (source, target).

A pair may carry gold annotations (the synthetic grammar provides them):

- ``alignment``: links ``(i, j)`` between source word ``i`` and target word
  ``j`` (words = whitespace-separated tokens, 0-based), i.e. the non-zero
  entries of the gold alignment matrix ``A ∈ {0,1}^{m×n}``, ``A[j, i] = 1``;
- ``relations``: dependency arcs ``(head, dependent, label)`` over source word
  indices, labels from Universal Dependencies (``det``, ``amod``, ``obj``,
  ``nmod:poss``, ...).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

Alignment = tuple[tuple[int, int], ...]
Relations = tuple[tuple[int, int, str], ...]


@dataclass(frozen=True, slots=True)
class Pair:
    """One sentence pair; ``alignment``/``relations`` are ``None`` for real corpora."""

    src: str
    tgt: str
    alignment: Alignment | None = None
    relations: Relations | None = None


class ParallelCorpus(Sequence[Pair]):
    """An immutable list of :class:`Pair` with the spec and split it came from."""

    def __init__(self, pairs: Sequence[Pair], name: str = "", split: str = "train",
                 src_lang: str = "en", tgt_lang: str = "it") -> None:
        self.pairs: list[Pair] = list(pairs)
        self.name = name
        self.split = split
        self.src_lang = src_lang
        self.tgt_lang = tgt_lang

    @overload
    def __getitem__(self, i: int) -> Pair: ...
    @overload
    def __getitem__(self, i: slice) -> ParallelCorpus: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ParallelCorpus(self.pairs[i], self.name, self.split, self.src_lang, self.tgt_lang)
        return self.pairs[i]

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self) -> Iterator[Pair]:
        return iter(self.pairs)

    @property
    def sources(self) -> list[str]:
        """The source sentences, in order."""
        return [p.src for p in self.pairs]

    @property
    def targets(self) -> list[str]:
        """The target sentences, in order."""
        return [p.tgt for p in self.pairs]

    def __repr__(self) -> str:
        return (f"ParallelCorpus({self.name!r}, split={self.split!r}, "
                f"{self.src_lang}->{self.tgt_lang}, {len(self)} pairs)")

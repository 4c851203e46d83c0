"""Encode a corpus into token ids, ready for batching.

``encode_pairs(corpus, tokenizer, max_len)`` returns the pairs as two ragged
arrays (one flat ``int32`` array + offsets per side, so 347k pairs cost a few MB,
not Python lists), and the number of pairs truncated to fit the model:

- source ``x = encode(src)[: max_len − 1] + [eos]``  (``|x| ≤ max_len``)
- target ``y = encode(tgt)[: max_len − 1]``; batching makes ``[bos] + y`` and ``y + [eos]``.

Truncation is documented behaviour, not an error: the caller warns with the count.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnlab.data.corpus import ParallelCorpus
from attnlab.data.tokenizer import Tokenizer


@dataclass(frozen=True)
class Ragged:
    """Rows of different lengths: row ``r`` is ``values[offsets[r]:offsets[r+1]]``."""

    values: np.ndarray  # (total,) int32
    offsets: np.ndarray  # (N + 1,) int64

    @classmethod
    def from_lists(cls, rows: Sequence[Sequence[int]]) -> Ragged:
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(offsets[-1]))
        return cls(values, offsets)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, r: int) -> np.ndarray:
        return self.values[self.offsets[r]:self.offsets[r + 1]]


@dataclass(frozen=True)
class EncodedPairs:
    """Encoded corpus: ``src[r]`` ends with eos; ``tgt[r]`` has no specials."""

    src: Ragged
    tgt: Ragged
    max_len: int

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        return self.src[r], self.tgt[r]


def _gather(table: Ragged, rows: np.ndarray, keep: int, eos: int | None) -> tuple[Ragged, np.ndarray]:
    """Rows ``rows`` of ``table``, each cut to ``keep`` ids, then ``eos`` appended if given.

    Returns the new ragged array and a (N,) bool array: row was cut.
    """
    # rows: (N,) indices into table
    full = table.lengths[rows]
    kept = np.minimum(full, keep)
    extra = 0 if eos is None else 1
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(kept + extra, out=offsets[1:])
    values = np.full(int(offsets[-1]), -1 if eos is None else eos, dtype=np.int32)
    # position t of output row r takes table.values[table.offsets[rows[r]] + t], t < kept[r]
    row_of = np.repeat(np.arange(len(rows)), kept)
    t = np.arange(len(row_of)) - np.repeat(np.cumsum(kept) - kept, kept)  # position within the row
    values[np.repeat(offsets[:-1], kept) + t] = table.values[table.offsets[rows][row_of] + t]
    return Ragged(values, offsets), full > keep


def encode_pairs(corpus: ParallelCorpus | Sequence, tokenizer: Tokenizer, max_len: int
                 ) -> tuple[EncodedPairs, int]:
    """Encode every pair (batch encode) and truncate to ``max_len``; returns (encoded, n_truncated).

    Each distinct sentence is encoded once (Tatoeba repeats a source for each of its
    translations), with the tokenizer's parallel ``encode_batch``.
    """
    if max_len < 2:
        raise ValueError(f"max_len must be >= 2, got {max_len}")
    sources = [p.src for p in corpus]
    targets = [p.tgt for p in corpus]
    index: dict[str, int] = {}
    src_rows = np.fromiter((index.setdefault(x, len(index)) for x in sources), dtype=np.int64, count=len(sources))
    tgt_rows = np.fromiter((index.setdefault(x, len(index)) for x in targets), dtype=np.int64, count=len(targets))
    table = Ragged.from_lists(tokenizer.encode_batch(list(index)))
    src, src_cut = _gather(table, src_rows, max_len - 1, tokenizer.eos_id)
    tgt, tgt_cut = _gather(table, tgt_rows, max_len - 1, None)
    return EncodedPairs(src, tgt, max_len), int((src_cut | tgt_cut).sum())

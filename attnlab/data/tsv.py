"""Read a TSV parallel corpus: one pair per line, ``source<TAB>target``, plain or gzip.

Format rules (those of ``../shared/data/tatoeba-en-it``):

- UTF-8; each line is decoded on its own, so a bad byte is reported with its line;
- columns after the second are ignored (the Tatoeba/manythings files carry an
  attribution column there); blank lines are skipped;
- both sides are stripped of surrounding whitespace and must be non-empty.

Every problem is a :class:`~attnlab.errors.UserError` naming ``file:line``.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from attnlab.data.corpus import Pair, ParallelCorpus
from attnlab.errors import UserError


def read_lines(path: Path) -> list[str]:
    """The decoded lines of a plain or gzip text file (``.gz`` or gzip magic bytes)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a file") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:  # BadGzipFile is an OSError; a bad body is zlib.error
            raise UserError(f"{path}: corrupt gzip file ({err or type(err).__name__})") from None
    try:
        text = raw.decode("utf-8")  # fast path: the whole file at once
    except UnicodeDecodeError:
        for number, line in enumerate(raw.split(b"\n"), start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise UserError(f"{path}:{number}: not UTF-8 (byte {line[err.start]:#04x} "
                                f"at column {err.start + 1})") from None
        raise  # unreachable: some line failed above
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_tsv(path: str | Path, split: str = "train", src_lang: str = "en",
             tgt_lang: str = "it") -> ParallelCorpus:
    """Read ``path`` (``src<TAB>tgt`` per line) into a :class:`ParallelCorpus`."""
    path = Path(path)
    pairs: list[Pair] = []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < 2:
            raise UserError(f"{path}:{number}: no tab; expected 'source<TAB>target'")
        src, tgt = cols[0].strip(), cols[1].strip()
        if not src or not tgt:
            side = "source" if not src else "target"
            raise UserError(f"{path}:{number}: empty {side} side")
        pairs.append(Pair(src, tgt))
    if not pairs:
        raise UserError(f"{path}: empty corpus (no sentence pairs)")
    return ParallelCorpus(pairs, name=str(path), split=split, src_lang=src_lang, tgt_lang=tgt_lang)

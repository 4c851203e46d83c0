"""Read a Moses-style parallel corpus: two files, line ``i`` of one translates line ``i`` of the other.

Spec forms (see :mod:`attnlab.data.spec`): ``path/prefix.en,path/prefix.it``
or a prefix ``path/prefix`` with ``src_lang``/``tgt_lang`` (files
``prefix.<src_lang>`` and ``prefix.<tgt_lang>``).  Files may be gzip.
Errors name ``file:line``.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.data.corpus import Pair, ParallelCorpus
from attnlab.data.tsv import read_lines
from attnlab.errors import UserError


def read_moses(src_path: str | Path, tgt_path: str | Path, split: str = "train",
               src_lang: str = "en", tgt_lang: str = "it") -> ParallelCorpus:
    """Pair line ``i`` of ``src_path`` with line ``i`` of ``tgt_path``."""
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise UserError(f"{src_path} has {len(src_lines)} lines but {tgt_path} has "
                        f"{len(tgt_lines)}; a Moses pair needs one line per sentence in both")
    pairs: list[Pair] = []
    for number, (src, tgt) in enumerate(zip(src_lines, tgt_lines), start=1):
        src, tgt = src.strip(), tgt.strip()
        if not src and not tgt:
            continue
        if not src or not tgt:
            raise UserError(f"{src_path if not src else tgt_path}:{number}: empty line "
                            f"(its translation in the other file is not empty)")
        pairs.append(Pair(src, tgt))
    if not pairs:
        raise UserError(f"{src_path},{tgt_path}: empty corpus (no sentence pairs)")
    return ParallelCorpus(pairs, name=f"{src_path},{tgt_path}", split=split,
                          src_lang=src_lang, tgt_lang=tgt_lang)

"""``load_corpus(spec, split)``: one entry point for every corpus source.

Spec forms:

- ``synthetic`` or ``synthetic:KEY=VALUE,...`` — the built-in grammar
  (:mod:`attnlab.data.synthetic`); keys ``n`` (pairs, default 20000 for train,
  1000 for dev/test), ``seed`` (0), ``max_reorder`` (3), ``min_words``, ``max_words``.
  The splits are disjoint by source sentence: one seeded stream of pairs, each
  pair assigned by ``crc32(src) mod 100`` (0–9 test, 10–19 dev, ≥ 20 train).
- a TSV file ``src<TAB>tgt`` (plain or ``.gz``): the file is the corpus for any
  split — except a file named ``train|dev|test`` + ``.tsv[.gz]``, whose sibling
  of the requested split is used (``.../train.tsv.gz`` with ``split="test"`` →
  ``.../test.tsv.gz``);
- a directory holding ``train.tsv.gz``/``dev.tsv.gz``/``test.tsv.gz`` (or ``.tsv``):
  the file of the split;
- a Moses pair ``path/a.en,path/a.it``, or a prefix ``path/a`` with files
  ``path/a.<src_lang>`` and ``path/a.<tgt_lang>`` (same sibling rule for
  ``train|dev|test`` prefixes);
- ``hf:NAME:CONFIG`` / ``hf:DIR[:SRC-TGT]`` — Hugging Face datasets (:mod:`attnlab.data.hf`).
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

from attnlab.data.corpus import ParallelCorpus
from attnlab.data.moses import read_moses
from attnlab.data.synthetic import generate
from attnlab.data.tsv import read_tsv
from attnlab.errors import UserError

SPLITS = ("train", "dev", "test")
_SPLIT_FILE = re.compile(r"^(train|dev|test)(\.tsv(?:\.gz)?)$")
_SYNTHETIC_KEYS = {"n": int, "seed": int, "max_reorder": int, "min_words": int, "max_words": int,
                   "zipf_s": float}


def _synthetic_split(src: str) -> str:
    b = zlib.crc32(src.encode("utf-8")) % 100
    return "test" if b < 10 else "dev" if b < 20 else "train"


def load_synthetic(split: str = "train", n: int | None = None, seed: int = 0, **kw) -> ParallelCorpus:
    """``n`` pairs of ``split`` from the seeded stream of the grammar (splits disjoint by source)."""
    if n is None:
        n = 20000 if split == "train" else 1000
    if n < 1:
        raise UserError(f"synthetic corpus: n must be >= 1, got {n}")
    want, chunk, offset = [], 2000, 0
    while len(want) < n:
        # one stream, in fixed chunks of 2000 pairs with seeds derived from `seed`: a smaller n is a prefix
        for p in generate(chunk, seed=seed * 1_000_003 + offset, **kw):
            if _synthetic_split(p.src) == split:
                want.append(p)
        offset += 1
    return ParallelCorpus(want[:n], name="synthetic", split=split)


_SYNTHETIC_RANGES = {"n": (1, 10**8), "seed": (0, 2**32 - 1), "max_reorder": (0, 1000), "min_words": (1, 1000),
                     "max_words": (1, 1000), "zipf_s": (0.0, 100.0)}


def synthetic_options(spec: str) -> dict:
    """The ``KEY=VALUE`` options of a ``synthetic:...`` spec, each known, given once and in range."""
    kw: dict = {}
    _, _, opts = spec.partition(":")
    from attnlab.option_values import items, number

    for item in items(opts, f"corpus spec {spec!r}", allow_none=True):   # an empty or repeated item refused
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in _SYNTHETIC_KEYS:
            raise UserError(f"corpus spec {spec!r}: unknown option {item!r} "
                            f"(known: {', '.join(_SYNTHETIC_KEYS)})")
        if key in kw:
            raise UserError(f"corpus spec {spec!r}: {key} given twice")
        try:
            kw[key] = number(value, _SYNTHETIC_KEYS[key], key)   # ASCII digits, no '_' or spaces, finite
        except UserError:
            kind = "an integer" if _SYNTHETIC_KEYS[key] is int else "a finite number"
            raise UserError(f"corpus spec {spec!r}: {key}={value!r} is not {kind} (ASCII digits, no spaces "
                            f"or '_')") from None
        lo, hi = _SYNTHETIC_RANGES[key]
        if not lo <= kw[key] <= hi:  # NaN fails too
            raise UserError(f"corpus spec {spec!r}: {key} must be in [{lo}, {hi}], got {value.strip()}")
    if kw.get("min_words", 1) > kw.get("max_words", 1000):
        raise UserError(f"corpus spec {spec!r}: min_words must be <= max_words")
    return kw


def _tsv_for_split(path: Path, split: str) -> Path:
    """The file of ``split`` for a TSV path (file or directory), by the sibling rule."""
    if path.is_dir():
        for suffix in (".tsv.gz", ".tsv"):
            if (path / f"{split}{suffix}").is_file():
                return path / f"{split}{suffix}"
        raise UserError(f"{path}: no {split}.tsv.gz or {split}.tsv in this directory")
    m = _SPLIT_FILE.match(path.name)
    if m and m.group(1) != split:
        sibling = path.with_name(split + m.group(2))
        if not sibling.is_file():
            raise UserError(f"{path}: asked for split {split!r} but {sibling} does not exist")
        return sibling
    return path


def load_corpus(spec: str, split: str = "train", src_lang: str | None = None,
                tgt_lang: str | None = None, **kw) -> ParallelCorpus:
    """Load the ``split`` of the corpus named by ``spec`` (see the module docstring).

    ``src_lang``/``tgt_lang`` (default en/it; for ``hf:`` taken from the config)
    name the Moses file suffixes and the dataset languages; ``kw`` go to the
    synthetic grammar (``n``, ``seed``, ``max_reorder``, ...).
    """
    if split not in SPLITS:
        raise UserError(f"--split: unknown split {split!r} (choose train, dev or test)")
    spec = str(spec)
    if spec == "synthetic" or spec.startswith("synthetic:"):
        # what the spec says wins over callers' defaults
        return load_synthetic(split, **{**kw, **synthetic_options(spec)})
    if spec.startswith("hf:"):
        from attnlab.data.hf import read_hf  # imports datasets only when needed

        return read_hf(spec, split, src_lang=src_lang, tgt_lang=tgt_lang)
    src_lang, tgt_lang = src_lang or "en", tgt_lang or "it"
    if "," in spec:
        a, _, b = spec.partition(",")
        return read_moses(*(_moses_for_split(Path(x), split) for x in (a, b)), split=split,
                          src_lang=Path(a).suffix.lstrip(".") or src_lang,
                          tgt_lang=Path(b).suffix.lstrip(".") or tgt_lang)
    path = Path(spec).expanduser()
    if path.exists():
        return read_tsv(_tsv_for_split(path, split), split=split, src_lang=src_lang, tgt_lang=tgt_lang)
    src_file, tgt_file = Path(f"{path}.{src_lang}"), Path(f"{path}.{tgt_lang}")
    if src_file.is_file() or tgt_file.is_file():
        return read_moses(_moses_for_split(src_file, split), _moses_for_split(tgt_file, split),
                          split=split, src_lang=src_lang, tgt_lang=tgt_lang)
    raise UserError(f"unknown corpus spec {spec!r}: expected 'synthetic', a TSV file (.tsv/.tsv.gz), "
                    f"a directory with train/dev/test.tsv.gz, a Moses pair 'a.en,a.it' or prefix, "
                    f"or hf:NAME:CONFIG")


def _moses_for_split(path: Path, split: str) -> Path:
    """``.../train.en`` with split=test → ``.../test.en`` (if the prefix is a split name)."""
    stem = path.name.split(".")[0]
    if stem in SPLITS and stem != split:
        sibling = path.with_name(split + path.name[len(stem):])
        if not sibling.is_file():
            raise UserError(f"{path}: asked for split {split!r} but {sibling} does not exist")
        return sibling
    return path


def corpus_paths(spec: str) -> list[Path]:
    """The local files (or folder) a corpus spec reads: what no command may overwrite or delete."""
    spec = str(spec)
    if spec == "synthetic" or spec.startswith(("synthetic:", "hf:")):
        return []
    if "," in spec:
        return [Path(x).expanduser() for x in spec.split(",", 1)]
    path = Path(spec).expanduser()
    return [path] + [p for p in path.parent.glob(path.name + ".*") if p.is_file()] if str(path) else []

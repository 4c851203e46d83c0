"""Contiguous text for language models: one token stream, nanoGPT's random windows.

A text corpus is one long sequence of token ids s_0 … s_{N−1}.  A training
example is a window of n + 1 consecutive tokens at a random offset i
(nanoGPT's ``get_batch``):

    x = s[i : i + n],   y = s[i + 1 : i + n + 1],   i ~ U{0, …, N − n − 1}

so the model learns p(s_{i+t+1} | s_i … s_{i+t}) for every t < n at once.

Text specs (the same sibling rule as TSV corpora, ``attnlab.data.spec``):

- a file ``*.txt`` or ``*.txt.gz``: the corpus of any split — except a file
  named ``train|dev|test`` + ``.txt[.gz]``, whose sibling of the requested split
  is used (``.../train.txt.gz`` with ``split="dev"`` → ``.../dev.txt.gz``);
- a folder holding ``train.txt[.gz]``/``dev.txt[.gz]``/``test.txt[.gz]``: the
  file of the split; a folder of other ``.txt[.gz]`` files is the training text
  (all files, sorted by name, separated by two blank lines), and its dev/test
  text is a sibling folder named ``dev``/``test`` when the folder is named
  ``train``.

Files must be UTF-8 text: an empty file or one with NUL bytes or invalid UTF-8
is refused with a one-line error naming it.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnlab.errors import UserError
from attnlab.textfile import read_text_file

SPLITS = ("train", "dev", "test")
TEXT_SUFFIXES = (".txt.gz", ".txt")
WORK_SEPARATOR = "\n\n\n"  # between the files of a folder (the works of the Shakespeare files are so separated)


def _is_text_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TEXT_SUFFIXES)


def _split_name(path: Path) -> tuple[str, str] | None:
    """(split, suffix) of ``train.txt.gz`` and the like, else None."""
    for suffix in TEXT_SUFFIXES:
        stem = path.name[: -len(suffix)] if path.name.endswith(suffix) else None
        if stem in SPLITS:
            return stem, suffix
    return None


def is_text_spec(spec: str) -> bool:
    """Does ``spec`` name a text corpus (a .txt[.gz] file, or a folder of them)?"""
    path = Path(str(spec)).expanduser()
    if path.is_file():
        return path.name.endswith(TEXT_SUFFIXES)
    if path.is_dir():
        return any(_is_text_file(p) for p in path.iterdir())
    return str(spec).endswith(TEXT_SUFFIXES)  # a missing .txt file: still a text spec (the error names it)


def text_files(spec: str, split: str = "train") -> list[Path]:
    """The files holding ``split`` of the text corpus ``spec`` (module docstring)."""
    if split not in SPLITS:
        raise UserError(f"--split: unknown split {split!r} (choose train, dev or test)")
    path = Path(str(spec)).expanduser()
    if not path.exists():
        raise UserError(f"{path}: no such text file or folder")
    if path.is_file():
        named = _split_name(path)
        if named and named[0] != split:
            for suffix in TEXT_SUFFIXES:
                sibling = path.with_name(split + suffix)
                if sibling.is_file():
                    return [sibling]
            raise UserError(f"{path}: asked for split {split!r} but {path.with_name(split + named[1])} does not exist")
        return [path]
    for suffix in TEXT_SUFFIXES:
        if (path / f"{split}{suffix}").is_file():
            return [path / f"{split}{suffix}"]
    files = sorted(p for p in path.iterdir() if _is_text_file(p) and _split_name(p) is None)
    if path.name in SPLITS and path.name != split:
        return text_files(str(path.with_name(split)), split)
    if split == "train" or path.name == split:
        if not files:
            raise UserError(f"{path}: no .txt or .txt.gz file in this folder")
        return files
    raise UserError(f"{path}: no {split}.txt[.gz] in this folder (and the folder is not named train with a {split}/ "
                    "sibling)")


def split_label(spec: str, split: str) -> str:
    """``split``, or "whole file" for a single file not named for a split (the same text for every split)."""
    path = Path(str(spec)).expanduser()
    return "whole file" if path.is_file() and _split_name(path) is None else split


def shared_files(spec: str, split: str, train_spec: str) -> list[Path]:
    """The files of ``split`` of ``spec`` that are also training text of ``train_spec`` (a single file not
    named for a split is the text of every split: its dev or test split is its training text)."""
    try:
        train = {p.resolve() for p in text_files(train_spec, "train")}
    except UserError:  # the training text is gone or moved: nothing to compare with
        return []
    return [p for p in text_files(spec, split) if p.resolve() in train]


def read_text(spec: str, split: str = "train") -> str:
    """All the text of ``split``: its files one after another, separated by two blank lines."""
    return WORK_SEPARATOR.join(read_text_file(p) for p in text_files(spec, split))


def encode_text(tokenizer, text: str) -> tuple[Tensor, int]:
    """(ids (N,) int64, number of unknown-token ids) of ``text`` under ``tokenizer``.

    Characters a char tokenizer never saw become ``[UNK]`` (counted, never an
    error).  For the char tokenizer the ids are read from its vocabulary table
    — the same ids as ``tokenizer.encode(text)`` (NFC, a space is ``▁``, one
    ``▁`` in front; tested), 100× faster on megabytes; BPE goes through
    ``tokenizers``.
    """
    if tokenizer.kind == "char":
        vocab = tokenizer.hf.get_vocab()
        s = unicodedata.normalize("NFC", text).replace(" ", "▁")
        if not s.startswith("▁"):
            s = "▁" + s
        codes = np.frombuffer(s.encode("utf-32-le"), dtype=np.uint32)
        table = np.full(max(max((ord(c) for c in vocab if len(c) == 1), default=0), int(codes.max())) + 1,
                        tokenizer.unk_id, dtype=np.int64)
        for piece, i in vocab.items():
            if len(piece) == 1:
                table[ord(piece)] = i
        ids = torch.from_numpy(table[codes])
    else:
        ids = torch.tensor(tokenizer.encode(text), dtype=torch.int64)
    if ids.numel() < 2:
        raise UserError("text too short: fewer than 2 tokens")
    return ids, int((ids == tokenizer.unk_id).sum())


@dataclass
class TextStream:
    """A split of a text corpus as token ids, with what bits-per-character needs."""

    ids: Tensor  # (N,) int64
    chars: int  # characters of the text the ids encode
    unknown: int  # ids that are [UNK] (characters/pieces the tokenizer does not know)
    name: str = ""
    split: str = "train"

    @property
    def chars_per_token(self) -> float:
        return self.chars / self.ids.numel()

    def __len__(self) -> int:
        return self.ids.numel()


def load_text(spec: str, split: str, tokenizer) -> TextStream:
    """Read and encode ``split`` of the text corpus ``spec``."""
    text = read_text(spec, split)
    ids, unknown = encode_text(tokenizer, text)
    return TextStream(ids, len(text), unknown, str(spec), split)


def random_windows(ids: Tensor, n: int, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """nanoGPT's batch: ``batch_size`` windows of n + 1 tokens at uniform random offsets.

    Returns x = s[i : i+n] and y = s[i+1 : i+n+1], both (batch_size, n).
    """
    # ids: (N,) → x, y: (B, n)
    N = ids.numel()
    if N < n + 1:
        raise UserError(f"the text has {N} tokens, fewer than --context + 1 = {n + 1}")
    i = torch.randint(N - n, (batch_size,), generator=generator)  # (B,) offsets, i + n ≤ N − 1
    rows = i[:, None] + torch.arange(n + 1)[None, :]  # (B, n+1)
    window = ids[rows]
    return window[:, :-1], window[:, 1:]


def bits_per_char(loss_sum: float, chars: float) -> float:
    """bpc = Σ_t −ln p(s_t) / (ln 2 · characters)."""
    return loss_sum / (math.log(2) * chars)

"""Text for real LLMs: a file's text, and consecutive windows of n tokens of it (calibration, perplexity).

    windows = token_windows(tokenizer, "test.txt.gz", n, count)     # [(1, n)] × count, from token ``start``
    text = TokenText.read(tokenizer, "test.txt.gz")                 # read once: text.windows(n, count) at any n
    text = TokenText.of_text(tokenizer, text_read_already, "test.txt.gz")      # the same, a file's text read before

Window x holds tokens [start + x·n, start + (x + 1)·n) of the text with its lines joined by one newline.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import torch

from attnlab.errors import UserError
from attnlab.textfile import read_text_file

__all__ = ["TokenText", "read_text", "token_windows"]


def read_text(path: str | os.PathLike) -> str:
    """The text of ``--file`` (``attnlab.textfile``: UTF-8, plain or gzip; binary or empty refused)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--file: {path} does not exist")
    return read_text_file(path)


class TokenText(NamedTuple):
    """A text file's tokens, read and tokenised once (``read``), cut into windows of n tokens at any n (``windows``)."""

    path: str | os.PathLike
    ids: torch.Tensor          # (N,): the text with its lines joined by one newline each
    text: str                  # the file's text as read (the mix's haystack is cut from it: ``Haystack.of_text``)

    @classmethod
    def read(cls, tokenizer, path) -> "TokenText":
        return cls.of_text(tokenizer, read_text(path), path)

    @classmethod
    def of_text(cls, tokenizer, text: str, path) -> "TokenText":
        """The tokens of ``text``, the file ``path``'s text read already."""
        joined = "\n".join(text.splitlines())  # lines joined by one newline each
        return cls(path, tokenizer(joined, return_tensors="pt", add_special_tokens=False).input_ids[0], text)

    @classmethod
    def of(cls, tokenizer, text) -> "TokenText":
        """``text`` itself when it is a ``TokenText`` (read already), else the file ``text`` read now."""
        return text if isinstance(text, TokenText) else cls.read(tokenizer, text)

    def windows(self, n: int, count: int, start: int = 0) -> list[torch.Tensor]:
        """``count`` consecutive windows (1, n) from token ``start``; UserError if fewer than ``start + n`` tokens."""
        available = (len(self.ids) - start) // n
        if available < 1:
            raise UserError(f"{self.path}: {len(self.ids)} tokens, shorter than the window of {n} tokens "
                            f"(from token {start})")
        return [self.ids[start + x * n : start + (x + 1) * n][None] for x in range(min(count, available))]


def token_windows(tokenizer, path, n: int, count: int, start: int = 0) -> list[torch.Tensor]:
    """``count`` consecutive windows of n tokens of a text file (plain or gzip), from token ``start``: ``[(1, n)]``.

    UserError if the file holds fewer than ``start + n`` tokens (one window at least is needed).
    """
    return TokenText.read(tokenizer, path).windows(n, count, start)

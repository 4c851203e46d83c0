"""Text for real LLMs: a file's text, and consecutive windows of n tokens of it (calibration, perplexity).

    windows = token_windows(tokenizer, "test.txt.gz", n, count)     # [(1, n)] × count, from token ``start``

Window x holds tokens [start + x·n, start + (x + 1)·n) of the text with its lines joined by one newline.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from attnlab.errors import UserError
from attnlab.textfile import read_text_file

__all__ = ["read_text", "token_windows"]


def read_text(path: str | os.PathLike) -> str:
    """The text of ``--file`` (``attnlab.textfile``: UTF-8, plain or gzip; binary or empty refused)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--file: {path} does not exist")
    return read_text_file(path)


def token_windows(tokenizer, path, n: int, count: int, start: int = 0) -> list[torch.Tensor]:
    """``count`` consecutive windows of n tokens of a text file (plain or gzip), from token ``start``: ``[(1, n)]``.

    UserError if the file holds fewer than ``start + n`` tokens (one window at least is needed).
    """
    text = "\n".join(read_text(path).splitlines())  # lines joined by one newline each
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids[0]
    available = (len(ids) - start) // n
    if available < 1:
        raise UserError(f"{path}: {len(ids)} tokens, shorter than the window of {n} tokens (from token {start})")
    return [ids[start + x * n : start + (x + 1) * n][None] for x in range(min(count, available))]

"""One UTF-8 text file, plain or gzip: the reader of every text input (LM corpora, long LLM inputs, calibration).

Binary (NUL bytes), non-UTF-8, corrupt gzip and empty files are refused with a ``UserError`` naming the file.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from attnlab.errors import UserError

__all__ = ["read_text_file"]


def read_text_file(path: Path) -> str:
    """The UTF-8 text of one file (gzip when ``.gz``); binary or empty files are refused."""
    path = Path(path)
    try:
        data = gzip.open(path, "rb").read() if path.name.endswith(".gz") else path.read_bytes()
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:  # a bad header, a cut file, a corrupt body
        raise UserError(f"{path}: not a readable gzip file ({err})") from None
    if b"\x00" in data:
        raise UserError(f"{path}: binary file (NUL bytes), expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text (invalid byte at offset {err.start}); is it a binary file?") from None
    if not text.strip():
        raise UserError(f"{path}: empty text file")
    return text

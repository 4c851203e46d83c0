"""Atomic writes: a file exists complete or not at all (DESIGN.md principle 6).

``write_atomic(path, write)`` calls ``write(tmp)`` on a temporary file in the
same folder (same suffix, so writers that look at it — matplotlib — see the
format), then renames it over ``path``; on any error the temporary file is
removed and ``path`` is left as it was.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def write_atomic(path: str | os.PathLike, write: Callable[[str], object]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    return write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))

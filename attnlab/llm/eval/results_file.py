"""The eval folder's results file (``results.jsonl``): its format tag, the settings a later run may grow, its reader.

One JSON line per (task, length, depth, sample, method, β) row, appended as each row is done, so that a killed
run resumes where it stopped; a torn last line is cut off when read.  Each row is read through its schema
(``attnlab.schemas.result_row``: the row's kind, its fields, ranges and key); the folder's ``config.json`` through
``attnlab.schemas.eval_config``.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.schemas.eval_config import FORMAT

__all__ = ["FORMAT", "GROWS", "read_results"]

GROWS = ("tasks", "lengths", "methods", "budgets")  # settings a later run in the same folder may extend


def read_results(path: Path, option: str | None = None) -> list[dict]:
    """The complete rows of ``results.jsonl``, each checked by its schema (one UserError line naming the file, the
    line and the field otherwise); a torn last line (a killed write) is cut off the file."""
    from attnlab.schemas.result_row import ROW, read_rows

    return read_rows(path, ROW, option, cut_torn=True)

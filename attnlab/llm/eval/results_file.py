"""The eval folder's results file (``results.jsonl``): its format tag, the settings a later run may grow, its reader.

One JSON line per (task, length, depth, sample, method, β) row, appended as each row is done, so that a killed
run resumes where it stopped; a torn last line is cut off when read.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["FORMAT", "GROWS", "read_results"]

FORMAT = "attnlab-eval/1"
GROWS = ("tasks", "lengths", "methods", "budgets")  # settings a later run in the same folder may extend


def read_results(path: Path) -> list[dict]:
    """The complete lines of ``results.jsonl``; a torn last line (a killed write) is cut off the file."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    rows, good = [], 0
    for line in raw.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
        good += len(line)
    if good < len(raw):
        with open(path, "r+b") as f:
            f.truncate(good)
    return rows

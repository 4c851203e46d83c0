"""RULER's metric (``scripts/eval/synthetic/constants.py``).

    string_match_all(pred, refs) = (1/|refs|) Σ_{r ∈ refs} 1[lower(r) ⊂ lower(pred)]

the fraction of the expected strings found in the greedy answer, case-insensitive.
"""

from __future__ import annotations

__all__ = ["string_match_all"]


def string_match_all(pred: str, refs: list[str]) -> float:
    if not refs:
        raise ValueError("refs: at least one expected string")
    p = pred.lower()
    return sum(r.lower() in p for r in refs) / len(refs)

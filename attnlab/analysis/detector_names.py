"""The head detectors by name, and their thresholds: what ``attnlab heads --detectors`` accepts, without torch.

    DETECTORS           previous-token, duplicate-token, induction, sink (on repeated random tokens), retrieval
    thresholds(R)       the score above which a head is named, on inputs of R copies of a random segment
    parse_detectors     'previous-token,induction' → the names in DETECTORS order

The detectors themselves, which compute, are ``attnlab.analysis.head_detectors``; the command line checks
``--detectors`` with this file before torch loads.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["COPIES", "DETECTORS", "REPEAT_DETECTORS", "THRESHOLDS", "parse_detectors", "thresholds"]

REPEAT_DETECTORS = ("previous-token", "duplicate-token", "induction", "sink")  # on repeated random tokens
DETECTORS = REPEAT_DETECTORS + ("retrieval",)                               # retrieval: on needle prompts
THRESHOLDS: dict[str, float] = {"previous-token": 0.4, "duplicate-token": 0.4, "induction": 0.4, "sink": 0.5,
                                "retrieval": 0.1}
COPIES = ("duplicate-token", "induction")  # patterns that only the rows of the second and later copies can hold


def thresholds(R: int = 2) -> dict[str, float]:
    """Absolute thresholds on inputs of R copies: ``THRESHOLDS`` with duplicate-token and induction × (R − 1)/R."""
    return {d: round(v * (R - 1) / R, 6) if d in COPIES else v for d, v in THRESHOLDS.items()}


def parse_detectors(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """'previous-token,induction' → the names in ``DETECTORS`` order (None or 'all': every one);
    ValueError naming --detectors."""
    if text is None:
        return DETECTORS
    from attnlab.option_values import items as comma_items

    items = comma_items(text, "--detectors") if isinstance(text, str) else [s.strip() for s in text if s.strip()]
    if items == ["all"]:
        return DETECTORS
    bad = [s for s in items if s not in DETECTORS]
    if bad or not items:
        raise ValueError(f"detectors: expected a comma list of {', '.join(DETECTORS)} (or all), got {text!r}"
                         + (f" (unknown: {', '.join(map(repr, bad))})" if bad else ""))
    return tuple(d for d in DETECTORS if d in items)

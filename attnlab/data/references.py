"""Group a corpus by source sentence, for multi-reference BLEU.

Tatoeba lists several Italian translations of one English sentence as separate
lines (``Kiss Tom.`` → ``Bacia Tom.`` / ``Baciate Tom.``).  A system translates
each distinct source once and is scored against all its references:
``BLEU(hyp_s, {ref_s,1, …, ref_s,k_s})``.
"""

from __future__ import annotations

from collections.abc import Iterable

from attnlab.data.corpus import Pair


def group_references(pairs: Iterable[Pair]) -> tuple[list[str], list[list[str]]]:
    """(unique sources in first-seen order, the list of distinct references of each)."""
    refs: dict[str, list[str]] = {}
    for p in pairs:
        r = refs.setdefault(p.src, [])
        if p.tgt not in r:
            r.append(p.tgt)
    return list(refs), list(refs.values())


def reference_streams(references: list[list[str]]) -> list[list[str]]:
    """sacrebleu's layout: ``k_max`` streams, stream ``t`` = the ``t``-th reference of each
    sentence, ``None`` where a sentence has fewer (sacrebleu skips those)."""
    k_max = max((len(r) for r in references), default=0)
    return [[r[t] if t < len(r) else None for r in references] for t in range(k_max)]

"""Translation metrics with sacrebleu; perplexity.

BLEU (Papineni et al. 2002) and chrF (Popović 2015) are computed by
``sacrebleu`` on detokenised text.  When a source sentence has several
reference translations (Tatoeba lists each as its own pair), all of them are
references of that one hypothesis: sentence i gets the references R_i, and
sacrebleu's reference streams are padded with ``None`` where |R_i| is smaller
than the largest |R|.

    perplexity = exp( (1/T) Σ_t −log p(y_t | y_<t, x) )
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import sacrebleu


def reference_streams(references: Sequence[Sequence[str]]) -> list[list[str | None]]:
    """[R_1, …, R_N] (a list of references per sentence) → sacrebleu's streams."""
    width = max((len(r) for r in references), default=0)
    return [[r[k] if k < len(r) else None for r in references] for k in range(width)]


def bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    return sacrebleu.corpus_bleu(list(hypotheses), reference_streams(references)).score


def chrf(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    return sacrebleu.corpus_chrf(list(hypotheses), reference_streams(references)).score


def perplexity(total_nll: float, tokens: int) -> float:
    return math.exp(total_nll / max(tokens, 1))

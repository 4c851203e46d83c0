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

from attnlab.data.references import reference_streams


def bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    return sacrebleu.corpus_bleu(list(hypotheses), reference_streams(references)).score


def chrf(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    return sacrebleu.corpus_chrf(list(hypotheses), reference_streams(references)).score


def perplexity(total_nll: float, tokens: int) -> float:
    return math.exp(total_nll / max(tokens, 1))

"""Translate a corpus and score it: BLEU and chrF against all references.

The corpus is grouped by source sentence (Tatoeba gives several Italian
translations of one English sentence as separate pairs): each distinct source
is translated once and scored against all of its translations.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch

from attnlab.data.references import group_references
from attnlab.train.decoding import beam_search, greedy
from attnlab.train.metrics import bleu, chrf


def encode_sources(tokenizer, sources: Sequence[str], max_len: int, batch_size: int = 128):
    """Batches of source ids (B, n), padded with 0, in the order of ``sources``;
    each sentence is ``encode(src) + [eos]``, truncated to ``max_len``."""
    encoded = tokenizer.encode_batch(list(sources))
    truncated = sum(len(x) > max_len - 1 for x in encoded)
    if truncated:
        print(f"warning: {truncated} source sentence(s) longer than max_len {max_len} tokens were truncated",
              file=sys.stderr)
    ids = [x[: max_len - 1] + [tokenizer.eos_id] for x in encoded]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # similar lengths together
    batches, positions = [], []
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        n = max(len(ids[i]) for i in rows)
        src = torch.zeros(len(rows), n, dtype=torch.long)
        for r, i in enumerate(rows):
            src[r, : len(ids[i])] = torch.tensor(ids[i])
        batches.append(src)
        positions.append(rows)
    return batches, positions


def translate(model, tokenizer, sources: Sequence[str], beam: int = 1, length_penalty: float = 1.0,
              batch_size: int = 128) -> list[str]:
    """Translations of ``sources`` (same order)."""
    model.eval()
    batches, positions = encode_sources(tokenizer, sources, model.max_len,
                                        batch_size if beam <= 1 else max(1, batch_size // beam))
    out: list[str] = [""] * len(sources)
    for src, rows in zip(batches, positions):
        bos, eos = tokenizer.bos_id, tokenizer.eos_id
        hyps = greedy(model, src, bos, eos) if beam <= 1 else beam_search(model, src, bos, eos, beam, length_penalty)
        for i, h in zip(rows, hyps):
            out[i] = tokenizer.decode(h)
    return out


def evaluate_pairs(model, tokenizer, corpus, beam: int = 1, length_penalty: float = 1.0,
                   limit: int | None = None) -> dict:
    """{"bleu", "chrf", "sentences", "samples"} on a parallel corpus, multi-reference."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 (0 or None = all), got {limit}")
    sources, references = group_references(corpus)
    if limit:
        sources, references = sources[:limit], references[:limit]
    hyps = translate(model, tokenizer, sources, beam, length_penalty)
    samples = [{"source": s, "hypothesis": h, "references": list(r)}
               for s, h, r in list(zip(sources, hyps, references))[:5]]
    return {"bleu": bleu(hyps, references), "chrf": chrf(hyps, references), "sentences": len(sources),
            "samples": samples}

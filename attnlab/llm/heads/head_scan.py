"""Run any model attnlab captures on token ids and score every head with the detectors of
``attnlab.analysis.head_detectors``.

    detector_scores(model, tokenizer, n=512) -> HeadScores        # repeated random tokens
    retrieval_scores(model, tokenizer, prompts) -> (L, H)         # needle prompts (Wu et al. 2024)

``model``: a Hugging Face causal LM (its attention switched to
``attnlab.llm.heads.block_attention``: rows in blocks, never n×n, sliding windows and
GQA as the model has them), an attnlab ``DecoderLM`` (``streaming_lm``, the
same blocks from its own mechanism) or an attnlab translation model (its
decoder self-attention, captured whole with ``need_weights``; the encoder reads
the same ids).  Every block of softmax rows p (B, H, r, m) feeds
``DetectorSums.observe``: one pass of the model, all detectors and heads at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from attnlab.analysis.head_detectors import (
    REPEAT_DETECTORS,
    DetectorSums,
    named_heads,
    repeated_random_tokens,
    thresholds,
)
from attnlab.errors import UserError
from attnlab.llm.heads.needle_prompts import CopyPrompt, needle_prompts, start_ids
from attnlab.progress import SILENT, Bar, Progress

__all__ = ["HeadScores", "detector_scores", "retrieval_scan", "retrieval_scores", "model_shape", "random_vocab",
           "context_of"]


def _is_hf(model) -> bool:
    return hasattr(model, "set_attn_implementation") and hasattr(model, "config")


def _is_decoder_lm(model) -> bool:
    from attnlab.nn.lm import DecoderLM

    return isinstance(model, DecoderLM)


def model_shape(model) -> tuple[int, int]:
    """(L, H): layers and query heads of the self-attention the detectors read."""
    if _is_hf(model):
        cfg = getattr(model.config, "text_config", None) or model.config
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads)
    cfg = model.cfg
    if _is_decoder_lm(model):
        return int(cfg.layers), int(cfg.heads)
    return int(getattr(cfg, "dec_layers", 0) or cfg.layers), int(cfg.heads)


def context_of(model) -> int | None:
    """The longest input the model takes (HF: ``max_position_embeddings``; attnlab: ``max_len``)."""
    if _is_hf(model):
        from attnlab.llm.models.loading import model_max_len

        return model_max_len(model)
    return int(model.cfg.max_len)


def random_vocab(tokenizer) -> np.ndarray:
    """Ids to draw random tokens from: the vocabulary without special or added tokens (Gemma's <unusedN>...)."""
    if hasattr(tokenizer, "id_to_piece"):  # attnlab Tokenizer: ids 0..3 are pad/bos/eos/unk
        special = {tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, getattr(tokenizer, "unk_id", -1)}
        return np.array([i for i in range(tokenizer.vocab_size) if i not in special], np.int64)
    drop = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
    return np.array([i for i in range(len(tokenizer)) if i not in drop], np.int64)


def _block_rows(H: int, B: int, n: int, budget: int = 64 * 2**20) -> int:
    return int(max(16, min(1024, budget // (8 * H * B * max(n, 1)))))


def _blocks(model, B: int, n: int, block_rows: int | None) -> int:
    """Blocks of softmax rows one forward shows the detectors: L · ⌈n / r⌉ (a translation model: L whole maps)."""
    L, H = model_shape(model)
    if not (_is_hf(model) or _is_decoder_lm(model)):
        return L
    return L * -(-n // (block_rows or _block_rows(H, B, n)))


@torch.no_grad()
def _run(model, x: torch.Tensor, sums: DetectorSums, block_rows: int | None, logits_rows: int = 0,
         bar: Bar | None = None) -> torch.Tensor | None:
    """One forward of ``model`` on x (B, n), every softmax block shown to ``sums`` (and counted on ``bar``); logits of
    the last ``logits_rows`` rows."""
    B, n = x.shape
    L, H = model_shape(model)
    r = block_rows or _block_rows(H, B, n)
    model.eval()
    observe = sums.observe
    if bar is not None:
        def observe(layer, *block):
            sums.observe(layer, *block)
            bar.advance(note=f"layer {layer}")
    if _is_hf(model):
        from attnlab.llm.heads.block_attention import streaming

        with streaming(model, observe, r):
            if logits_rows:
                return model(input_ids=x, use_cache=False, logits_to_keep=logits_rows).logits  # (B, rows, V)
            model.base_model(input_ids=x, use_cache=False)
        return None
    if _is_decoder_lm(model):
        from attnlab.llm.heads.mechanism_blocks import streaming_lm

        with streaming_lm(model, observe, r):
            logits = model(x)  # (B, n, V)
        return logits[:, n - logits_rows:] if logits_rows else None
    logits, attn = model(x[:, 1:], x, need_weights=True)  # translation model: decoder self-attention
    for l, a in enumerate(attn["decoder"]):  # a: (B, H, n, n)
        observe(l, 0, 0, a)
    return logits[:, n - logits_rows:] if logits_rows else None


def _check_length(model, n: int, what: str = "--length") -> None:
    top = context_of(model)
    if top is not None and n > top:
        raise UserError(f"{what} {n}: more than the model's context of {top} tokens")


@dataclass
class HeadScores:
    """One score per (layer, head) per detector, and how they were measured."""

    scores: dict[str, np.ndarray]               # name → (L, H)
    n: int                                      # tokens per input
    meta: dict = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=thresholds)  # attnlab.analysis.head_detectors.thresholds(R)

    def named(self) -> list[dict]:
        return named_heads(self.scores, self.thresholds)


def detector_scores(model, tokenizer, n: int = 512, *, detectors: Sequence[str] = REPEAT_DETECTORS, repeats: int = 2,
                    samples: int = 4, seed: int = 0, exclude_bos: bool = False, exclude_current: bool = False,
                    block_rows: int | None = None, progress: Progress = SILENT) -> HeadScores:
    """Scores of ``detectors`` (not retrieval) on ``samples`` sequences of n tokens: start ids + a random
    segment of T = (n − |start|) // R tokens repeated R = ``repeats`` times (a remainder filled by the segment's head).
    ``progress``: a bar over the blocks of softmax rows the detectors read."""
    names = tuple(d for d in detectors if d != "retrieval")
    _check_length(model, n)
    start = start_ids(tokenizer)
    T = (n - len(start)) // repeats
    if T < 2:
        raise UserError(f"--length {n}: too short for {repeats} copies of a random segment "
                        f"(at least {len(start) + 2 * repeats} tokens)")
    ids = repeated_random_tokens(random_vocab(tokenizer), T, repeats + 1, samples, seed=seed)[:, : n - len(start)]
    ids = np.concatenate([np.tile(np.asarray(start, np.int64), (samples, 1)), ids], 1)  # (samples, n)
    x = torch.as_tensor(ids)
    L, H = model_shape(model)
    per_seq = []
    passes = range(samples) if not _is_hf(model) else [None]  # attnlab models one sequence at a time
    total = sum(_blocks(model, samples if b is None else 1, n, block_rows) for b in passes)
    with progress.bar(f"detectors on {samples} × {n} tokens", total=total, unit="blocks") as bar:
        for b in passes:
            xb = x if b is None else x[b:b + 1]
            sums = DetectorSums(names, xb, L, H, exclude_bos, exclude_current)
            _run(model, xb, sums, block_rows, bar=bar)
            per_seq.append(sums.per_sequence())
    scores = {d: np.concatenate([p[d] for p in per_seq], 0).mean(0) for d in names}
    meta = {"input": "repeated random tokens", "segment": T, "repeats": repeats, "samples": samples, "seed": seed,
            "start_tokens": len(start), "exclude_bos": exclude_bos, "exclude_current": exclude_current}
    return HeadScores(scores, n, meta, thresholds(repeats))


def retrieval_scan(model, tokenizer, prompts: Sequence, *, block_rows: int | None = None,
                   progress: Progress = SILENT) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt: retrieval score (P, L, H) and the copy accuracy (P,) = share of answer tokens the model predicts
    (argmax). ``progress``: a bar over the prompts."""
    from attnlab.llm.heads.needle_prompts import from_sample

    L, H = model_shape(model)
    scores, copied = [], []
    with progress.bar("retrieval on needle prompts", total=len(prompts), unit="prompts") as bar:
        for p in prompts:
            p = p if isinstance(p, CopyPrompt) else from_sample(p, tokenizer)  # an attnlab.llm.eval.tasks.Sample
            _check_length(model, len(p.ids), "prompt length")
            x = torch.as_tensor([p.ids], dtype=torch.long)  # (1, n)
            needle = torch.zeros_like(x, dtype=torch.bool)
            needle[0, p.needle[0]:p.needle[1]] = True
            queries = torch.zeros_like(needle)
            queries[0, p.queries[0]:p.queries[1]] = True
            sums = DetectorSums(("retrieval",), x, L, H, needle=needle, queries=queries)
            m = p.queries[1] - p.queries[0]
            logits = _run(model, x, sums, block_rows, logits_rows=x.shape[1] - p.queries[0])
            scores.append(sums.per_sequence()["retrieval"][0])
            pred = logits[0, :m].argmax(-1).tolist()
            copied.append(float(np.mean([a == b for a, b in zip(pred, p.answer)])))
            bar.advance()
    return np.stack(scores), np.array(copied)


def retrieval_scores(model, tokenizer, prompts: Sequence | None = None, *, n: int = 512, count: int = 4,
                     seed: int = 0, block_rows: int | None = None, progress: Progress = SILENT) -> np.ndarray:
    """Retrieval score per head, (L, H): mean over prompts of mean_{i∈Q} Σ_{j∈V} A_ij (``head_detectors`` docstring).

    ``prompts``: ``CopyPrompt``s or ``attnlab.llm.eval.tasks.Sample``s (``from_sample``); default:
    ``needle_prompts(tokenizer, n, count, seed=seed)``.
    """
    if prompts is None:
        _check_length(model, n)
        prompts = needle_prompts(tokenizer, n, count, seed=seed)
    return retrieval_scan(model, tokenizer, prompts, block_rows=block_rows, progress=progress)[0].mean(0)

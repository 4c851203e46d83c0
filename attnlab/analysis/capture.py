"""Capture every attention matrix a model computes on some sentences.

Two producers, one product (``AttentionMaps``):

* attnlab models (``Seq2SeqTransformer``, ``GRUAttentionSeq2Seq``,
  ``DecoderLM``), called as the contract says, in eval mode::

      logits, attn = model(src, tgt_in, need_weights=True)   # attn[kind][l]: (B, H, n_q, n_k)

  with src = encode(x) + [eos], tgt_in = [bos] + encode(y).  When no target
  y is given, the decoder reads the model's own greedy translation
  (ŷ_t = argmax p(y_t | ŷ_<t, x), until EOS or ``max_len``).  A ``DecoderLM``
  reads [bos] + encode(x) on the target side ("decoder" kind).
* Hugging Face ``transformers`` models (``attnlab.llm.heads.hf_capture.capture_hf``:
  it loads models, which ``analysis`` does not), with the checks, padding and
  cutting of this file.

Sentences are batched with padding, and every matrix is cut back to the real
tokens of its sentence: ``w[b, :, :n_q(b), :n_k(b)]``; in eval mode each row
sums to 1 over the real keys.

Long sentences: a sentence with more tokens than the model's maximum
(``max_len`` of an attnlab model, ``max_position_embeddings`` / ``n_positions``
of a HF model) is an error (``UserError`` naming the sentence) unless
``truncate=True``, which keeps the first tokens (and the final special token)
and emits a ``UserWarning``.  An empty sentence is a ``UserError``.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Sequence

import numpy as np
import torch

from attnlab.analysis.attention_maps import AttentionMaps, SentenceAttention
from attnlab.errors import UserError

__all__ = ["capture", "check_sentences", "cut_padding", "fit_length", "pad_batch"]


# ---------------------------------------------------------------------------------------------
# shared with the capture of a HF model (attnlab.llm.heads.hf_capture): checks and padding removal
# ---------------------------------------------------------------------------------------------
def check_sentences(sentences: Sequence[str], targets: Sequence[str] | None) -> list[str]:
    if isinstance(sentences, str):
        sentences = [sentences]
    sentences = list(sentences)
    if not sentences:
        raise UserError("no sentences to capture")
    for i, s in enumerate(sentences):
        if not isinstance(s, str) or not s.strip():
            raise UserError(f"sentence {i + 1} is empty: give at least one word")
    if targets is not None and len(targets) != len(sentences):
        raise ValueError(f"targets: {len(targets)} targets for {len(sentences)} sentences")
    return sentences


def fit_length(ids: list[int], max_len: int | None, i: int, truncate: bool, keep_last: bool) -> list[int]:
    """``ids`` if it fits in ``max_len``; else truncated (warning) or ``UserError``."""
    if max_len is None or len(ids) <= max_len:
        return ids
    if not truncate:
        raise UserError(
            f"sentence {i + 1} has {len(ids)} tokens, more than the model maximum of {max_len}; "
            "shorten it or truncate (truncate=True, --truncate)"
        )
    warnings.warn(f"sentence {i + 1}: {len(ids)} tokens truncated to the model maximum {max_len}", UserWarning,
                  stacklevel=3)
    return ids[: max_len - 1] + ids[-1:] if keep_last else ids[:max_len]


def pad_batch(seqs: list[list[int]], pad_id: int) -> torch.Tensor:
    # returns (B, n_max) LongTensor, padded on the right
    n = max(len(s) for s in seqs)
    out = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    for b, s in enumerate(seqs):
        out[b, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def cut_padding(attn: dict[str, Sequence[torch.Tensor]], b: int, n_src: int, n_tgt: int) -> dict[str, np.ndarray]:
    """Weights of batch item ``b`` per kind, (L, H, n_q, n_k) without padding."""
    # attn[kind][l]: (B, H, n_q, n_k)
    sizes = {"encoder": (n_src, n_src), "decoder": (n_tgt, n_tgt), "cross": (n_tgt, n_src)}
    out = {}
    for kind, layers in attn.items():
        n_q, n_k = sizes[kind]
        out[kind] = torch.stack([a[b, :, :n_q, :n_k] for a in layers]).float().cpu().numpy()
    return out


# ---------------------------------------------------------------------------------------------
# attnlab models
# ---------------------------------------------------------------------------------------------
def _is_lm(model) -> bool:
    """A decoder-only model takes one sequence: ``forward(x, need_weights)``."""
    params = [p for p in inspect.signature(model.forward).parameters if p != "need_weights"]
    return len(params) == 1


@torch.no_grad()
def _greedy(model, src: torch.Tensor, bos: int, eos: int, pad: int, max_len: int) -> list[list[int]]:
    """Greedy translation: ŷ_t = argmax_v logits(src, ŷ_<t)_v, until EOS; returns [bos] + ŷ (EOS dropped)."""
    # src: (B, n)
    B = src.shape[0]
    y = torch.full((B, 1), bos, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len - 1):
        logits = model(src, y)  # (B, t, V)
        nxt = logits[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        done |= nxt == eos
        if done.all():
            break
        y = torch.cat([y, torch.where(nxt == eos, torch.full_like(nxt, pad), nxt)[:, None]], 1)
    return [[int(t) for t in row if t != pad] for row in y]


@torch.no_grad()
def capture(
    model,
    tokenizer,
    sentences: Sequence[str],
    targets: Sequence[str] | None = None,
    *,
    truncate: bool = False,
    batch_size: int = 32,
    name: str | None = None,
) -> AttentionMaps:
    """Attention of an attnlab model (contract call ``model(src, tgt_in, need_weights=True)``).

    ``tokenizer`` follows the attnlab Tokenizer contract (``encode``,
    ``id_to_piece``, ``bos_id``, ``eos_id``, ``pad_id``).  Returns every kind
    the model gives (encoder / decoder / cross), every layer and head, cut to
    the real tokens.  The model is put in eval mode (dropout off) for the call
    and restored after.
    """
    sentences = check_sentences(sentences, targets)
    max_len = getattr(model, "max_len", None) or getattr(getattr(model, "cfg", None), "max_len", None)
    pad, bos, eos = tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id
    lm = _is_lm(model)
    src_ids, tgt_ids = [], []
    for i, s in enumerate(sentences):
        enc = tokenizer.encode(s)
        if not enc:
            raise UserError(f"sentence {i + 1} gives no tokens: {s!r}")
        if lm:
            tgt_ids.append(fit_length([bos] + enc, max_len, i, truncate, keep_last=False))
        else:
            src_ids.append(fit_length(enc + [eos], max_len, i, truncate, keep_last=True))
            if targets is not None:
                tgt_ids.append(fit_length([bos] + tokenizer.encode(targets[i]), max_len, i, truncate, keep_last=False))

    was_training = model.training
    model.eval()
    try:
        out: list[SentenceAttention] = []
        for start in range(0, len(sentences), batch_size):
            sl = slice(start, start + batch_size)
            if lm:
                x = pad_batch(tgt_ids[sl], pad)  # (B, m)
                _, attn = model(x, need_weights=True)
                batch_src, batch_tgt = [[] for _ in tgt_ids[sl]], tgt_ids[sl]
            else:
                src = pad_batch(src_ids[sl], pad)  # (B, n)
                batch_src = src_ids[sl]
                batch_tgt = tgt_ids[sl] if targets is not None else _greedy(model, src, bos, eos, pad,
                                                                            max_len or 2 * src.shape[1] + 10)
                _, attn = model(src, pad_batch(batch_tgt, pad), need_weights=True)
            for b, (s_ids, t_ids) in enumerate(zip(batch_src, batch_tgt)):
                k = start + b
                tokens = {"src": [tokenizer.id_to_piece(t) for t in s_ids],
                          "tgt": [tokenizer.id_to_piece(t) for t in t_ids]}
                special = {"src": [t in (pad, bos, eos) for t in s_ids], "tgt": [t in (pad, bos, eos) for t in t_ids]}
                if lm:
                    tokens.pop("src"), special.pop("src")
                out.append(
                    SentenceAttention(
                        text=sentences[k],
                        target=targets[k] if targets is not None else (None if lm else tokenizer.decode(t_ids)),
                        tokens=tokens,
                        special=special,
                        weights=cut_padding(attn, b, len(s_ids), len(t_ids)),
                    )
                )
    finally:
        model.train(was_training)
    cfg = getattr(model, "cfg", None)
    meta = {
        "name": name or type(model).__name__,
        "source": "attnlab",
        "class": type(model).__name__,
        "max_len": max_len,
    }
    if cfg is not None and hasattr(cfg, "attention"):
        meta["attention"] = cfg.attention
    return AttentionMaps(out, meta)

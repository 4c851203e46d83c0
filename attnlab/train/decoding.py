"""Decoding: greedy and beam search, batched over sentences.

    greedy:  y_t = argmax_y log p(y | y_<t, x)
    beam:    keep the K prefixes of highest Σ_t log p(y_t | y_<t, x); a prefix
             that emits EOS is finished and kept with its score; the answer
             maximises  Σ_t log p(y_t | y_<t, x) / |y|^α   (α = length_penalty)

With K = 1 beam search is greedy decoding (tested).  The encoder runs once;
the decoder is re-run on the whole prefix at each step (no cache: sentences
here are short, and the code stays the equation).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.nn.seq2seq import Seq2SeqTransformer


class _NextToken:
    """log p(· | prefix, x) for rows of a batch, whatever the model."""

    def __init__(self, model, src: Tensor):
        self.model, self.src = model, src
        self.memory = None
        if isinstance(model, Seq2SeqTransformer):
            self.memory, self.keep, _ = model.encode(src)

    def expand(self, rows: Tensor) -> None:
        """Reorder/repeat the encoder side to follow the rows (beams) kept."""
        self.src = self.src.index_select(0, rows)
        if self.memory is not None:
            self.memory = self.memory.index_select(0, rows)
            self.keep = None if self.keep is None else self.keep.index_select(0, rows)

    def __call__(self, prefix: Tensor) -> Tensor:
        # prefix: (N, t) → log-probabilities of the next token (N, V)
        if self.memory is not None:
            logits, _, _ = self.model.decode(prefix, self.memory, self.keep)
        else:
            logits = self.model(self.src, prefix)
        return torch.log_softmax(logits[:, -1].float(), dim=-1)


def _max_steps(model, src: Tensor, max_len: int | None) -> int:
    limit = model.max_len - 1 if hasattr(model, "max_len") else 256
    return min(limit, max_len or (2 * src.shape[1] + 10))


def _strip(rows: Tensor, eos: int) -> list[list[int]]:
    out = []
    for row in rows.tolist():
        out.append(row[: row.index(eos)] if eos in row else row)
    return out


@torch.no_grad()
def greedy(model, src: Tensor, bos: int, eos: int, max_len: int | None = None) -> list[list[int]]:
    """Greedy decoding.  src: (B, n) → B token lists (without BOS/EOS)."""
    next_token = _NextToken(model, src)
    B = src.shape[0]
    y = torch.full((B, 1), bos, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(_max_steps(model, src, max_len)):
        tok = next_token(y).argmax(-1)  # (B,)
        tok = tok.masked_fill(done, eos)
        y = torch.cat([y, tok[:, None]], dim=1)
        done |= tok == eos
        if bool(done.all()):
            break
    return _strip(y[:, 1:], eos)


@torch.no_grad()
def beam_search(
    model, src: Tensor, bos: int, eos: int, beam: int = 4, length_penalty: float = 1.0, max_len: int | None = None
) -> list[list[int]]:
    """Beam search with K = ``beam`` prefixes per sentence.  src: (B, n) → B token lists."""
    import math

    if not math.isfinite(length_penalty):
        raise ValueError(f"length_penalty must be finite, got {length_penalty}")
    B, K, dev = src.shape[0], beam, src.device
    next_token = _NextToken(model, src)
    next_token.expand(torch.arange(B, device=dev).repeat_interleave(K))  # rows b·K + k
    y = torch.full((B * K, 1), bos, dtype=torch.long, device=dev)
    score = torch.full((B, K), float("-inf"), device=dev)
    score[:, 0] = 0.0  # K identical prefixes at first: expand one
    length = torch.zeros(B, K, device=dev)
    done = torch.zeros(B, K, dtype=torch.bool, device=dev)
    for _ in range(_max_steps(model, src, max_len)):
        logp = next_token(y).view(B, K, -1)  # (B, K, V)
        V = logp.shape[-1]
        if K > V:
            raise ValueError(f"beam must be <= the vocabulary size {V}, got {beam}")
        # a finished prefix can only be continued by EOS, at no cost
        frozen = torch.full_like(logp, float("-inf"))
        frozen[..., eos] = 0.0
        logp = torch.where(done[..., None], frozen, logp)
        cand = (score[..., None] + logp).view(B, K * V)
        score, idx = cand.topk(K, dim=-1)  # (B, K)
        parent, tok = idx // V, idx % V
        rows = (torch.arange(B, device=dev)[:, None] * K + parent).view(-1)
        y = torch.cat([y.index_select(0, rows), tok.view(-1, 1)], dim=1)
        next_token.expand(rows)
        was_done = done.gather(1, parent)
        length = length.gather(1, parent) + (~was_done).float()
        done = was_done | (tok == eos)
        if bool(done.all()):
            break
    final = score / length.clamp_min(1.0) ** length_penalty
    best = final.argmax(-1)  # (B,)
    rows = torch.arange(B, device=dev) * K + best
    return _strip(y.index_select(0, rows)[:, 1:], eos)


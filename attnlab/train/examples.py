"""The training examples of a run: corpus → tokenizer → ids → batches.

Source ids are ``encode(src) + [EOS]``, decoder input ``[BOS] + encode(tgt)``
and decoder output ``encode(tgt) + [EOS]`` (truncated to the model's
``max_len``, with a counted warning).  A language model (``model = lm``) is
trained on the target side only.  Batches come from
``attnlab.data.batching``: for epoch e the list of global batches is a
function of (seed, e) alone, so every DDP rank and a resumed run see the same
order; a rank takes every world_size-th sentence of each global batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch

from attnlab.config import ModelConfig, TrainConfig
from attnlab.data import EncodedPairs, Tokenizer, collate, encode_pairs, load_corpus, make_batches, shard
from attnlab.errors import UserError

MIN_PAIRS = 50  # below this a corpus is too small to train on


@dataclass
class Examples:
    tokenizer: Tokenizer
    encoded: EncodedPairs
    max_tokens: int
    seed: int
    world_size: int = 1
    dev: object | None = None

    def __post_init__(self) -> None:
        self._batches = lru_cache(maxsize=2)(self._make_batches)

    def _make_batches(self, epoch: int) -> list:
        return make_batches(self.encoded, self.max_tokens, seed=self.seed, epoch=epoch, min_size=self.world_size)

    def batches(self, epoch: int) -> list:
        """The global batches of an epoch: arrays of example indices."""
        return self._batches(epoch)

    def collate(self, batch, rank: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This rank's (src (B, n), tgt_in (B, m), tgt_out (B, m)) of a global batch, padded with 0."""
        src, tgt_in, tgt_out = collate(self.encoded, shard(batch, rank, self.world_size, self.encoded))
        return src.to(device), tgt_in.to(device), tgt_out.to(device)


def train_tokenizer(kind: str, texts: list[str], vocab_size: int) -> Tokenizer:
    if kind == "bpe":
        return Tokenizer.train_bpe(texts, vocab_size)
    if kind == "word":
        return Tokenizer.train_word(texts, vocab_size)
    if kind == "char":
        return Tokenizer.train_char(texts)
    raise UserError(f"--tokenizer must be one of bpe, word, char; got {kind!r}")


def prepare_examples(
    model_cfg: ModelConfig, train_cfg: TrainConfig, out: Path, reuse_tokenizer: bool = False,
    log: Callable | None = None, world_size: int = 1,
) -> Examples:
    """Load the corpus, train (or reload) the tokenizer, encode, and report truncations."""
    kw = {"n": train_cfg.synthetic_pairs} if train_cfg.data.split(":")[0] == "synthetic" else {}
    corpus = load_corpus(train_cfg.data, split="train", **kw)
    if len(corpus) < MIN_PAIRS:
        raise UserError(f"--data {train_cfg.data}: {len(corpus)} training pairs; "
                        f"at least {MIN_PAIRS} are needed to train")
    try:
        dev = load_corpus(train_cfg.data, split="dev")
    except UserError:
        dev = None
    if reuse_tokenizer:
        tokenizer = Tokenizer.load(Path(out) / "tokenizer.json")
    else:
        texts = corpus.targets if model_cfg.model == "lm" else corpus.sources + corpus.targets
        tokenizer = train_tokenizer(train_cfg.tokenizer, texts, train_cfg.vocab_size)
    encoded, truncated = encode_pairs(corpus, tokenizer, model_cfg.max_len)
    if truncated and log:
        log(f"[yellow]warning:[/] {truncated} of {len(corpus)} pairs longer than max_len {model_cfg.max_len} tokens "
            "were truncated")
    if log:
        log(f"corpus {train_cfg.data}: {len(corpus):,} training pairs; tokenizer {tokenizer.kind}, "
            f"{tokenizer.vocab_size:,} tokens")
    return Examples(tokenizer, encoded, train_cfg.max_tokens, train_cfg.seed, world_size, dev)

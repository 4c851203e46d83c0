"""The training examples of a language model on contiguous text (``--data FILE.txt[.gz]``).

Same interface as ``attnlab.train.examples.Examples`` so the one training loop
runs both: ``batches(epoch)`` lists global batch numbers and ``collate`` turns
one into this rank's ``(None, x (B, n), y (B, n))`` — ``batch_size`` random
windows of ``context`` + 1 tokens (``attnlab.data.text.random_windows``) drawn
with a generator seeded by (seed, batch number) alone, so every DDP rank and
a resumed run see the same windows; rank r takes windows r, r + world_size, … .
An "epoch" is as many batches as hold the training text's tokens once.
``dev_score`` is the dev loss / bits per char / perplexity
(``attnlab.train.perplexity``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from attnlab.config import ModelConfig, TrainConfig
from attnlab.data import Tokenizer
from attnlab.data.text import TextStream, encode_text, load_text, random_windows, read_text, shared_files
from attnlab.errors import UserError
from attnlab.train.perplexity import evaluate_lm


@dataclass
class TextExamples:
    tokenizer: Tokenizer
    train: TextStream
    context: int
    batch_size: int
    seed: int
    world_size: int = 1
    dev: TextStream | None = None
    eval_tokens: int = 0

    def batches(self, epoch: int) -> range:
        """Global batch numbers of an epoch."""
        per_epoch = max(1, (len(self.train) - 1) // (self.batch_size * self.context))
        return range(epoch * per_epoch, (epoch + 1) * per_epoch)

    def collate(self, batch: int, rank: int, device: torch.device) -> tuple[None, torch.Tensor, torch.Tensor]:
        """This rank's (None, x (B/world, n), y (B/world, n)) of global batch number ``batch``."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + int(batch))
        x, y = random_windows(self.train.ids, self.context, self.batch_size, g)
        rows = slice(rank, None, self.world_size)
        return None, x[rows].to(device), y[rows].to(device)

    def dev_score(self, model, device=None, limit: int | None = None) -> dict | None:
        """Dev loss / bpc / perplexity (first ``eval_tokens`` tokens unless ``limit`` says otherwise)."""
        if self.dev is None:
            return None
        return evaluate_lm(model, self.dev, self.context, self.eval_tokens if limit is None else limit, device)


def prepare_text_examples(
    model_cfg: ModelConfig, train_cfg: TrainConfig, out: Path, reuse_tokenizer: bool = False,
    log: Callable | None = None, world_size: int = 1,
) -> TextExamples:
    """Read the text, train (or reload) the tokenizer, encode train and dev."""
    if model_cfg.model != "lm":
        raise UserError(f"--data {train_cfg.data} is plain text: train a language model on it (--model lm), "
                        f"got --model {model_cfg.model}")
    context = train_cfg.context or model_cfg.max_len
    if context > model_cfg.max_len:
        raise UserError(f"--context {context} is longer than the model's maximum --max-len {model_cfg.max_len}")
    if context < 1:
        raise UserError(f"--context must be >= 1, got {context}")
    train_cfg.context = context
    batch_size = train_cfg.batch_size or max(1, train_cfg.max_tokens // context)
    if batch_size < world_size:
        raise UserError(f"--batch-size {batch_size} is smaller than the number of processes ({world_size})")
    train_cfg.batch_size = batch_size
    text = read_text(train_cfg.data, "train")
    if reuse_tokenizer:
        tokenizer = Tokenizer.load(Path(out) / "tokenizer.json")
    elif train_cfg.tokenizer == "char":
        tokenizer = Tokenizer.train_char([text])
    elif train_cfg.tokenizer == "bpe":
        tokenizer = Tokenizer.train_bpe([text], train_cfg.vocab_size)
    else:
        raise UserError(f"--tokenizer {train_cfg.tokenizer}: text language models use char or bpe")
    ids, unknown = encode_text(tokenizer, text)
    train = TextStream(ids, len(text), unknown, train_cfg.data, "train")
    if len(train) < context + 1:
        raise UserError(f"--data {train_cfg.data}: {len(train)} tokens, fewer than --context + 1 = {context + 1}")
    try:
        has_dev = not shared_files(train_cfg.data, "dev", train_cfg.data)  # one file for every split: no dev text
    except UserError:  # no dev text next to the training text
        has_dev = False
    dev = load_text(train_cfg.data, "dev", tokenizer) if has_dev else None  # a bad dev file is an error
    if log:
        log(f"text {train_cfg.data}: {train.chars:,} characters → {len(train):,} {tokenizer.kind} tokens "
            f"(vocabulary {tokenizer.vocab_size:,}); windows of {context} tokens, batches of {batch_size}")
        if dev is None:
            log("[yellow]warning:[/] no dev text found next to it: no dev loss, no best checkpoint")
        elif dev.unknown:
            log(f"[yellow]warning:[/] dev text: {dev.unknown:,} token(s) unknown to the tokenizer, scored as [UNK]")
    return TextExamples(tokenizer, train, context, batch_size, train_cfg.seed, world_size, dev, train_cfg.eval_tokens)

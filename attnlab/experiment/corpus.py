"""The corpus of an experiment: its splits, the thesis's 16-token sentence, its lengths.

``check_corpus`` validates ``--data`` before anything is written: the
training split must hold at least ``MIN_PAIRS`` pairs (the training loop's
own minimum).  Evaluation uses the ``test`` split, else ``dev``, else (a
single-file corpus without splits) the training pairs themselves, which the
report then says.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.atomic import write_text_atomic
from attnlab.data import load_corpus
from attnlab.errors import UserError
from attnlab.experiment.settings import Settings
from attnlab.train.examples import MIN_PAIRS

__all__ = ["MIN_PAIRS", "check_corpus", "training_data", "train_corpus", "eval_corpus", "pick_sentence", "length_stats"]


def _kw(settings: Settings, split: str) -> dict:
    return {"n": settings.synthetic_pairs} if settings.synthetic and split == "train" else {}


_LOADED: dict = {}


def train_corpus(settings: Settings):
    """The training split (loaded once per process)."""
    key = (settings.data, settings.synthetic_pairs)
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = load_corpus(settings.data, "train", **_kw(settings, "train"))
    return _LOADED[key]


def training_data(settings: Settings, out: Path) -> str:
    """The corpus spec the models train on.

    The synthetic grammar's training pairs are written once to
    ``OUT/data/train.tsv`` (the run folder then holds its data) and the models
    train on that file; having no ``dev.tsv`` sibling, the training loop skips
    its own dev evaluation, which the experiment's ``evaluate`` stage does on
    the test split.  Other corpora are used as given.
    """
    if not settings.synthetic:
        return settings.data
    path = Path(out) / "data" / "train.tsv"
    if not path.is_file():
        write_text_atomic(path, "".join(f"{p.src}\t{p.tgt}\n" for p in train_corpus(settings)))
    return str(path)


def check_corpus(settings: Settings) -> int:
    """Number of training pairs; ``UserError`` when there are too few to train on."""
    corpus = train_corpus(settings)
    if len(corpus) < MIN_PAIRS:
        raise UserError(f"--data {settings.data}: {len(corpus)} training pairs; the experiment needs at least "
                        f"{MIN_PAIRS} pairs to train on")
    return len(corpus)


def eval_corpus(settings: Settings):
    """(pairs, split name): the test split, else dev, else the training pairs."""
    for split in ("test", "dev"):
        try:
            corpus = load_corpus(settings.data, split)
        except UserError:
            continue
        if len(corpus):
            return corpus, split
    return train_corpus(settings), "train"


def pick_sentence(sources: list[str], tokenizer, length: int = 16) -> tuple[int, int]:
    """(index, tokens) of the first source whose ``encode(src) + [eos]`` has ``length`` tokens
    (else the closest length, preferring the longer)."""
    n = np.array([len(tokenizer.encode(s)) + 1 for s in sources])
    gap = np.abs(n - length) * 2 + (n < length)  # ties: the longer one
    i = int(np.argmin(gap))
    return i, int(n[i])


def length_stats(sources: list[str], tokenizer) -> dict:
    """Source lengths in tokens (with EOS): median, 95th percentile, max, mean."""
    n = np.array([len(tokenizer.encode(s)) + 1 for s in sources])
    return {"median": int(np.median(n)), "p95": int(np.percentile(n, 95)), "max": int(n.max()), "mean": float(n.mean()),
            "sentences": int(len(n))}

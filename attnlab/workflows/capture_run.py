"""Capture the attention of a trained run folder: ``load_run`` (attnlab.train) + ``capture`` (attnlab.analysis)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from attnlab.analysis.attention_maps import AttentionMaps
from attnlab.analysis.capture import capture

__all__ = ["capture_run"]


def capture_run(run_dir: str | os.PathLike, sentences: Sequence[str], targets: Sequence[str] | None = None,
                **kw) -> AttentionMaps:
    """``capture`` with the model and tokenizer of a run folder (``attnlab.train.checkpoint.load_run``)."""
    from attnlab.train.checkpoint import load_run  # the training stack (torch models, checkpoints)

    run = load_run(run_dir)
    return capture(run.model, run.tokenizer, sentences, targets, name=kw.pop("name", Path(run_dir).name), **kw)

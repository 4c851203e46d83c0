"""The thesis's models: 1 encoder + 1 decoder layer with 1 head, and with 8 heads.

Conti's experiment trains the smallest translation transformers whose heads
can be looked at one by one: L = 1 encoder and 1 decoder layer, H = 1 and
H = 8 heads (d_k = d / H), and reads their attention on a 16-token sentence
(Figures 11–12).  Optionally a deeper model (2 + 2 layers, 8 heads) shows
how the picture changes with depth.  Every model is an ordinary attnlab run
folder (``OUT/models/NAME``), trained by ``attnlab.train.loop.train`` and
scored with ``attnlab.train.evaluate.evaluate_pairs`` (sacrebleu BLEU and
chrF, greedy decoding, all references of a source).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.config import ModelConfig, TrainConfig
from attnlab.experiment.settings import Settings

__all__ = ["ThesisModel", "thesis_models", "model_config", "train_config"]


@dataclass(frozen=True)
class ThesisModel:
    name: str      # folder name under OUT/models
    title: str
    layers: int
    heads: int


def thesis_models(settings: Settings) -> list[ThesisModel]:
    """The models of the experiment, in training order."""
    models = [ThesisModel("h1", "1 layer, 1 head", 1, 1), ThesisModel("h8", "1 layer, 8 heads", 1, 8)]
    if settings.deep:
        models.append(ThesisModel("deep", "2 layers, 8 heads", 2, 8))
    return models


def model_config(m: ThesisModel, settings: Settings, **overrides) -> ModelConfig:
    """The ModelConfig of ``m`` (vocab_size is filled in by training)."""
    kw = dict(model="transformer", d_model=settings.d_model, heads=m.heads, layers=m.layers, ff=settings.ff,
              dropout=settings.dropout, max_len=settings.max_len)
    kw.update(overrides)
    return ModelConfig(**kw)


def train_config(settings: Settings, seed: int = 0) -> TrainConfig:
    """The TrainConfig shared by the models (same data, tokenizer size, budget)."""
    return TrainConfig(
        data=settings.data, tokenizer="bpe", vocab_size=settings.vocab_size, max_tokens=settings.max_tokens,
        lr=settings.lr, warmup=settings.warmup, max_steps=settings.max_steps, minutes=settings.minutes,
        checkpoint_every=settings.checkpoint_every, log_every=25, synthetic_pairs=settings.synthetic_pairs, seed=seed,
        precision=settings.precision,
        dev_limit=0,  # the experiment scores every model itself (stage "evaluate")
    )

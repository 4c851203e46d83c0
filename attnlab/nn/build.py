"""``build_model(cfg)``: the model a configuration describes."""

from __future__ import annotations

from torch import nn

from attnlab.config import ModelConfig
from attnlab.nn.gru import GRUAttentionSeq2Seq
from attnlab.nn.lm import DecoderLM
from attnlab.nn.seq2seq import Seq2SeqTransformer

MODELS = {"transformer": Seq2SeqTransformer, "lm": DecoderLM, "gru": GRUAttentionSeq2Seq}


def build_model(cfg: ModelConfig) -> nn.Module:
    cfg.validate()
    return MODELS[cfg.model](cfg)

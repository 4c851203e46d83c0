"""Models whose code reads like the equations.

- ``Seq2SeqTransformer`` — encoder–decoder (Vaswani et al. 2017)
- ``DecoderLM`` — decoder-only language model
- ``GRUAttentionSeq2Seq`` — GRU encoder–decoder with Bahdanau attention
- ``MultiHeadAttention`` with a pluggable ``Mechanism`` (``attnlab.nn.mechanisms``)
"""

from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.build import build_model
from attnlab.nn.gru import GRUAttentionSeq2Seq
from attnlab.nn.lm import DecoderLM
from attnlab.nn.mask import Mask
from attnlab.nn.seq2seq import Seq2SeqTransformer

__all__ = ["MultiHeadAttention", "build_model", "GRUAttentionSeq2Seq", "DecoderLM", "Mask", "Seq2SeqTransformer"]

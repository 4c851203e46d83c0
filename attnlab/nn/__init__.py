"""Models whose code reads like the equations.

- ``Seq2SeqTransformer`` — encoder–decoder (Vaswani et al. 2017)
- ``DecoderLM`` — decoder-only language model
- ``GRUAttentionSeq2Seq`` — GRU encoder–decoder with Bahdanau attention
- ``MultiHeadAttention`` with a pluggable ``Mechanism`` (``attnlab.nn.mechanisms``)
"""

# The models load on first use (PEP 562), so that ``attnlab.nn.mechanisms.MECHANISMS`` (the registry the
# command line's help reads) does not import torch.
_EXPORTS = {"MultiHeadAttention": "attention", "build_model": "build", "GRUAttentionSeq2Seq": "gru", "DecoderLM": "lm",
            "Mask": "mask", "Seq2SeqTransformer": "seq2seq"}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["MultiHeadAttention", "build_model", "GRUAttentionSeq2Seq", "DecoderLM", "Mask", "Seq2SeqTransformer"]

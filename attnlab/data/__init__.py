"""Corpora, tokenizers and batches: everything between text files and token-id tensors.

>>> from attnlab.data import load_corpus, Tokenizer, encode_pairs, iterate_batches
>>> train = load_corpus("synthetic", split="train", n=2000)       # or a TSV path, a Moses pair, hf:NAME:CONFIG
>>> tok = Tokenizer.train_bpe(train.sources + train.targets, vocab_size=1000)
>>> enc, n_truncated = encode_pairs(train, tok, max_len=64)
>>> src, tgt_in, tgt_out = next(iterate_batches(enc, max_tokens=2048, seed=0))
"""

from attnlab.data.alignment import alignment_matrix, max_displacement, reorder_distance
from attnlab.data.batching import collate, iterate_batches, make_batches, shard
from attnlab.data.corpus import Pair, ParallelCorpus
from attnlab.data.encode import EncodedPairs, Ragged, encode_pairs
from attnlab.data.references import group_references, reference_streams
from attnlab.data.spec import SPLITS, load_corpus, load_synthetic
from attnlab.data.synthetic import generate
from attnlab.data.tokenizer import Tokenizer

__all__ = [
    "Pair", "ParallelCorpus", "load_corpus", "load_synthetic", "SPLITS", "generate",
    "Tokenizer", "encode_pairs", "EncodedPairs", "Ragged",
    "make_batches", "shard", "collate", "iterate_batches",
    "group_references", "reference_streams",
    "reorder_distance", "max_displacement", "alignment_matrix",
]

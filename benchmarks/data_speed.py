"""Time the data pipeline on the real Tatoeba train file: load, train BPE, encode, batch.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/data_speed.py [--vocab 8000]
Prints what it measured (seconds per stage) on this machine.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from attnlab.data import Tokenizer, encode_pairs, generate, load_corpus, make_batches

TATOEBA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "tatoeba-en-it" / "train.tsv.gz"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--max-len", type=int, default=128)
    args = ap.parse_args()
    rows = []

    def timed(name, fn):
        t = time.perf_counter()
        out = fn()
        rows.append((name, time.perf_counter() - t))
        return out

    corpus = timed("load train.tsv.gz", lambda: load_corpus(str(TATOEBA)))
    tok = timed(f"train BPE (vocab {args.vocab})",
                lambda: Tokenizer.train_bpe(corpus.sources + corpus.targets, args.vocab))
    enc, n_trunc = timed("encode_pairs (encode_batch, both sides)", lambda: encode_pairs(corpus, tok, args.max_len))
    batches = timed("make_batches (max_tokens 4096)", lambda: make_batches(enc, 4096, seed=0))
    timed("synthetic generate(20000)", lambda: generate(20000, seed=0))
    print(f"{len(corpus)} pairs, vocab {tok.vocab_size}, {int(enc.src.lengths.sum() + enc.tgt.lengths.sum())} "
          f"tokens, {n_trunc} truncated, {len(batches)} batches")
    for name, sec in rows:
        print(f"{name:45s} {sec:7.2f} s")


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

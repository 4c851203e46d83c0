#!/bin/bash
# session 6: session 4's 2K multi-key test rerun from scratch (fresh folder, calibration remade) on session 6's code (kernel at any stride, AVX-512 loops, last_query_mass, wide bands' prefix) —
# does a new summation order move any greedy answer?
cd "$(dirname "$0")/../.."
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey,niah --depths 5 --samples 2 --lengths 2048 --haystack noise \
  --method attnlab-retrieval,attnlab-retrieval:retrieval_heads=32:blocks=8 \
  --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --ppl ../shared/data/shakespeare/test.txt.gz --ppl-windows 1 --out runs/r6/smol-2k-mk-recheck

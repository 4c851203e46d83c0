#!/bin/bash
# the per-row top-k oracle beside the 4K multi-key test (same prompts, same folder)
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey,niah --depths 5 --samples 2 --lengths 4096 --haystack noise \
  --method attnlab-retrieval,attnlab-retrieval:retrieval_heads=32:blocks=8,oracle-topk \
  --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --out runs/r4/smol-4k-mk-test

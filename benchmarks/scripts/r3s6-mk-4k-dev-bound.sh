#!/bin/bash
# session 6: the 4K multi-key dev prompts (seed 1) — is the first needle lost to the budget? the per-row top-k oracle at
# β 0.1, and 24 retrieval heads full in both phases (tail=0), beside session 6's dev folder (benchmarks/scripts/r3s6-mk-4k-dev.sh)
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/r6/smol-4k-mk-dev}
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --depths 5 --samples 2 --lengths 4096 --haystack noise \
  --method oracle-topk,attnlab-retrieval:retrieval_heads=24:tail=0 \
  --seed 1 --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --out $OUT

#!/bin/bash
# session 6: key blocks beyond the retrieval heads — 128 / 270 heads with 4 key blocks of 16 and 16-row tails, on the 4K
# multi-key dev prompts (seed 1) of session 6's dev folder (benchmarks/scripts/r3s6-mk-4k-dev.sh)
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/r6/smol-4k-mk-dev}
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --depths 5 --samples 2 --lengths 4096 --haystack noise \
  --method attnlab-retrieval:retrieval_heads=128:blocks=4:tail=16,attnlab-retrieval:retrieval_heads=270:blocks=4:tail=16 \
  --seed 1 --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --out $OUT

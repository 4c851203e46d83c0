#!/bin/bash
# session 6: more retrieval heads and key blocks at 4K, chosen on the dev prompts (seed 1, 5 depths × 2) of session 5's
# folder (copied: full, the default and the calibration reused; methods are added to a folder, rows keyed by name);
# METHODS: other methods on the same prompts (r3s6-mk-4k-dev-bound.sh, r3s6-mk-4k-dev-allblocks.sh)
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/r6/smol-4k-mk-dev}
[ -d $OUT ] || { [ -d runs/r5/smol-4k-mk-dev ] && cp -r runs/r5/smol-4k-mk-dev $OUT; }
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --depths 5 --samples 2 --lengths 4096 --haystack noise \
  --method ${METHODS:-attnlab-retrieval,attnlab-retrieval:retrieval_heads=32:blocks=8,attnlab-retrieval:retrieval_heads=32:blocks=16,attnlab-retrieval:retrieval_heads=64:blocks=16,attnlab-retrieval:retrieval_heads=64:blocks=32} \
  --seed 1 --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --out $OUT

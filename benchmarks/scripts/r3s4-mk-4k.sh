#!/bin/bash
# multi-key and single needle at 4K (a length the dev prompts never saw), seed 0, 5 depths x 2;
# OUT, METHODS: another folder and other methods on the same prompts (r3s7-*.sh)
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey,niah --depths 5 --samples 2 --lengths 4096 --haystack noise \
  --method ${METHODS:-attnlab-retrieval,attnlab-retrieval:retrieval_heads=32:blocks=8} \
  --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --out ${OUT:-runs/r4/smol-4k-mk-test}

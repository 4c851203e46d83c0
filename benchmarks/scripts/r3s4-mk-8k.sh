#!/bin/bash
# single needle and multi-key at 8K, 5 depths x 1 sample, seed 0: the default and the key-block configuration;
# OUT, METHODS: another folder and other methods on the same prompts (r3s7-*.sh)
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah,niah-multikey --depths 5 --samples 1 --lengths 8192 --haystack noise \
  --method ${METHODS:-attnlab-retrieval,attnlab-retrieval:retrieval_heads=32:blocks=8} \
  --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --out ${OUT:-runs/r4/smol-8k-mk-test}

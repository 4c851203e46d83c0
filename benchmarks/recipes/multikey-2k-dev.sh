#!/bin/bash
# Choosing the retrieval heads k and the key blocks K of attnlab-retrieval on dev prompts (seed 1: other keys, values and
# distractors than the test prompts of multikey-2k.sh): multi-key needles at 2,048 tokens, 5 depths × 2, β = 10 %.
# attnlab-key-blocks (k = 32, K = 8) is the choice these rows made.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
M=attnlab-retrieval,attnlab-retrieval:retrieval_heads=32,attnlab-retrieval:blocks=4,attnlab-retrieval:blocks=8
M=$M,attnlab-retrieval:retrieval_heads=32:blocks=4,attnlab-key-blocks,attnlab-retrieval:retrieval_heads=48:blocks=4
M=$M,attnlab-retrieval:retrieval_heads=64:blocks=4,attnlab-retrieval:retrieval_heads=64:blocks=8,attnlab-retrieval:retrieval_heads=32:blocks=16
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --lengths 2048 --depths 5 --samples 2 --haystack noise \
  --method $M --budget 0.1 --seed 1 --calibrate $S/train.txt.gz --calibrate-windows 1 --out ${RUNS:-runs}/multikey-2k-dev

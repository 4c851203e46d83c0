#!/bin/bash
# dev: choose retrieval_heads k and blocks K on other prompts (--seed 1), multi-key 2K, 5 depths x 2 samples
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --depths 5 --samples 2 --lengths 2048 --haystack noise \
  --method attnlab-retrieval,attnlab-retrieval:retrieval_heads=32,attnlab-retrieval:blocks=4,attnlab-retrieval:blocks=8,attnlab-retrieval:retrieval_heads=32:blocks=4,attnlab-retrieval:retrieval_heads=32:blocks=8,attnlab-retrieval:retrieval_heads=48:blocks=4,attnlab-retrieval:retrieval_heads=64:blocks=4,attnlab-retrieval:retrieval_heads=64:blocks=8,attnlab-retrieval:retrieval_heads=32:blocks=16 \
  --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --seed 1 --out runs/r4/smol-2k-mk-dev

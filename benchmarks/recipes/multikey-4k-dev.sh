#!/bin/bash
# Choosing attnlab's configuration at 4,096 tokens on dev prompts (seed 1), multi-key needles, 5 depths × 2, β = 10 %:
# more retrieval heads and key blocks, key blocks in every other head (other_blocks), the voted decoding cache and the
# read-back of evicted pages (the presets attnlab-other-blocks and attnlab), and the per-row top-k oracle as the bound.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
M=attnlab-retrieval,attnlab-key-blocks,attnlab-retrieval:retrieval_heads=32:blocks=16,attnlab-retrieval:retrieval_heads=64:blocks=16
M=$M,attnlab-retrieval:retrieval_heads=64:blocks=32,attnlab-other-blocks,attnlab,oracle-topk
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --lengths 4096 --depths 5 --samples 2 --haystack noise \
  --method $M --budget 0.1 --seed 1 --calibrate $S/train.txt.gz --calibrate-windows 1 --out ${RUNS:-runs}/multikey-4k-dev

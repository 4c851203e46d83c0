#!/bin/bash
# Multi-key needles at 4,096 tokens, a length the dev prompts of multikey-2k-dev.sh never saw: SmolLM2-135M, noise
# haystack, 5 depths × 4 samples (seed 0); full, attnlab (the default), attnlab-retrieval, attnlab-key-blocks,
# attnlab-other-blocks and the per-row top-k oracle (the bound of any sparse support at this β), all at β = 10 %.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --lengths 4096 --depths 5 --samples 4 --haystack noise \
  --method attnlab,attnlab-retrieval,attnlab-key-blocks,attnlab-other-blocks,oracle-topk --budget 0.1 \
  --calibrate $S/train.txt.gz --calibrate-windows 1 --out ${RUNS:-runs}/multikey-4k

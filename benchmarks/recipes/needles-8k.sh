#!/bin/bash
# Single needle and multi-key needles at 8,192 tokens: SmolLM2-135M, noise haystack, 5 depths × 1 sample (seed 0);
# full, attnlab (the default), attnlab-retrieval, attnlab-key-blocks, attnlab-other-blocks and StreamingLLM at β = 10 %.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah,niah-multikey --lengths 8192 --depths 5 --samples 1 --haystack noise \
  --method attnlab,attnlab-retrieval,attnlab-key-blocks,attnlab-other-blocks,streaming-llm --budget 0.1 \
  --calibrate $S/train.txt.gz --calibrate-windows 1 --out ${RUNS:-runs}/needles-8k

#!/bin/bash
# Single needle on Gemma-3-270M at 8,192 and 16,384 tokens: noise haystack, 3 depths × 1 sample; full (the model's own
# sliding and global layers), attnlab-retrieval and StreamingLLM at β = 10 %, perplexity on one Shakespeare test window.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf gemma3-270m --task niah --lengths 8192,16384 --depths 3 --samples 1 --haystack noise \
  --method attnlab-retrieval,streaming-llm --budget 0.1 \
  --calibrate $S/train.txt.gz --calibrate-windows 1 --ppl $S/test.txt.gz --ppl-windows 1 --out ${RUNS:-runs}/gemma-niah-16k

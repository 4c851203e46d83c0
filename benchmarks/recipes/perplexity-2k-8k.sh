#!/bin/bash
# Perplexity at 2,048, 4,096 and 8,192 tokens in the band plan's setting (3 calibration windows of Shakespeare's train
# text, 2 test windows): SmolLM2-135M, full, attnlab (the default), attnlab-band (the band + columns plan),
# attnlab-retrieval, attnlab-key-blocks, attnlab-other-blocks and StreamingLLM at β = 10 % (one needle prompt each:
# the grid needs a task; the perplexity rows are the figure).
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah --lengths 2048,4096,8192 --depths 1 --samples 1 --haystack noise \
  --method attnlab,attnlab-band,attnlab-retrieval,attnlab-key-blocks,attnlab-other-blocks,streaming-llm --budget 0.1 \
  --calibrate $S/train.txt.gz --calibrate-windows 3 --ppl $S/test.txt.gz --ppl-windows 2 --out ${RUNS:-runs}/perplexity-2k-8k

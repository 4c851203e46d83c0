#!/bin/bash
# Multi-key needles (and the single needle) at 2,048 tokens: SmolLM2-135M, noise haystack, 5 depths × 2 samples, seed 0
# (the test prompts: every configuration here was chosen on seed 1, multikey-2k-dev.sh); attnlab (the default) and its
# variants at β = 5 % and 10 %, perplexity beside; then the published baselines and the per-row top-k oracle on the
# same multi-key prompts in their own folder (MInference's calibration grid kept apart from attnlab's).
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
R=${RUNS:-runs}/multikey-2k
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey,niah --lengths 2048 --depths 5 --samples 2 --haystack noise \
  --method attnlab,attnlab-retrieval,attnlab-key-blocks,attnlab-other-blocks --budget 0.05,0.1 \
  --calibrate $S/train.txt.gz --calibrate-windows 1 --ppl $S/test.txt.gz --ppl-windows 1 --out $R/attnlab
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --lengths 2048 --depths 5 --samples 2 --haystack noise \
  --method streaming-llm,snapkv,quest,minference:patterns=vs,oracle-topk --budget 0.05,0.1 \
  --calibrate $S/train.txt.gz --calibrate-windows 1 --out $R/baselines

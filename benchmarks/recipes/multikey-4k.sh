#!/bin/bash
# Multi-key needles at 4,096 tokens, a length the dev prompts of multikey-2k-dev.sh never saw: SmolLM2-135M, noise
# haystack, 5 depths × 4 samples (seed 0); full, attnlab (the default), the baselines (minference, snapkv,
# streaming-llm, quest) and the per-row top-k oracle (the bound of any sparse support at this β), all at β = 10 %.
# M: the methods (full is always run); THREADS: OpenMP threads (2).  The calibration (one train window) is the one
# retrieval-4k-8k.sh made, where that ran first (it does not depend on the prompts).
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
OUT=${RUNS:-runs}/multikey-4k
M=${M:-attnlab,minference,snapkv,streaming-llm,quest,oracle-topk}
mkdir -p $OUT
first=${RUNS:-runs}/passkey-4k-8k-filler/calibration-4096.npz
[ -f $first ] && [ ! -f $OUT/calibration-4096.npz ] && cp $first $OUT/
OMP_NUM_THREADS=${THREADS:-2} .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --lengths 4096 --depths 5 --samples 4 \
  --haystack noise --method $M --budget 0.1 --calibrate $S/train.txt.gz --calibrate-windows 1 --out $OUT

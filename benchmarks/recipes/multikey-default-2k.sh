#!/bin/bash
# Multi-key needles at 2,048 tokens with the recommended default: SmolLM2-135M, noise haystack, 5 depths × 4 samples
# (seed 0, the test prompts, run once), as multikey-4k.sh at 4K; full, attnlab, the baselines (minference, snapkv,
# streaming-llm, quest, duo-attention) and the per-row top-k oracle, all at β = 10 %.  multikey-2k.sh holds the
# earlier variants and β = 5 %.  M: the methods (full is always run).  One calibration window of the train plays.
# One thread.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
M=${M:-attnlab,minference,snapkv,streaming-llm,quest,oracle-topk,duo-attention}
OMP_NUM_THREADS=${THREADS:-1} .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --lengths 2048 --depths 5 \
  --samples 4 --haystack noise --method $M --budget 0.1 --seed 0 --calibrate $S/train.txt.gz --calibrate-windows 1 \
  --out ${RUNS:-runs}/multikey-default-2k
# why the default lost the prompts full attention found (the step where its answer left the value)
OMP_NUM_THREADS=${THREADS:-1} .venv/bin/attnlab eval-why --out ${RUNS:-runs}/multikey-default-2k --method attnlab --row parted --top 6 --layers

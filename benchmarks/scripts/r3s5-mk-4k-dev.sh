#!/bin/bash
# 4K multi-key dev prompts (seed 1): which cells full keeps and the default plan loses
cd "$(dirname "$0")/../.."
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --depths 5 --samples 2 --lengths 4096 --haystack noise \
  --method attnlab-retrieval --seed 1 \
  --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --out runs/r5/smol-4k-mk-dev

#!/bin/bash
# session 5: 4K multi-key on 20 prompts (5 depths × 4 samples, seed 0: samples 0–1 are session 4's test prompts, 2–3 new),
# full, the default, the key-block configuration and the per-row top-k oracle at β 0.1 — a firmer share of full's cells;
# OUT, METHODS: another folder (a copy, rows keyed by method) and other methods on the same prompts (r3s7-*.sh)
cd "$(dirname "$0")/../.."
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --depths 5 --samples 4 --lengths 4096 --haystack noise \
  --method ${METHODS:-attnlab-retrieval,attnlab-retrieval:retrieval_heads=32:blocks=8,oracle-topk} \
  --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --out ${OUT:-runs/r5/smol-4k-mk-20}

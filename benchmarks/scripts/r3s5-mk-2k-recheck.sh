#!/bin/bash
# session 5: session 4's 2K multi-key test rerun from scratch (fresh folder, calibration remade) on session 5's kernel —
# does the new summation order (columns inside the kernel, register-blocked extras) move any greedy answer?
cd "$(dirname "$0")/../.."
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey,niah --depths 5 --samples 2 --lengths 2048 --haystack noise \
  --method attnlab-retrieval,attnlab-retrieval:retrieval_heads=32:blocks=8 \
  --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --ppl ../shared/data/shakespeare/test.txt.gz --ppl-windows 1 --out ${OUT:-runs/r5/smol-2k-mk-recheck}

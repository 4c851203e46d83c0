#!/bin/bash
# session 5: Gemma-3-270M at 32K on session 5's kernel — SDPA vs attnlab-retrieval β 0.1, quiet, 2 threads, alternated;
# session 4's calibration reused when present (else made: 1 train window, ≈ 5 minutes)
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=2
OUT=${OUT:-runs/r5/gemma32k-speed}
mkdir -p $OUT
[ -f runs/r4/gemma32k-speed/calibration-32768.npz ] && cp -n runs/r4/gemma32k-speed/calibration-32768.npz $OUT/
[ -f $OUT/calibration-32768.npz ] || .venv/bin/python benchmarks/llm_structured.py calibrate --model gemma3-270m --lengths 32768 --windows 1 --budgets 0.1 --out $OUT --system-malloc
.venv/bin/python benchmarks/llm_structured.py speed --model gemma3-270m --n 32768 --method attnlab-retrieval --budget 0.1 --threads 2 --new-tokens 8 --out $OUT --system-malloc
.venv/bin/python benchmarks/llm_structured.py speed --model gemma3-270m --n 32768 --method sdpa --threads 2 --new-tokens 8 --out $OUT --system-malloc
.venv/bin/python benchmarks/llm_structured.py speed --model gemma3-270m --n 32768 --method attnlab-retrieval --budget 0.1 --threads 2 --new-tokens 8 --out $OUT --system-malloc

#!/bin/bash
# Prefill and decoding speed, peak memory of Gemma-3-270M at 32,768 tokens: the model's own attention (SDPA) against
# attnlab-retrieval at β = 10 %, quiet machine, 2 threads, alternated (plan, SDPA, plan), 8 decoded tokens; one
# calibration window of Shakespeare's train text (≈ 5 minutes).
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
export OMP_NUM_THREADS=2
OUT=${RUNS:-runs}/gemma-32k-speed
mkdir -p $OUT
[ -f $OUT/calibration-32768.npz ] || .venv/bin/python benchmarks/llm_structured.py calibrate --model gemma3-270m --lengths 32768 --windows 1 --budgets 0.1 --out $OUT --system-malloc
for m in attnlab-retrieval sdpa attnlab-retrieval; do
  .venv/bin/python benchmarks/llm_structured.py speed --model gemma3-270m --n 32768 --method $m --budget 0.1 --threads 2 --new-tokens 8 --out $OUT --system-malloc
done

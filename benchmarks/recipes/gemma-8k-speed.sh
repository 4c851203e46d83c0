#!/bin/bash
# Prefill and decoding speed, KV memory of Gemma-3-270M at 8,192 tokens: the model's own attention (SDPA) against
# attnlab (the default, whose calibration chooses the split page score on Gemma: part of its read-back pages by the
# mean key) at β = 10 %, alternated ROUNDS times (default 2), 2 threads, 32 decoded tokens; one calibration window of
# Shakespeare's train text.  Then the A/B in one process (``llm_structured.py decode``): 2 alternated prefills each
# way, then DECODE_ROUNDS (default 24) rounds of 8 decoded tokens each way, the order alternated, and the keys each
# cache holds after the prefill (all layers; the sliding-window ones).
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
export OMP_NUM_THREADS=2
OUT=${RUNS:-runs}/gemma-8k-speed
mkdir -p $OUT
[ -f $OUT/calibration-8192.npz ] || .venv/bin/python benchmarks/llm_structured.py calibrate --model gemma3-270m --lengths 8192 --windows 1 --budgets 0.1 --out $OUT
for i in $(seq ${ROUNDS:-2}); do
  for m in sdpa attnlab; do
    .venv/bin/python benchmarks/llm_structured.py speed --model gemma3-270m --n 8192 --method $m --budget 0.1 --threads 2 --new-tokens 32 --out $OUT
  done
done
.venv/bin/python benchmarks/llm_structured.py decode --model gemma3-270m --n 8192 --method attnlab --budget 0.1 --threads 2 --new-tokens 8 --rounds ${DECODE_ROUNDS:-24} --out $OUT

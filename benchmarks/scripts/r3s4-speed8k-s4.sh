#!/bin/bash
# session 4: prefill / decoding speed at 8K, quiet machine, 2 threads (the issue's "2 cores"), SDPA vs attnlab-retrieval
# (default) vs attnlab-retrieval:retrieval_heads=32:blocks=8, β 0.1, alternated twice; calibration: session 3's
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
export OMP_NUM_THREADS=2
mkdir -p runs/r4/speed8k-s4
# the calibration: session 3's file when it is here (the README's figures used it), else one 8K window made afresh
[ -e runs/r4/speed8k-s4/calibration-8192.npz ] || cp runs/r3/speed8k-s3/calibration-8192.npz runs/r4/speed8k-s4/ 2>/dev/null || \
  .venv/bin/python benchmarks/llm_structured.py calibrate --lengths 8192 --windows 1 --budgets 0.1 --out runs/r4/speed8k-s4
for i in 1 2; do
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method sdpa --threads 2 --new-tokens 32 --out runs/r4/speed8k-s4
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method attnlab-retrieval --budget 0.1 --threads 2 --new-tokens 32 --out runs/r4/speed8k-s4
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method attnlab-retrieval:retrieval_heads=32:blocks=8 --budget 0.1 --threads 2 --new-tokens 32 --out runs/r4/speed8k-s4
done

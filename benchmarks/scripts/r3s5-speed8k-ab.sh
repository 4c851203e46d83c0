#!/bin/bash
# session 5: before / after on the same machine in the same hour — session 4's code (commit 8293e32, in a worktree) and
# this session's, attnlab-retrieval at 8K, alternated with SDPA twice; quiet machine, 2 threads
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
export OMP_NUM_THREADS=2
[ -d /tmp/s4 ] || git worktree add -f /tmp/s4 8293e32
mkdir -p runs/r5/speed8k-before runs/r5/speed8k
# the figures used session 3's calibration (copied through runs/r4/speed8k-s4); on a fresh clone one is made (1 train window)
[ -f runs/r4/speed8k-s4/calibration-8192.npz ] && cp -n runs/r4/speed8k-s4/calibration-8192.npz runs/r5/speed8k/
[ -f runs/r5/speed8k/calibration-8192.npz ] || .venv/bin/python benchmarks/llm_structured.py calibrate --lengths 8192 --windows 1 --budgets 0.05,0.1,0.25 --out runs/r5/speed8k
cp -n runs/r5/speed8k/calibration-8192.npz runs/r5/speed8k-before/
for i in 1 2; do
  (cd /tmp/s4 && PYTHONPATH=/tmp/s4 "$ROOT/.venv/bin/python" benchmarks/llm_structured.py speed --n 8192 --method attnlab-retrieval --budget 0.1 --threads 2 --new-tokens 32 --data "$ROOT/../shared/data/shakespeare" --out "$ROOT/runs/r5/speed8k-before")
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method attnlab-retrieval --budget 0.1 --threads 2 --new-tokens 32 --out runs/r5/speed8k
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method sdpa --threads 2 --new-tokens 32 --out runs/r5/speed8k
done

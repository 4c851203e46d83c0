#!/bin/bash
# session 6: before / after on the same machine in the same hour — session 5's code (commit a346495, in a worktree) and
# this session's (the kernel reading transformers' layout in place, last_query_mass), attnlab-retrieval at 8K, β 0.1,
# alternated with SDPA three times; quiet machine, 2 threads; session 4's calibration (as every 8K speed figure)
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
export OMP_NUM_THREADS=2
OUT=${OUT:-runs/r6/speed8k}
[ -d /tmp/s5 ] || git worktree add -f /tmp/s5 a346495
mkdir -p $OUT-before $OUT
[ -f runs/r4/speed8k-s4/calibration-8192.npz ] && cp -n runs/r4/speed8k-s4/calibration-8192.npz $OUT/
[ -f $OUT/calibration-8192.npz ] || .venv/bin/python benchmarks/llm_structured.py calibrate --lengths 8192 --windows 1 --budgets 0.05,0.1,0.25 --out $OUT
cp -n $OUT/calibration-8192.npz $OUT-before/
for d in /tmp/s5 "$ROOT"; do (cd $d && PYTHONPATH=$d "$ROOT/.venv/bin/python" -c "from attnlab.nn.mechanisms import native; assert native.available(), native.unavailable_reason()"); done
for i in 1 2 3; do
  (cd /tmp/s5 && PYTHONPATH=/tmp/s5 "$ROOT/.venv/bin/python" benchmarks/llm_structured.py speed --n 8192 --method attnlab-retrieval --budget 0.1 --threads 2 --new-tokens 32 --data "$ROOT/../shared/data/shakespeare" --out "$ROOT/$OUT-before")
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method attnlab-retrieval --budget 0.1 --threads 2 --new-tokens 32 --out $OUT
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method sdpa --threads 2 --new-tokens 32 --out $OUT
done

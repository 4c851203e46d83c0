#!/bin/bash
# session 6: prefill / decoding speed at 8K after the kernel read transformers' layout in place, last_query_mass and the
# wide bands' causal prefix as SDPA; quiet machine, 2 threads, SDPA vs attnlab-retrieval (default), β 0.1, alternated
# five times; session 4's calibration (as every 8K speed figure), one made afresh on a fresh clone
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=2
OUT=${OUT:-runs/r6/speed8k-final}
mkdir -p $OUT
[ -f runs/r4/speed8k-s4/calibration-8192.npz ] && cp -n runs/r4/speed8k-s4/calibration-8192.npz $OUT/
[ -f $OUT/calibration-8192.npz ] || .venv/bin/python benchmarks/llm_structured.py calibrate --lengths 8192 --windows 1 --budgets 0.05,0.1,0.25 --out $OUT
.venv/bin/python -c "from attnlab.nn.mechanisms import native; assert native.available(), native.unavailable_reason()"
for i in 1 2 3 4 5; do
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method sdpa --threads 2 --new-tokens 32 --out $OUT
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method attnlab-retrieval --budget 0.1 --threads 2 --new-tokens 32 --out $OUT
done

#!/bin/bash
# session 7: prefill / decoding speed at 8K of the other-blocks configuration (its key blocks read in place by the
# kernel, per chunk of 16 queries) beside SDPA and the default; quiet machine, 2 threads, β 0.1, alternated; session 4's
# calibration (as every 8K speed figure)
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=2
OUT=${OUT:-runs/r7/speed8k}
mkdir -p $OUT
[ -f runs/r4/speed8k-s4/calibration-8192.npz ] && cp -n runs/r4/speed8k-s4/calibration-8192.npz $OUT/
[ -f $OUT/calibration-8192.npz ] || .venv/bin/python benchmarks/llm_structured.py calibrate --lengths 8192 --windows 1 --budgets 0.05,0.1,0.25 --out $OUT
.venv/bin/python -c "from attnlab.nn.mechanisms import native; assert native.available(), native.unavailable_reason()"
for i in $(seq ${ROUNDS:-2}); do
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method sdpa --threads 2 --new-tokens 32 --out $OUT
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method attnlab-retrieval --budget 0.1 --threads 2 --new-tokens 32 --out $OUT
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method attnlab-retrieval:retrieval_heads=32:blocks=8:other_blocks=4 --budget 0.1 --threads 2 --new-tokens 32 --out $OUT
done

#!/bin/bash
# session 5: prefill / decoding speed at 8K after the kernel's in-kernel columns, in-place heads and batched column
# choice; quiet machine, 2 threads, SDPA vs attnlab-retrieval (default) vs attnlab-retrieval:retrieval_heads=32:blocks=8,
# β 0.1, alternated three times; the calibration of session 4's folder (copied); the kernel compiled before the first run;
# OUT, ROUNDS, VARIANT: another folder, number of alternations and third method (r3s7-speed8k.sh)
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=2
OUT=${OUT:-runs/r5/speed8k}
mkdir -p $OUT
# the figures used session 3's calibration (copied through runs/r4/speed8k-s4); on a fresh clone one is made (1 train window)
[ -f runs/r4/speed8k-s4/calibration-8192.npz ] && cp -n runs/r4/speed8k-s4/calibration-8192.npz $OUT/
[ -f $OUT/calibration-8192.npz ] || .venv/bin/python benchmarks/llm_structured.py calibrate --lengths 8192 --windows 1 --budgets 0.05,0.1,0.25 --out $OUT
.venv/bin/python -c "from attnlab.nn.mechanisms import native; assert native.available(), native.unavailable_reason()"
for i in $(seq ${ROUNDS:-3}); do
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method sdpa --threads 2 --new-tokens 32 --out $OUT
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method attnlab-retrieval --budget 0.1 --threads 2 --new-tokens 32 --out $OUT
  .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method ${VARIANT:-attnlab-retrieval:retrieval_heads=32:blocks=8} --budget 0.1 --threads 2 --new-tokens 32 --out $OUT
done

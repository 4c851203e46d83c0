#!/bin/bash
# Prefill and decoding speed, KV memory at 8,192 tokens: SmolLM2-135M on a quiet machine, 2 threads, the model's own SDPA
# against attnlab-retrieval and attnlab (the default) at β = 10 %, alternated ROUNDS times (default 3; one process per
# measurement: peak RSS is per process), 32 decoded tokens; one calibration window of Shakespeare's train text.
# THREADS=1: one thread each (beside another measurement); ATTNLAB_NATIVE_DECODE=0: the decoding step's tensor code
# (its reference) instead of the fused native step.  The published table: THREADS=2 ROUNDS=2, then THREADS=1
# ROUNDS=2, both on a quiet machine (ratios within one run compare; absolute seconds move with the load).  Then the
# A/B of attnlab against SDPA in one process (``llm_structured.py decode``: 2 alternated prefills each way, then
# DECODE_ROUNDS (default 24) rounds of 8 decoded tokens each way, the order alternated).
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
THREADS=${THREADS:-2}
export OMP_NUM_THREADS=$THREADS
OUT=${RUNS:-runs}/speed-8k
mkdir -p $OUT
[ -f $OUT/calibration-8192.npz ] || .venv/bin/python benchmarks/llm_structured.py calibrate --lengths 8192 --windows 1 --budgets 0.05,0.1,0.25 --out $OUT
.venv/bin/python -c "from attnlab.nn.mechanisms import native; assert native.available(), native.unavailable_reason()"
for i in $(seq ${ROUNDS:-3}); do
  for m in sdpa attnlab-retrieval attnlab; do
    .venv/bin/python benchmarks/llm_structured.py speed --n 8192 --method $m --budget 0.1 --threads $THREADS --new-tokens 32 --out $OUT
  done
done
.venv/bin/python benchmarks/llm_structured.py decode --n 8192 --method attnlab --budget 0.1 --threads $THREADS --new-tokens 8 --rounds ${DECODE_ROUNDS:-24} --out $OUT

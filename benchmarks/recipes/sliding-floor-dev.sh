#!/bin/bash
# The band floor of Gemma-3's sliding layers (sliding_floor, benchmarks/sliding_floor.py), chosen on dev text: the
# default's perplexity at β = 0.1 for each floor F on 2 windows of 8,192 tokens and 1 of 16,384 of Shakespeare's dev
# plays, beside full attention's (the calibration: one window of the train plays, as attnlab eval's).  Its whole
# windows are 10.1 % of the causal entries at 8K, so a floor moves β from the 3 global layers to the 15 sliding ones;
# a floor β cannot pay is lowered (floor_used).  The retrieval check of a floor: the dev pass keys of
# retrieval-gemma-8k-16k (SPLIT=dev LENGTHS=8192 M=attnlab-retrieval:…:sliding_floor=F, its -dev folder).  One thread.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
mkdir -p ${RUNS:-runs}/sliding-floor-dev
export OMP_NUM_THREADS=1
.venv/bin/python benchmarks/sliding_floor.py --hf gemma3-270m --n 8192 --windows 2 --floors 128,192,256,320,384,448,512 \
  --out ${RUNS:-runs}/sliding-floor-dev --json > ${RUNS:-runs}/sliding-floor-dev/ppl-8k.jsonl
.venv/bin/python benchmarks/sliding_floor.py --hf gemma3-270m --n 16384 --windows 1 --floors 128,256,384,512 \
  --out ${RUNS:-runs}/sliding-floor-dev --json > ${RUNS:-runs}/sliding-floor-dev/ppl-16k.jsonl

#!/bin/bash
# session 7: prefill / decoding speed at 8K of the other-blocks configuration (its key blocks read in place by the
# kernel, per chunk of 16 queries) beside SDPA and the default; quiet machine, 2 threads, β 0.1, alternated (ROUNDS,
# default 2; the final figures: OUT=runs/r7/speed8k-final ROUNDS=3); session 4's calibration (as every 8K speed figure)
# — session 5's script with another third method
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/r7/speed8k} ROUNDS=${ROUNDS:-2} VARIANT=attnlab-retrieval:retrieval_heads=32:blocks=8:other_blocks=4 \
  bash benchmarks/scripts/r3s5-speed8k.sh

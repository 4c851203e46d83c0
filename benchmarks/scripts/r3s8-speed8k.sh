#!/bin/bash
# session 8: prefill / decoding speed and KV at 8K of the read-back configuration (the other-blocks configuration whose
# retrieval heads keep their tail's 32 voted key blocks and whose planned heads read back 8 pages a step from the
# store) beside SDPA and the default; quiet machine, 2 threads, β 0.1, alternated (ROUNDS, default 3); session 4's
# calibration — session 5's script with another third method (the speed rows now give the store and the reads)
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/r8/speed8k} ROUNDS=${ROUNDS:-3} VARIANT=attnlab-retrieval:retrieval_heads=32:blocks=8:other_blocks=4:tail_keep=512:pages=8 \
  bash benchmarks/scripts/r3s5-speed8k.sh

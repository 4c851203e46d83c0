#!/bin/bash
# Attention alone, band + columns against SDPA's full attention: forward and forward + backward time and the forward's
# peak memory at n = 4,096 and 16,384 tokens (H = 8, d_k = 64, w = 64, 4 key columns, float32, 2 threads), bidirectional
# and causal; every mechanism timed in alternation in one process, the minimum of 3 repeats kept (on a loaded machine
# absolute times move, ratios less: compare within one run); speedup_vs_full = SDPA's time over the mechanism's.
cd "$(dirname "$0")/../.."   # the repository root
mkdir -p ${RUNS:-runs}/kernel-speed
.venv/bin/python benchmarks/attention_speed.py --n 4096 16384 --repeat 3 --case bidirectional causal \
  --mechanisms full band structured --no-flex --json > ${RUNS:-runs}/kernel-speed/attention_speed.jsonl

#!/bin/bash
# The thesis experiment as `make demo` runs it on 2 busy cores (the synthetic English→Italian grammar, the 1-head and
# the 8-head model, 800 training steps each, the same models on any machine): its wall time, the BLEU each model
# reaches, the heads the roles stage names and whether the per-language ŵ recovers the grammar's reordering distance
# (benchmarks/demo_record.py: a line per model, then one for the run).  torch takes both cores, as under `make demo`.
cd "$(dirname "$0")/../.."   # the repository root
OUT=${RUNS:-runs}/demo
mkdir -p $OUT
start=$(date +%s.%N)
.venv/bin/attnlab experiment --out ${RUNS:-runs}/demo-run --force
wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")
.venv/bin/python benchmarks/demo_record.py ${RUNS:-runs}/demo-run --wall $wall > $OUT/demo.jsonl

#!/bin/bash
# The README's first screen, run as a new user runs it: eval's NIAH (RULER's needle and question, SmolLM2's chat
# template) in Shakespeare's test plays (eval's default haystack), 2,048 tokens, 5 depths × 2 samples, full attention
# against attnlab (the recommended default) at β = 0.1, on the calibration attnlab ships for SmolLM2 at 2K
# (attnlab/calibrations/, made by calibrations.sh on 2 windows of the train plays: what --calibrate measured here before).
# Then the baselines (duo-attention: on the gates attnlab ships, duo-gates.sh) and the per-row top-k oracle on the
# same prompts, in the same folder (B=… narrows them; B=none skips them), and why the default lost the prompts it
# lost, at the step where its answer left the value.  One thread.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
export OMP_NUM_THREADS=1
OUT=${RUNS:-runs}/first-eval
.venv/bin/attnlab eval --hf smollm2-135m --task niah --lengths 2048 --depths 5 --samples 2 --method attnlab --budget 0.1 \
    --out $OUT
B=${B:-minference,snapkv,streaming-llm,quest,oracle-topk,duo-attention}
[ "$B" != none ] && .venv/bin/attnlab eval --hf smollm2-135m --task niah --lengths 2048 --depths 5 --samples 2 --method $B \
    --budget 0.1 --out $OUT
.venv/bin/attnlab eval-why --out $OUT --method attnlab --row parted --top 8 --heads 2

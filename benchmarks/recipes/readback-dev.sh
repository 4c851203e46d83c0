#!/bin/bash
# The read-back on dev prompts: eval's NIAH in Shakespeare's dev plays (seed 1), SmolLM2-135M, 2,048 tokens, 5 depths ×
# 2 samples, β = 0.1 — the default as it was before this check (8 pages read back a step) against the same
# configuration with 16 pages (the default since: `attnlab`), with 1,024 voted keys kept by each retrieval head, and
# with both; then why the 8-page configuration and the 16-page one lost their prompts.  A dev check (no test figure): it chose the default's
# `pages=16`.  Then the default (for SmolLM2 its calibration keeps Quest's bound alone: page_score=calibrated) against
# the split page choice (mean_pages=8: 8 pages by the bound, 8 by the mean key, what page-ranking.sh measures on dev
# text).  One process at a time.
# The rows of attnlab:group_vote=1:decode_band=192 in its dev folders: benchmarks/recipes/kv-budget-dev.sh.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
OUT=${RUNS:-runs}/readback-dev
B=attnlab-retrieval:retrieval_heads=32:blocks=8:other_blocks=4
.venv/bin/attnlab eval --hf smollm2-135m --task niah --lengths 2048 --depths 5 --samples 2 --budget 0.1 \
  --method $B:tail_keep=512:pages=8:sliding_floor=128,$B:tail_keep=512:sliding_floor=128:pages=16,$B:tail_keep=1024:pages=8:sliding_floor=128 \
  --calibrate $S/train.txt.gz --haystack $S/dev.txt.gz --seed 1 --out $OUT
.venv/bin/attnlab eval --hf smollm2-135m --task niah --lengths 2048 --depths 5 --samples 2 --budget 0.1 \
  --method $B:tail_keep=1024:pages=16:sliding_floor=128 \
  --calibrate $S/train.txt.gz --haystack $S/dev.txt.gz --seed 1 --out $OUT
.venv/bin/attnlab eval --hf smollm2-135m --task niah --lengths 2048 --depths 5 --samples 2 --budget 0.1 \
  --method attnlab,attnlab-bound:mean_pages=8 --calibrate $S/train.txt.gz --haystack $S/dev.txt.gz --seed 1 --out $OUT
.venv/bin/attnlab eval-why --out $OUT --method $B:tail_keep=512:pages=8:sliding_floor=128 --row parted --top 6
.venv/bin/attnlab eval-why --out $OUT --method $B:tail_keep=512:sliding_floor=128:pages=16 --row parted --top 6

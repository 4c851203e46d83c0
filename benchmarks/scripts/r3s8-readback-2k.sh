#!/bin/bash
# session 8: session 3's read-back table (2K single needle, noise haystack, 5 depths × 2, `attnlab-retrieval:pages=4` at
# β 0.05 / 0.1) again with the read-back of session 8 (page summaries per KV head, made once and folded as keys arrive;
# the step without joining the store): session 3's folder copied without its pages=4 rows (full and the default reused)
cd "$(dirname "$0")/../.."
S=../shared/data/shakespeare
OUT=${OUT:-runs/r8/rb-2k}
if [ ! -d $OUT ] && [ -d runs/r3/rb-2k ]; then
  mkdir -p $OUT && cp runs/r3/rb-2k/config.json runs/r3/rb-2k/calibration-2048.npz $OUT/ && grep -v "pages=4" runs/r3/rb-2k/results.jsonl > $OUT/results.jsonl
fi
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah --depths 5 --samples 2 --lengths 2048 --haystack noise \
  --method attnlab-retrieval,attnlab-retrieval:pages=4 --budget 0.05,0.1 --calibrate $S/train.txt.gz --calibrate-windows 1 \
  --ppl $S/test.txt.gz --ppl-windows 1 --out $OUT

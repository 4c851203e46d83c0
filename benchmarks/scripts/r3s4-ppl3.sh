#!/bin/bash
# round 2's perplexity setting (3 calibration + 2 test windows) for the dev-chosen retrieval_heads=32:blocks=8, added to the
# session-3 folders (their calibrations reused; the earlier rows stay); OUT24, OUT8, METHODS: other folders and methods;
# S: the Shakespeare folder as the folders' config.json spells it (session 3 ran with /work/shared/…)
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=${S:-../shared/data/shakespeare}
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah --depths 1 --samples 1 --lengths 4096,2048 --haystack noise \
  --method ${METHODS:-attnlab,attnlab-retrieval,attnlab-retrieval:retrieval_heads=32:blocks=8} --budget 0.1 --calibrate $S/train.txt.gz \
  --calibrate-windows 3 --ppl $S/test.txt.gz --ppl-windows 2 --out ${OUT24:-runs/r3/smol-24k-ppl3}
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah --depths 1 --samples 1 --lengths 8192 --haystack noise \
  --method ${METHODS:-attnlab,attnlab-retrieval,attnlab-retrieval:retrieval_heads=32:blocks=8} --budget 0.1 --calibrate $S/train.txt.gz \
  --calibrate-windows 3 --ppl $S/test.txt.gz --ppl-windows 2 --out ${OUT8:-runs/r3/smol-8k-ppl3}

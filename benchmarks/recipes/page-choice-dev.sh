#!/bin/bash
# Which pages the default reads back, on dev prompts: multi-key needles (RULER's niah-multikey, noise haystack, seed 1:
# other keys, values and distractors than the test prompts of multikey-default-2k.sh and -8k.sh), SmolLM2-135M, 2,048
# and 8,192 tokens, 5 depths × 4 samples, β = 10 %.  In the default's lost test prompts a retrieval head's value page
# was kept but not read back: 17th–34th by Quest's bound, 1st–2nd by the page's mean key.  Beside the default (for
# SmolLM2 its calibration ranks 16 pages by the bound): 8 by the bound + 8 by the mean key (attnlab-bound:mean_pages=8);
# 24 pages by the bound; 16 by the bound + 8 by the mean key (24 pages: does more reading, or the mean key, find them?).
# Then the vote of the retrieval heads' decoding cache (vote_next=s: a block's vote also counts the s blocks before it,
# the value after the key's words), where the dev losses' copy head missed the value's keys.  A dev check (no test
# figure).  One calibration window of the train plays (those of the test recipes, where present).  Two threads.
# The rows of attnlab:group_vote=1:decode_band=192 in its dev folders: benchmarks/recipes/kv-budget-dev.sh.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
R=${RUNS:-runs}
OUT=$R/page-choice-dev
mkdir -p $OUT
for f in $R/multikey-default-2k/calibration-2048.npz $R/passkey-4k-8k-filler/calibration-8192.npz; do
  [ -f $f ] && [ ! -f $OUT/$(basename $f) ] && cp $f $OUT/
done
B=attnlab-retrieval:retrieval_heads=32:blocks=8:other_blocks=4:tail_keep=512
M=attnlab,attnlab-bound:mean_pages=8,$B:pages=24,$B:pages=24:mean_pages=8,attnlab:vote_next=1,attnlab:vote_next=2
# (the records were made in two calls, the two vote_next methods in the second: wall.jsonl lists both)
OMP_NUM_THREADS=${THREADS:-2} .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --haystack noise \
  --lengths ${LENGTHS:-2048,8192} --depths 5 --samples 4 --budget 0.1 --seed 1 --method $M \
  --calibrate $S/train.txt.gz --calibrate-windows 1 --out $OUT || exit 1
# why each of them lost the prompts full attention found
for m in ${M//,/ }; do
  OMP_NUM_THREADS=${THREADS:-2} .venv/bin/attnlab eval-why --out $OUT --method $m --row parted --top 6
done
# the per-row top-k oracle on the 2K dev prompts, the level the target compares with (at 8K: 2.4 min a prompt)
OMP_NUM_THREADS=${THREADS:-2} .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --haystack noise \
  --lengths 2048 --depths 5 --samples 4 --budget 0.1 --seed 1 --method oracle-topk --out $OUT/oracle-2k-dev

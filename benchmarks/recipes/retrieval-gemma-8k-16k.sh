#!/bin/bash
# Gemma-3-270M at 8,192 and 16,384 tokens: Mohtashami & Jaggi's plain pass key (passkey-bare: no chat template, no
# instruction, the key said twice) in Shakespeare's test plays, β = 0.1, perplexity on one test window beside.
# 8K: 5 depths × 1 sample; 16K: 3 depths × 1 sample (a full prefill at 16K is 5–8 min on one thread).
# methods: full (the model's own sliding and global layers), attnlab (the recommended default), streaming-llm, snapkv,
# quest, minference (its per-head pattern search on the calibration window) and the per-row top-k oracle.  Test seed 0, run once (the default was fixed before).  One calibration window of the train plays per length.
# SPLIT=dev: the dev plays, seed 1, no perplexity, folders …-dev (dev checks at 8K: M=attnlab-bound:vote_next=1, and
# the page choices M=attnlab-bound,attnlab-bound:mean_pages=8 — attnlab-bound: the default with Quest's bound alone,
# the default before page_score=calibrated; then M=attnlab).  The test rows of attnlab-bound: the same runs, before.
# One process, one thread.  LENGTHS=8192 or 16384 runs one of the two; M=… narrows the methods.  The per-head
# band plan (attnlab-band), the perplexity target's reference on this model, added afterwards: M=attnlab-band.
# The rows of attnlab:group_vote=1:decode_band=192 in its dev folders: benchmarks/recipes/kv-budget-dev.sh.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
M=${M:-attnlab,streaming-llm,snapkv,quest,minference,oracle-topk}
SPLIT=${SPLIT:-test}
if [ "$SPLIT" = dev ]; then EXTRA="--seed 1"; SUFFIX=-dev; else EXTRA="--ppl $S/test.txt.gz --ppl-windows 1 --seed 0"; SUFFIX=; fi
export OMP_NUM_THREADS=1
for n in ${LENGTHS:-8192 16384}; do
  if [ "$n" = 8192 ]; then D=5; else D=3; fi
  out=${RUNS:-runs}/passkey-gemma-$((n / 1024))k-shakespeare$SUFFIX
  first=${RUNS:-runs}/passkey-gemma-$((n / 1024))k-shakespeare/calibration-$n.npz   # the calibration: train text only
  if [ -n "$SUFFIX" ] && [ -f $first ] && [ ! -f $out/calibration-$n.npz ]; then mkdir -p $out && cp $first $out/; fi
  .venv/bin/attnlab eval --hf gemma3-270m --task passkey-bare --haystack $S/$SPLIT.txt.gz --template none \
    --lengths $n --depths $D --samples 1 --method $M --budget 0.1 --calibrate $S/train.txt.gz --calibrate-windows 1 \
    $EXTRA --out $out
  # why the default lost what it lost, at the decoding step where its answer left the value
  [ -z "$SUFFIX" ] && [ "$n" = 8192 ] && .venv/bin/attnlab eval-why --out $out --method attnlab --row parted --top 6
done

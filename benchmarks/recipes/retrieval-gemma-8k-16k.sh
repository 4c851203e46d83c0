#!/bin/bash
# Gemma-3-270M at 8,192 and 16,384 tokens: Mohtashami & Jaggi's plain pass key (passkey-bare: no chat template, no
# instruction, the key said twice) in Shakespeare's test plays, β = 0.1, perplexity on one test window beside.
# 8K: 5 depths × 1 sample; 16K: 3 depths × 1 sample (a full prefill at 16K is 5–8 min on one thread).
# methods: full (the model's own sliding and global layers), attnlab (the recommended default), streaming-llm, snapkv,
# quest.  Test seed 0, run once (the default was fixed before).  One calibration window of the train plays per length.
# One process, one thread.  LENGTHS=8192 or 16384 runs one of the two; M=… narrows the methods.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
M=${M:-attnlab,streaming-llm,snapkv,quest}
export OMP_NUM_THREADS=1
for n in ${LENGTHS:-8192 16384}; do
  if [ "$n" = 8192 ]; then D=5; else D=3; fi
  .venv/bin/attnlab eval --hf gemma3-270m --task passkey-bare --haystack $S/test.txt.gz --template none \
    --lengths $n --depths $D --samples 1 --method $M --budget 0.1 --calibrate $S/train.txt.gz --calibrate-windows 1 \
    --ppl $S/test.txt.gz --ppl-windows 1 --seed 0 --out ${RUNS:-runs}/passkey-gemma-$((n / 1024))k-shakespeare
done

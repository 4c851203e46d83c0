#!/bin/bash
# The DuoAttention gates attnlab ships (attnlab/gates/MODEL.safetensors): benchmarks/duo_attention_train.py, as
# DuoAttention's repository trains them (the model frozen, one gate per KV head, the last hidden states of the answer
# tokens distilled from full attention, L1 weight 0.05), on multi-passkey prompts (4 passkeys of 4 words, 1,024 tokens)
# in Shakespeare's train plays, streaming heads of 16 sinks + 64 recent tokens (duo-attention's defaults).  Steps: as
# many as one training did in ≤ 25 min on 2 busy cores (the record says the rate measured); --minutes is a safety cut
# only (the file's metadata says the steps done).  Gemma-3-270M did 3 steps in 25 min there: too few to rank its
# heads, so attnlab ships no gates for it yet.  The gates are written under runs/duo-gates/ with their history (one
# tensor per checkpoint), then the final file is copied into attnlab/gates/; `duo-attention` reads the file of the
# model it runs when its option gates is not given.  ONLY="MODEL …" makes only those.  Two threads.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
export OMP_NUM_THREADS=${THREADS:-2}
ALL="smollm2-135m:6"   # MODEL:STEPS
for want in $ONLY; do   # an unknown part: said and refused before anything runs
  [[ " $ALL " == *" $want:"* ]] || { echo "duo-gates.sh: error: ONLY=$want is not a part: $ALL" >&2; exit 2; }
done
R=${RUNS:-runs}/duo-gates
status=0
for item in $ALL; do
  IFS=: read -r model steps <<< "$item"
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $model "* ]]; then continue; fi
  mkdir -p $R attnlab/gates
  .venv/bin/python benchmarks/duo_attention_train.py --hf $model --steps $steps --minutes 24 --checkpoint 2 \
    --text ../shared/data/shakespeare/train.txt.gz --out $R/$model.safetensors \
    && cp $R/$model.safetensors attnlab/gates/$model.safetensors || status=1
done
exit $status

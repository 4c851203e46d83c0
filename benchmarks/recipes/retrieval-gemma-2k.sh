#!/bin/bash
# The pass key in real text with a model that can find it there: Gemma-3-270M (full attention finds Mohtashami &
# Jaggi's plain pass key in Shakespeare's plays, where SmolLM2-135M continues the play), 2,048 tokens, β = 0.1,
# 10 prompts over 5 depths, no chat template, no instruction, the key said twice (passkey-bare).
# methods: full (the model's own sliding and global layers), attnlab (the recommended default), attnlab-retrieval
# (its own defaults), minference, snapkv, streaming-llm, quest, the per-row top-k oracle.  SPLIT=dev: seed 1 and the dev plays (the default is
# checked there, M=attnlab,attnlab-retrieval; the page choices, M=attnlab-bound,attnlab-bound:mean_pages=8);
# SPLIT=test: seed 0 and the test plays, run once (attnlab-bound's rows: the default's before page_score=calibrated).
# One calibration window of the train plays.  One process, one thread.
# The rows of attnlab:group_vote=1:decode_band=192 in its dev folders: benchmarks/recipes/kv-budget-dev.sh.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
SPLIT=${SPLIT:-dev}
if [ "$SPLIT" = dev ]; then SEED=1; else SEED=0; fi
M=${M:-attnlab,attnlab-retrieval,minference,snapkv,streaming-llm,quest,oracle-topk}
export OMP_NUM_THREADS=1
.venv/bin/attnlab eval --hf gemma3-270m --task passkey-bare --haystack $S/$SPLIT.txt.gz --template none \
  --lengths 2048 --depths 5 --samples 2 --method $M --budget 0.1 --calibrate $S/train.txt.gz --calibrate-windows 1 \
  --seed $SEED --out ${RUNS:-runs}/passkey-gemma-2k-shakespeare-$SPLIT
# why the default lost the prompts full attention found (the prompt's last row: where the answers part)
.venv/bin/attnlab eval-why --out ${RUNS:-runs}/passkey-gemma-2k-shakespeare-$SPLIT --method attnlab --row first --heads 2

#!/bin/bash
# The calibrations attnlab ships (attnlab/calibrations/MODEL-N.safetensors), each made with the settings of the recipes
# that evaluate that model at that length, so their results are unchanged when `attnlab eval` reads the shipped file
# instead of calibrating: Shakespeare's train plays, the methods attnlab and minference at β = 0.1; SmolLM2 at 2K on
# 2 windows (the first command, first-eval.sh), every other length on 1 (--calibrate-windows 1 in its recipes).
# The full statistics stay in runs/calibrations/ (a killed run measures only what is missing when started again).
# ONLY="gemma3-270m:2048 …" makes only those; each line is one `attnlab calibrate`, long on 2 cores (see its record).
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
export OMP_NUM_THREADS=1
ALL="smollm2-135m:2048:2 gemma3-270m:2048:1 smollm2-135m:4096:1 gemma3-270m:8192:1 smollm2-135m:8192:1 gemma3-270m:16384:1"
for want in $ONLY; do   # an unknown part: said and refused before anything runs
  [[ " $ALL " == *" $want:"* ]] || { echo "calibrations.sh: ONLY=$want: not one of $ALL" >&2; exit 2; }
done
status=0
for item in $ALL; do
  IFS=: read -r model n windows <<< "$item"
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $model:$n "* ]]; then continue; fi
  mkdir -p ${RUNS:-runs}/calibrations
  .venv/bin/attnlab calibrate --hf $model --n $n --windows $windows --text ../shared/data/shakespeare/train.txt.gz \
    --method attnlab,minference --budget 0.1 --full ${RUNS:-runs}/calibrations/$model-$n.npz \
    --out attnlab/calibrations/$model-$n.safetensors --force || status=1
done
exit $status

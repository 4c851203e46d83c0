#!/bin/bash
# Multi-key needles at 8,192 tokens with the recommended default, β = 10 %, test seed 0, run once.  Nothing is chosen
# here (the default was fixed before):
#   multikey-default-8k          SmolLM2-135M, RULER's niah-multikey on the noise haystack, 5 depths × 4 samples
#   multikey-gemma-8k            Gemma-3-270M, the same task, 5 depths × 2 samples
# methods: full, attnlab and the per-row top-k oracle, the target's pair (one oracle row takes 2.4 min for SmolLM2,
# 4.3 min for Gemma-3 on one thread); M=attnlab,minference,snapkv,streaming-llm,quest,oracle-topk adds the baselines
# into the same folders (the rows already there are reused).  The calibrations (one window of Shakespeare's train
# plays) are those retrieval-4k-8k.sh and retrieval-gemma-8k-16k.sh made, where they ran first.  One thread a process;
# ONLY=smollm2|gemma runs one part (they can run side by side, one core each).  Gemma-3's loss is also traced layer by
# layer and, in the two layers that close most of the gap, head by head (eval-why --heads 2).
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
PARTS="smollm2 gemma"   # ONLY=PART runs one of them (none: all)
[ -z "$ONLY" ] || [[ " $PARTS " == *" $ONLY "* ]] || {
  echo "$(basename "$0"): error: ONLY=$ONLY is not a part: $PARTS" >&2; exit 2; }
S=../shared/data/shakespeare
R=${RUNS:-runs}
M=${M:-attnlab,oracle-topk}
export OMP_NUM_THREADS=1
run() {   # run MODEL CALIBRATION SAMPLES OUT [EVAL-WHY OPTIONS…]
  model=$1 cal=$2 samples=$3 out=$4; shift 4
  mkdir -p $out
  [ -f $cal ] && [ ! -f $out/calibration-8192.npz ] && cp $cal $out/calibration-8192.npz
  .venv/bin/attnlab eval --hf $model --task niah-multikey --haystack noise --lengths 8192 --depths 5 \
    --samples $samples --method $M --budget 0.1 --seed 0 --calibrate $S/train.txt.gz --calibrate-windows 1 \
    --out $out || exit 1
  # why the default lost the prompts full attention found (the step where its answer left the value)
  .venv/bin/attnlab eval-why --out $out --method attnlab --row parted --top 6 "$@"
}
if [ -z "$ONLY" ] || [ "$ONLY" = smollm2 ]; then
  run smollm2-135m $R/passkey-4k-8k-filler/calibration-8192.npz 4 $R/multikey-default-8k
fi
if [ -z "$ONLY" ] || [ "$ONLY" = gemma ]; then
  run gemma3-270m $R/passkey-gemma-8k-shakespeare/calibration-8192.npz 2 $R/multikey-gemma-8k --heads 2   # + layers, heads
fi

#!/bin/bash
# retrieval-variants-2k.sh's formats at 8,192 tokens, β = 0.1, test seed 0, run once.  Nothing is chosen here:
#   passkey-varied-8k            SmolLM2-135M, the pass key with per-sample instruction, repetition and phrasing
#                                (the evaluation's phrasings; the calibration never sees them), the filler, no template;
#                                10 prompts over 5 depths
#   niah-question-first-8k       SmolLM2-135M, eval's NIAH (chat template, noise haystack), the question first; 10 prompts
#   passkey-varied-gemma-8k      Gemma-3-270M on passkey-varied, 5 depths × 1 sample
# methods: full, attnlab (the recommended default), minference, snapkv, streaming-llm, quest, the per-row top-k oracle.
# The calibrations (one window of Shakespeare's train plays) are those retrieval-4k-8k.sh and retrieval-gemma-8k-16k.sh
# made, where they ran first (a calibration does not depend on the prompts).  One thread a process.  M=… narrows the
# methods, ONLY=passkey|niah|gemma the parts (they can run side by side, one core each).
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
PARTS="passkey niah gemma"   # ONLY=PART runs one of them (none: all)
[ -z "$ONLY" ] || [[ " $PARTS " == *" $ONLY "* ]] || {
  echo "$(basename "$0"): error: ONLY=$ONLY is not a part: $PARTS" >&2; exit 2; }
S=../shared/data/shakespeare
R=${RUNS:-runs}
M=${M:-attnlab,minference,snapkv,streaming-llm,quest,oracle-topk}
export OMP_NUM_THREADS=1
run() {   # run MODEL CALIBRATION SAMPLES OUT [eval options…]
  model=$1 cal=$2 samples=$3 out=$4; shift 4
  mkdir -p $out
  [ -f $cal ] && [ ! -f $out/calibration-8192.npz ] && cp $cal $out/calibration-8192.npz
  .venv/bin/attnlab eval --hf $model --lengths 8192 --depths 5 --samples $samples --method $M --budget 0.1 --seed 0 \
    --calibrate $S/train.txt.gz --calibrate-windows 1 "$@" --out $out || exit 1
}
smol=$R/passkey-4k-8k-filler/calibration-8192.npz
if [ -z "$ONLY" ] || [ "$ONLY" = passkey ]; then
  run smollm2-135m $smol 2 $R/passkey-varied-8k --task passkey-varied --haystack noise --template none
fi
if [ -z "$ONLY" ] || [ "$ONLY" = niah ]; then
  run smollm2-135m $smol 2 $R/niah-question-first-8k --task niah --haystack noise --template auto --question before
fi
if [ -z "$ONLY" ] || [ "$ONLY" = gemma ]; then
  run gemma3-270m $R/passkey-gemma-8k-shakespeare/calibration-8192.npz 1 $R/passkey-varied-gemma-8k \
    --task passkey-varied --haystack noise --template none
fi

#!/bin/bash
# Single-needle retrieval on three prompt formats, SmolLM2-135M, 2,048 tokens, β = 0.1, 10 prompts over 5 depths:
#   niah-2k                 eval's NIAH (RULER's needle and question, the chat template, RULER's noise haystack)
#   passkey-2k-filler       Mohtashami & Jaggi's pass key in plain text (no chat template), the repeated filler, as a
#                           user's plain probe: no instruction before the context, the key said twice (passkey-bare)
#   passkey-2k-shakespeare  the same pass-key probe in real text (Shakespeare's plays)
#   passkey-2k-shakespeare-instructed  the paper's own prompt (its instruction before the context) in the same text
# methods: full, attnlab (the recommended default), attnlab-retrieval (its own defaults), minference, snapkv,
# streaming-llm, quest, duo-attention (the gates attnlab ships), the per-row top-k oracle.  SPLIT=dev: seed 1 and the
# dev plays (settings are checked there); SPLIT=test: seed 0 and the test plays, run once.  The calibration (train
# plays, 1 window) is made once and copied to the other folders (it does not depend on the prompts).  One process at a
# time, one thread.
# M=… and ONLY=filler|shakespeare|shakespeare-instructed|niah narrow a run (a dev check of the default: M=attnlab,attnlab-retrieval).
# Then why attnlab-retrieval lost the plain pass keys and attnlab the NIAH prompts it lost (eval-why).
cd "$(dirname "$0")/../.."
PARTS="filler shakespeare shakespeare-instructed niah"   # ONLY=PART runs one of them (none: all)
[ -z "$ONLY" ] || [[ " $PARTS " == *" $ONLY "* ]] || {
  echo "$(basename "$0"): error: ONLY=$ONLY is not a part: $PARTS" >&2; exit 2; }
S=../shared/data/shakespeare
SPLIT=${SPLIT:-dev}
if [ "$SPLIT" = dev ]; then SEED=1; else SEED=0; fi
M=${M:-attnlab,attnlab-retrieval,minference,snapkv,streaming-llm,quest,oracle-topk,duo-attention}
COMMON="--hf smollm2-135m --lengths 2048 --depths 5 --samples 2 --method $M --budget 0.1 --calibrate $S/train.txt.gz
  --calibrate-windows 1 --seed $SEED"
export OMP_NUM_THREADS=1
first=runs/passkey-2k-filler-$SPLIT
run() {   # run OUT [eval options…]: the calibration of the first run copied in before
  out=$1; shift
  if [ "$out" != "$first" ] && [ -f $first/calibration-2048.npz ] && [ ! -f $out/calibration-2048.npz ]; then
    mkdir -p $out && cp $first/calibration-2048.npz $out/
  fi
  .venv/bin/attnlab eval $COMMON "$@" --out $out
}
if [ -z "$ONLY" ] || [ "$ONLY" = filler ]; then run runs/passkey-2k-filler-$SPLIT --task passkey-bare --haystack noise --template none; fi
if [ -z "$ONLY" ] || [ "$ONLY" = shakespeare ]; then run runs/passkey-2k-shakespeare-$SPLIT --task passkey-bare --haystack $S/$SPLIT.txt.gz --template none; fi
if [ -z "$ONLY" ] || [ "$ONLY" = shakespeare-instructed ]; then run runs/passkey-2k-shakespeare-instructed-$SPLIT --task passkey --haystack $S/$SPLIT.txt.gz --template none; fi
if [ -z "$ONLY" ] || [ "$ONLY" = niah ]; then run runs/niah-2k-$SPLIT --task niah --haystack noise --template auto; fi
# why attnlab-retrieval's own defaults lose the plain pass key (the row that predicts the value's first digit)
if [ -z "$ONLY" ] || [ "$ONLY" = filler ]; then .venv/bin/attnlab eval-why --out runs/passkey-2k-filler-$SPLIT --method attnlab-retrieval; fi
if [ -z "$ONLY" ] || [ "$ONLY" = niah ]; then .venv/bin/attnlab eval-why --out runs/niah-2k-$SPLIT --method attnlab --row parted --top 6 --layers; fi

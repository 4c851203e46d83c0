#!/bin/bash
# The pass key and eval's NIAH at 4,096 and 8,192 tokens, SmolLM2-135M, β = 0.1, 10 prompts over 5 depths, with
# perplexity on one Shakespeare test window beside (the same run, the same plans):
#   passkey-4k-8k-filler  Mohtashami & Jaggi's pass key in plain text, no instruction, the key said twice
#                         (passkey-bare), the repeated filler, no chat template
#   niah-4k-8k            eval's NIAH (RULER's needle and question, the chat template, RULER's noise haystack)
# methods: full, attnlab (the recommended default), minference, snapkv, streaming-llm, quest, and the per-row top-k
# oracle (oracle-topk: the ceiling of a prefill that keeps β of each row; ~100 s a prompt at 8K).  Test seed 0, run
# once (the default's options were fixed before; nothing is chosen here).  One calibration window of Shakespeare's
# train text per length, made by the first run and copied to the second.  One process, one thread.
# M=…, LENGTHS=… and ONLY=filler|niah narrow a run.  The per-head band plan alone (attnlab-band), the perplexity
# target's reference, was added to niah-4k-8k afterwards: ONLY=niah M=attnlab-band.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
PARTS="filler niah"   # ONLY=PART runs one of them (none: all)
[ -z "$ONLY" ] || [[ " $PARTS " == *" $ONLY "* ]] || {
  echo "$(basename "$0"): error: ONLY=$ONLY is not a part: $PARTS" >&2; exit 2; }
S=../shared/data/shakespeare
M=${M:-attnlab,minference,snapkv,streaming-llm,quest,oracle-topk}
LENGTHS=${LENGTHS:-4096,8192}
COMMON="--hf smollm2-135m --lengths $LENGTHS --depths 5 --samples 2 --method $M --budget 0.1
  --calibrate $S/train.txt.gz --calibrate-windows 1 --ppl $S/test.txt.gz --ppl-windows 1 --seed 0"
export OMP_NUM_THREADS=1
first=${RUNS:-runs}/passkey-4k-8k-filler
if [ -z "$ONLY" ] || [ "$ONLY" = filler ]; then
  .venv/bin/attnlab eval $COMMON --task passkey-bare --haystack noise --template none --out $first
fi
if [ -z "$ONLY" ] || [ "$ONLY" = niah ]; then
  out=${RUNS:-runs}/niah-4k-8k
  mkdir -p $out
  for n in ${LENGTHS//,/ }; do   # the calibration does not depend on the prompts
    [ -f $first/calibration-$n.npz ] && [ ! -f $out/calibration-$n.npz ] && cp $first/calibration-$n.npz $out/
  done
  .venv/bin/attnlab eval $COMMON --task niah --haystack noise --template auto --out $out
fi

#!/bin/bash
# The prompt formats of `attnlab eval` no other recipe measures, at 2,048 tokens, β = 0.1, 10 prompts over 5 depths,
# test seed 0, run once.  The default's options were fixed before: nothing is chosen here (its rows were rerun once
# after band-floor-dev.sh chose its band floor on dev prompts).
#   passkey-varied-2k        the pass key with, per sample, an instruction or none, the key once or twice and one of
#                            several phrasings of the needle, the question and the answer (the evaluation's phrasings;
#                            the calibration never sees them), the repeated filler, no chat template
#   passkey-once-2k          the pass key stated once ("The pass key is 71432."), the paper's instruction, no template
#   passkey-chat-2k          the plain probe (passkey-bare) inside SmolLM2's chat template (--template chat)
#   passkey-question-first-2k  the plain probe with the question on its own line before the context (--question before)
#   niah-question-first-2k   eval's NIAH (RULER's needle, the chat template, the noise haystack), the question first
#   passkey-varied-gemma-2k  Gemma-3-270M on passkey-varied (no chat template)
# methods: full, attnlab (the recommended default), minference, snapkv, streaming-llm, quest, the per-row top-k oracle;
# on SmolLM2 also duo-attention (the gates attnlab ships, duo-gates.sh: none for Gemma-3 yet).
# One calibration window of Shakespeare's train plays per model, made by the first run and copied to the next ones
# (it does not depend on the prompts).  One thread a process.  M=… narrows the methods, ONLY=smollm2|gemma the models
# (they can run side by side, one core each); the same formats at 8K: retrieval-variants-8k.sh.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
PARTS="smollm2 gemma"   # ONLY=PART runs one of them (none: all)
[ -z "$ONLY" ] || [[ " $PARTS " == *" $ONLY "* ]] || {
  echo "$(basename "$0"): error: ONLY=$ONLY is not a part: $PARTS" >&2; exit 2; }
S=../shared/data/shakespeare
R=${RUNS:-runs}
M0=attnlab,minference,snapkv,streaming-llm,quest,oracle-topk   # the default methods (M=… names others)
export OMP_NUM_THREADS=1
run() {   # run MODEL OUT [eval options…]: the model's first calibration copied in before
  model=$1 out=$2; shift 2
  first=$R/calibration-$model-2048.npz
  mkdir -p $out
  [ -f $first ] && [ ! -f $out/calibration-2048.npz ] && cp $first $out/calibration-2048.npz
  .venv/bin/attnlab eval --hf $model --lengths 2048 --depths 5 --samples 2 --method ${M:-$M0$ADD} --budget 0.1 \
    --seed 0 --calibrate $S/train.txt.gz --calibrate-windows 1 "$@" --out $out || exit 1
  [ -f $first ] || cp $out/calibration-2048.npz $first
}
if [ -z "$ONLY" ] || [ "$ONLY" = smollm2 ]; then
  ADD=,duo-attention
  run smollm2-135m $R/passkey-varied-2k --task passkey-varied --haystack noise --template none
  run smollm2-135m $R/passkey-once-2k --task passkey-once --haystack noise --template none
  run smollm2-135m $R/passkey-chat-2k --task passkey-bare --haystack noise --template chat
  run smollm2-135m $R/passkey-question-first-2k --task passkey-bare --haystack noise --template none --question before
  run smollm2-135m $R/niah-question-first-2k --task niah --haystack noise --template auto --question before
  # why the default lost what it lost: the step where its answer left the value, or the prompt's last row (the
  # answer's first token) where it never started; and which layers' supports lose it (--layers)
  .venv/bin/attnlab eval-why --out $R/passkey-varied-2k --method attnlab --row parted --top 6 --layers
  .venv/bin/attnlab eval-why --out $R/passkey-chat-2k --method attnlab --row first --top 6 --layers
fi
if [ -z "$ONLY" ] || [ "$ONLY" = gemma ]; then
  ADD=
  run gemma3-270m $R/passkey-varied-gemma-2k --task passkey-varied --haystack noise --template none
fi

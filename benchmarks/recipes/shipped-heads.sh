#!/bin/bash
# The head detectors attnlab ships (attnlab/heads_shipped/MODEL.json), read by `attnlab attention --hf MODEL --file T`
# when --heads is not given: `attnlab heads` with the settings of docs/llm-heads.md (1,024 tokens, 4 random inputs,
# 8 needle prompts, seed 0), then `ship` keeps of its heads.json what the explorer reads (the detector tables,
# thresholds and named heads, the command and the model's shape: no maps), checked by the heads schema.
# The full output folders stay in runs/shipped-heads/MODEL; ONLY="gemma3-270m" makes only that one.
cd "$(dirname "$0")/../.."   # the repository root
export OMP_NUM_THREADS=1
ALL="smollm2-135m gemma3-270m"
for want in $ONLY; do   # an unknown model: said and refused before anything runs
  [[ " $ALL " == *" $want "* ]] || { echo "shipped-heads.sh: ONLY=$want: not one of $ALL" >&2; exit 2; }
done
status=0
for model in $ALL; do
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $model "* ]]; then continue; fi
  out=${RUNS:-runs}/shipped-heads/$model
  .venv/bin/attnlab heads --hf $model --length 1024 --samples 4 --prompts 8 --seed 0 --out $out --force --quiet \
    && .venv/bin/python -c "import sys; from attnlab.llm.heads.shipped_heads import ship; print(ship(*sys.argv[1:]))" \
       $out/heads.json $model || status=1
done
exit $status

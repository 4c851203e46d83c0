#!/bin/bash
# kvpress's own presses (SnapKV, StreamingLLM, Expected Attention, PyramidKV, AdaKV) on the multi-key prompts of
# multikey-2k.sh, scored the same way, added to its baselines folder as reference rows (†). Needs `make reference-env`
# (.venv-kvpress) and multikey-2k.sh's baselines folder.
cd "$(dirname "$0")/../.."   # the repository root
R=${RUNS:-runs}/multikey-2k/baselines
W=${RUNS:-runs}/kvpress-2k-prompts   # the prompts and kvpress's raw answers (not published: the scored rows land in $R)
mkdir -p $W
.venv/bin/python benchmarks/kvpress_eval.py export $R $W/prompts.json
.venv-kvpress/bin/python benchmarks/kvpress_answers.py $W/prompts.json $W/answers.jsonl \
  --presses snapkv,streaming-llm,expected-attention,pyramidkv,adakv-snapkv --compressions 0.95,0.9
.venv/bin/python benchmarks/kvpress_eval.py import $R $W/answers.jsonl --prompts $W/prompts.json

#!/bin/bash
# kvpress's reference presses on the 2K multi-key test prompts (after r3s4-mk-test.sh and r3s4-mk-b05.sh; needs `make reference-env`)
cd "$(dirname "$0")/../.."   # the repository root
.venv/bin/python benchmarks/kvpress_eval.py export runs/r4/smol-2k-mk-test-baselines runs/r4/mk-P.json
.venv-kvpress/bin/python benchmarks/kvpress_answers.py runs/r4/mk-P.json runs/r4/mk-A.jsonl \
  --presses snapkv,streaming-llm,expected-attention,pyramidkv,adakv-snapkv --compressions 0.95,0.9
.venv/bin/python benchmarks/kvpress_eval.py import runs/r4/smol-2k-mk-test-baselines runs/r4/mk-A.jsonl --prompts runs/r4/mk-P.json

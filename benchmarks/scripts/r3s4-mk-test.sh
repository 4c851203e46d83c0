#!/bin/bash
# test (seed 0, run once): the dev-chosen retrieval_heads=32:blocks=8 beside the default, multi-key and single needle, 2K;
# OUT, METHODS: another folder and other methods on the same prompts (the first command alone; r3s7-*.sh)
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey,niah --depths 5 --samples 2 --lengths 2048 --haystack noise \
  --method ${METHODS:-attnlab-retrieval,attnlab-retrieval:retrieval_heads=32:blocks=8} \
  --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --ppl ../shared/data/shakespeare/test.txt.gz --ppl-windows 1 --out ${OUT:-runs/r4/smol-2k-mk-test}
[ -n "$METHODS" ] && exit 0
# the published baselines and the oracle on the same prompts (their own folder: MInference's calibration grid stays out of attnlab's)
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --depths 5 --samples 2 --lengths 2048 --haystack noise \
  --method streaming-llm,snapkv,quest,minference:patterns=vs,oracle-topk \
  --budget 0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --out runs/r4/smol-2k-mk-test-baselines

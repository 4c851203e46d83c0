#!/bin/bash
# β = 5 % on the same 2K test prompts (budgets grow in the session-4 folders; earlier rows stay)
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey,niah --depths 5 --samples 2 --lengths 2048 --haystack noise \
  --method attnlab-retrieval,attnlab-retrieval:retrieval_heads=32:blocks=8 \
  --budget 0.05,0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --ppl ../shared/data/shakespeare/test.txt.gz --ppl-windows 1 --out runs/r4/smol-2k-mk-test
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah-multikey --depths 5 --samples 2 --lengths 2048 --haystack noise \
  --method streaming-llm,snapkv,quest,minference:patterns=vs,oracle-topk \
  --budget 0.05,0.1 --calibrate ../shared/data/shakespeare/train.txt.gz --calibrate-windows 1 --out runs/r4/smol-2k-mk-test-baselines

#!/bin/bash
# Single needle at 2,048 tokens: SmolLM2-135M, RULER's noise haystack, 5 depths × 2 samples (seed 0); full attention,
# attnlab (the default), attnlab-retrieval, the published baselines (StreamingLLM, SnapKV, Quest, MInference's
# vertical-slash) and the per-row top-k oracle, all at β = 10 %; perplexity on one 2,048-token window of Shakespeare's
# test text beside. Resumable: a method added to --method measures only its own rows.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
OMP_NUM_THREADS=2 .venv/bin/attnlab eval --hf smollm2-135m --task niah --lengths 2048 --depths 5 --samples 2 --haystack noise \
  --method attnlab-retrieval,streaming-llm,snapkv,quest,minference:patterns=vs,oracle-topk,attnlab --budget 0.1 \
  --calibrate $S/train.txt.gz --calibrate-windows 1 --ppl $S/test.txt.gz --ppl-windows 1 --out ${RUNS:-runs}/niah-2k

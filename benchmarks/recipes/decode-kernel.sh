#!/bin/bash
# The fused decoding step (decode_kernel.c) against SDPA, one query per head over L cached keys, every head reading every
# key (SDPA's work): the keys of a KV head in one part, or split across the 2 threads in parts of ≥ DECODE_CHUNK slots
# (FlashDecoding's split, as attnlab runs it); Gemma-3-270M's layer (1 KV head of 4 query heads, d = 256) and
# SmolLM2-135M's (3 of 3, d = 64); median of 300 calls.
cd "$(dirname "$0")/../.."   # the repository root
export OMP_NUM_THREADS=2
OUT=${RUNS:-runs}/decode-kernel
mkdir -p $OUT
.venv/bin/python benchmarks/decode_kernel_speed.py --threads 2 --json $OUT/decode-kernel.jsonl

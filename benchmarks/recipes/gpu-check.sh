#!/bin/bash
# attnlab on one CUDA GPU, each figure measured on an NVIDIA H200 (torch 2.11 + CUDA 13.0, transformers 5.24, bf16):
# every method's logits on the GPU against the CPU's (tiny random Llama and Gemma-3), the CUDA tests, attention alone
# at Llama-3.1-8B's head shape and whole-model prefill / decoding at SmolLM2-135M's and Gemma-3-270M's shapes (random
# weights) against SDPA, and a layer's sink columns in FlexAttention's BlockMask or gathered beside it.  The first
# four commands ran at the commit where the sinks were still kept in the BlockMask (up to 8 a head) and before the
# fix of the structured mechanism's CUDA path; gpu_columns.py measured that choice (every column now gathered), the
# last pytest the fix.  No internet there: transformers 5.24's wheel carried.
cd "$(dirname "$0")/../.."   # the repository root
export OMP_NUM_THREADS=8 PYTHONUNBUFFERED=1
OUT=${RUNS:-runs}/gpu-check
mkdir -p $OUT
python3 benchmarks/gpu_check.py --skip tests,logits --lengths 8192,32768,131072 --profile --errors $OUT/errors.txt | tee $OUT/speed.log
python3 benchmarks/gpu_check.py --skip tests,speed | tee $OUT/logits.log
python3 benchmarks/gpu_check.py --skip logits,speed --test-timeout 85 | tee $OUT/tests.log
python3 benchmarks/gpu_columns.py | tee $OUT/columns.log
python3 -m pytest -o addopts= -q -p no:logging -k cuda tests/test_kernel_flex.py | tee $OUT/structured-tests.log
python3 benchmarks/gpu_records.py --gpu "NVIDIA H200" --out $OUT $OUT/speed.log $OUT/logits.log $OUT/tests.log $OUT/columns.log $OUT/structured-tests.log

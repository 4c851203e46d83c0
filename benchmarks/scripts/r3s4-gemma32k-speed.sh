#!/bin/bash
# Gemma-3-270M at 32K: prefill SDPA (the model's own attention) vs attnlab-retrieval β 0.1, quiet, 2 threads
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
export OMP_NUM_THREADS=2
mkdir -p runs/r4/gemma32k-speed
.venv/bin/python benchmarks/llm_structured.py calibrate --model gemma3-270m --lengths 32768 --windows 1 --budgets 0.1 --out runs/r4/gemma32k-speed --system-malloc
.venv/bin/python benchmarks/llm_structured.py speed --model gemma3-270m --n 32768 --method attnlab-retrieval --budget 0.1 --threads 2 --new-tokens 8 --out runs/r4/gemma32k-speed --system-malloc
.venv/bin/python benchmarks/llm_structured.py speed --model gemma3-270m --n 32768 --method sdpa --threads 2 --new-tokens 8 --out runs/r4/gemma32k-speed --system-malloc
.venv/bin/python benchmarks/llm_structured.py speed --model gemma3-270m --n 32768 --method attnlab-retrieval --budget 0.1 --threads 2 --new-tokens 8 --out runs/r4/gemma32k-speed --system-malloc

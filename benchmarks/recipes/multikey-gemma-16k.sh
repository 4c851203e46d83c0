#!/bin/bash
# Multi-key needles on Gemma-3-270M at 16,384 tokens with the recommended default, β = 10 %, test seed 0, run once.
# RULER's niah-multikey (4 keys, one asked) on the noise haystack, 3 depths × 2 samples (a full prefill at 16K is
# ~5 min on one thread, one oracle row ~17 min).  Nothing is chosen here (the default was fixed before).
# methods: full, attnlab, the per-row top-k oracle (the target's pair) and StreamingLLM, SnapKV, Quest; M=… adds
# minference (its pattern search at 16K) into the same folder, the rows already there reused.  The calibration (one
# window of Shakespeare's train plays) is the one retrieval-gemma-8k-16k.sh made, where it ran first.
# Two processes, one thread each, sharing the prompts (torchrun: rank r answers the prompts of index ≡ r mod 2, every
# method of them; rank 0 folds the two files and writes the table); RANKS=1 runs one process.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
S=../shared/data/shakespeare
R=${RUNS:-runs}
M=${M:-attnlab,oracle-topk,streaming-llm,snapkv,quest}
out=$R/multikey-gemma-16k
cal=$R/passkey-gemma-16k-shakespeare/calibration-16384.npz
export OMP_NUM_THREADS=1
mkdir -p $out
[ -f $cal ] && [ ! -f $out/calibration-16384.npz ] && cp $cal $out/calibration-16384.npz
.venv/bin/torchrun --standalone --nproc_per_node ${RANKS:-2} -m attnlab eval --hf gemma3-270m --task niah-multikey \
  --haystack noise --lengths 16384 --depths 3 --samples 2 --method $M --budget 0.1 --seed 0 \
  --calibrate $S/train.txt.gz --calibrate-windows 1 --out $out || exit 1
# why the default lost the prompts full attention found (the step where its answer left the value)
.venv/bin/attnlab eval-why --out $out --method attnlab --row parted --top 6

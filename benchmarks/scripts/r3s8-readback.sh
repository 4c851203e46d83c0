#!/bin/bash
# session 8: the dev-chosen read-back configuration (r3s6-mk-4k-dev.sh with METHODS on runs/r8/smol-4k-mk-dev): the
# other-blocks configuration whose retrieval heads decode from band, columns and the 32 key blocks their tail rows
# attended most (tail_keep=512) and whose planned heads read back 8 pages of evicted keys a step (pages=8, the store
# off the resident cache) — run once on session 7's test prompts, in copies of session 7's folders (their rows reused)
cd "$(dirname "$0")/../.."
mkdir -p runs/r8
for x in smol-4k-mk-20 smol-8k-mk-test smol-24k-ppl3 smol-8k-ppl3 smol-2k-mk-test smol-4k-mk-test; do
  [ -d runs/r8/$x ] || [ ! -d runs/r7/$x ] || cp -r runs/r7/$x runs/r8/$x
done
R=runs/r8 M=${M:-attnlab-retrieval:retrieval_heads=32:blocks=8:other_blocks=4:tail_keep=512:pages=8} \
  bash benchmarks/scripts/r3s7-other-blocks.sh

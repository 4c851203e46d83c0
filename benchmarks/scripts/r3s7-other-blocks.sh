#!/bin/bash
# session 7: the dev-chosen attnlab-retrieval:retrieval_heads=32:blocks=8:other_blocks=4 (r3s6-mk-4k-dev.sh with
# METHODS on $R/smol-4k-mk-dev) run once on the test prompts — 4K multi-key (20 prompts), 8K single needle and
# multi-key, 2K and 4K (10 prompts) multi-key and single needle, perplexity in round 2's setting at 4K / 2K / 8K — each in a copy of the earlier folder (their calibrations
# and rows reused, the new method's rows added); M, R: another method and runs folder (r3s8-readback.sh)
cd "$(dirname "$0")/../.."
M=${M:-attnlab-retrieval:retrieval_heads=32:blocks=8:other_blocks=4}
R=${R:-runs/r7}
copy() { [ -d "$2" ] || cp -r "$1" "$2"; }
mkdir -p $R
copy runs/r5/smol-4k-mk-20 $R/smol-4k-mk-20 && OUT=$R/smol-4k-mk-20 METHODS=$M bash benchmarks/scripts/r3s5-mk-4k-20.sh
copy runs/r4/smol-8k-mk-test $R/smol-8k-mk-test && OUT=$R/smol-8k-mk-test METHODS=$M bash benchmarks/scripts/r3s4-mk-8k.sh
copy runs/r3/smol-24k-ppl3 $R/smol-24k-ppl3 && copy runs/r3/smol-8k-ppl3 $R/smol-8k-ppl3 && \
  S=/work/shared/data/shakespeare OUT24=$R/smol-24k-ppl3 OUT8=$R/smol-8k-ppl3 METHODS=$M bash benchmarks/scripts/r3s4-ppl3.sh
copy runs/r4/smol-2k-mk-test $R/smol-2k-mk-test && OUT=$R/smol-2k-mk-test METHODS=$M bash benchmarks/scripts/r3s4-mk-test.sh
copy runs/r4/smol-4k-mk-test $R/smol-4k-mk-test && OUT=$R/smol-4k-mk-test METHODS=$M bash benchmarks/scripts/r3s4-mk-4k.sh

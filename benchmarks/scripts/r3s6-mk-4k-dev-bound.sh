#!/bin/bash
# session 6: the 4K multi-key dev prompts (seed 1) — is the first needle lost to the budget? the per-row top-k oracle at
# β 0.1, and 24 retrieval heads full in both phases (tail=0), in session 6's dev folder
METHODS=oracle-topk,attnlab-retrieval:retrieval_heads=24:tail=0 exec bash "$(dirname "$0")/r3s6-mk-4k-dev.sh"

#!/bin/bash
# session 6: key blocks beyond the retrieval heads — 128 / 270 heads with 4 key blocks of 16 and 16-row tails, on the 4K
# multi-key dev prompts (seed 1), in session 6's dev folder
METHODS=attnlab-retrieval:retrieval_heads=128:blocks=4:tail=16,attnlab-retrieval:retrieval_heads=270:blocks=4:tail=16 \
  exec bash "$(dirname "$0")/r3s6-mk-4k-dev.sh"

#!/bin/bash
# How well read-back's page score ranks the pages a decoding query reads (benchmarks/page_ranking.py): full attention
# on one window of 8,192 tokens of Shakespeare's dev plays, its last 32 rows, every head of every layer without a
# sliding window; the candidate pages lie before a band of 128 keys; K = 16 pages.  recall@16: the share of the best
# 16 pages' attention mass that the 16 pages of largest score hold; hit@16: the page read most is among them.  Quest's
# bound (what read-back ranks by) against the page's mean key, on (head, row) whose candidates hold ≥ 25 % of the
# mass (half: 8 pages by the bound, 8 by the mean key among the rest).  Dev text: a page score is a setting, to be
# chosen here, not on test.  Then the same on the first window of the train plays at each length the eval runs —
# what the default's calibration measures (page_score=calibrated: the split where its recall@16 beats the bound's;
# attnlab.llm.calibration.page_ranking) — into page_ranking_train.jsonl.  One thread.
cd "$(dirname "$0")/../.."   # the repository root; ../shared holds the data
mkdir -p ${RUNS:-runs}/page-ranking
OMP_NUM_THREADS=1 .venv/bin/python benchmarks/page_ranking.py --hf smollm2-135m gemma3-270m --n 8192 --json \
  > ${RUNS:-runs}/page-ranking/page_ranking.jsonl
T=../shared/data/shakespeare/train.txt.gz
{ for n in 2048 4096 8192; do OMP_NUM_THREADS=1 .venv/bin/python benchmarks/page_ranking.py --hf smollm2-135m --data $T --n $n --json; done
  for n in 2048 8192 16384; do OMP_NUM_THREADS=1 .venv/bin/python benchmarks/page_ranking.py --hf gemma3-270m --data $T --n $n --json; done
} > ${RUNS:-runs}/page-ranking/page_ranking_train.jsonl

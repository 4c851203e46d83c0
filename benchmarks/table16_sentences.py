"""Table 16 on many sentences: random search vs the optimal fit, per checkpoint of a trained model.

The thesis's Table 16 rests on one 16-token sentence.  This script captures
the encoder self-attention of a run on every distinct source of a split with
at least ``--min-len`` tokens (default 2(2w + 1); EOS included; greedy translation as the decoder
input, which the encoder does not see), and compares the random-search
protocol (30 draws per family) with the optimal band + columns + sparse fit
(w, num_pos, s = n) on every head of every sentence — grouped by length, the
mean errors pooled (``attnlab.experiment.tables.over_sentences``).  It prints
the pooled ratio, the ratio at n = ``--n`` (the thesis's length) with its
spread over sentences, for each checkpoint given (default: the last one),
so that one sees whether training sharpens the heads.

    python benchmarks/table16_sentences.py runs/thesis-8 --data ../shared/data/tatoeba-en-it/test.tsv.gz --steps 500 789
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from attnlab.analysis.capture import capture
from attnlab.data import load_corpus
from attnlab.experiment.tables import default_min_len, over_sentences
from attnlab.train.checkpoint import list_checkpoints, load_run, load_weights


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--data", required=True, help="corpus spec; its --split is used")
    ap.add_argument("--split", default="test")
    ap.add_argument("--steps", type=int, nargs="*", default=[], help="checkpoint steps (default: the last)")
    ap.add_argument("--w", type=int, default=3)
    ap.add_argument("--num-pos", type=int, default=2)
    ap.add_argument("--attempts", type=int, default=30)
    ap.add_argument("--s-per-row", type=int, default=1, help="sparse entries of the fit, s = S·n (default 1: s = n)")
    ap.add_argument("--min-len", type=int, default=None, help="default 2(2w + 1): the band holds at most half a row")
    ap.add_argument("--n", type=int, default=16, help="the length reported on its own (the thesis's n)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    run = load_run(args.run)
    sources = list(dict.fromkeys(p.src for p in load_corpus(args.data, split=args.split)))
    min_len = default_min_len(args.w) if args.min_len is None else args.min_len
    sources = [s for s in sources if len(run.tokenizer.encode(s)) + 1 >= min_len]
    for step in args.steps or [list_checkpoints(args.run)[-1]]:
        load_weights(args.run / "checkpoints" / f"step_{step:07d}.safetensors", run.model, run.cfg)
        maps = capture(run.model.eval(), run.tokenizer, sources, name=args.run.name)
        pooled = over_sentences(maps, args.w, args.num_pos, args.attempts, min_len=min_len, s_per_row=args.s_per_row)
        group = pooled.get("by_length", {}).get(str(args.n), {})
        at_n = np.array(group.get("per_sentence", []))  # (sentences of length n,)
        row = {"step": step, "w": args.w, "num_pos": args.num_pos, "s_per_row": args.s_per_row, "sentences": pooled["sentences"],
               "pooled_random_error": round(pooled["mean_random_error"], 5),
               "pooled_optimal_error": round(pooled["mean_optimal_error"], 5),
               "pooled_ratio": round(pooled["ratio_of_means"], 2),
               f"sentences_n{args.n}": int(at_n.size),
               f"ratio_n{args.n}": round(group.get("ratio_of_means", float("nan")), 2),
               f"ratio_n{args.n}_per_sentence": [round(float(x), 2) for x in np.sort(at_n)],
               f"ratio_n{args.n}_per_head": [round(float(x), 1) for x in group.get("per_head", [])]}
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            spread = f"{at_n.min():.1f}–{at_n.max():.1f}" if at_n.size else "-"
            print(f"step {step} (w {args.w}, num_pos {args.num_pos}, s = {args.s_per_row}n): {row['sentences']} sentences with n >= {pooled['min_len']}: random {row['pooled_random_error']:.4f} "
                  f"vs optimal {row['pooled_optimal_error']:.5f} = {row['pooled_ratio']:.1f}×; "
                  f"n = {args.n}: {at_n.size} sentences, {row[f'ratio_n{args.n}']:.1f}× (per sentence {spread}; "
                  f"per head {', '.join(f'{x:.1f}' for x in row[f'ratio_n{args.n}_per_head'])})", flush=True)


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(torch.no_grad()(main))   # inference only: grad mode restored after, whatever main raises

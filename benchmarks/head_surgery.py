"""Head surgery on a trained run: every head replaced by its band + columns fit.

Each MultiHeadAttention of the model keeps, per head and per sentence, the
band of half-width w and the num_pos key columns of largest off-band mass of
its own weights (rows renormalised; ``attnlab.nn.surgery``); the model then
translates the test split again.  Prints BLEU/chrF before and after (greedy,
all references of each source) and the fraction of attention entries kept.

    python benchmarks/head_surgery.py runs/tatoeba --data ../shared/data/tatoeba-en-it/test.tsv.gz --budget 3,2 8,2
"""

from __future__ import annotations

import argparse
import json

from attnlab.data import load_corpus
from attnlab.nn.surgery import attention_modules, kept_fraction, surgery
from attnlab.train.checkpoint import load_run
from attnlab.train.evaluate import evaluate_pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--data", default="synthetic")
    ap.add_argument("--split", default="test")
    ap.add_argument("--budget", nargs="+", default=["3,2", "8,2"], help="w,num_pos pairs applied to every head")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    run = load_run(args.run_dir)
    corpus = load_corpus(args.data, split=args.split)
    before = evaluate_pairs(run.model, run.tokenizer, corpus, limit=args.limit or None)
    rows = [{"w": None, "num_pos": None, "bleu": before["bleu"], "chrf": before["chrf"], "kept": 1.0, "sentences": before["sentences"]}]
    H = run.cfg.heads
    from attnlab.option_values import numbers

    pairs = [numbers(budget, int, "--budget") for budget in args.budget]   # each w,num_pos: two canonical integers
    bad = [budget for budget, pair in zip(args.budget, pairs) if len(pair) != 2 or min(pair) < 0]
    if bad:
        raise SystemExit(f"head_surgery: error: --budget {bad[0]!r}: expected w,num_pos (two integers >= 0)")
    for w, g in pairs:
        choice = {key: ([w] * H, [g] * H) for key in attention_modules(run.model)}
        with surgery(run.model, choice) as mechanisms:
            after = evaluate_pairs(run.model, run.tokenizer, corpus, limit=args.limit or None)
            kept = kept_fraction(mechanisms)
        rows.append({"w": w, "num_pos": g, "bleu": after["bleu"], "chrf": after["chrf"], "kept": kept["all"], "sentences": after["sentences"]})
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'heads':>16s} {'BLEU':>6s} {'chrF':>6s} {'entries kept':>13s}   ({rows[0]['sentences']} sources, greedy)")
    for r in rows:
        name = "full" if r["w"] is None else f"w={r['w']}, num_pos={r['num_pos']}"
        print(f"{name:>16s} {r['bleu']:6.2f} {r['chrf']:6.2f} {r['kept']:12.1%}")


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

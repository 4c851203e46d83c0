"""Quality of each attention mechanism under one fixed CPU budget.

The same encoder–decoder (sizes below) is trained on the Tatoeba en–it
training file with each mechanism in every attention (Linformer in the encoder
and cross-attention only: it is not causal), for the same number of minutes,
then scored on the test split — greedy decoding, all Italian translations of
an English sentence as references (sacrebleu BLEU and chrF).

    python benchmarks/attention_quality.py --minutes 12 --jobs 2 --threads 1 [--mechanisms full structured ...] [--json]

The budget is per mechanism: ``--minutes`` of wall time on ``--threads``
cores.  With ``--jobs 2 --threads 1`` two mechanisms train side by side, one
core each (on a 2-core machine this keeps every run on one whole core, and
small models use one core better than two).  Keep the machine otherwise idle:
the budget is wall time, and the steps each run reached are printed.

Each run folder is kept under --out (default runs/quality/MECHANISM), so a
mechanism already trained is only evaluated again (use --force to retrain).
Tatoeba: CC-BY 2.0 FR, tatoeba.org.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import time
from pathlib import Path

import torch

from attnlab.config import ModelConfig, TrainConfig
from attnlab.data import load_corpus
from attnlab.nn.mechanisms import MECHANISMS
from attnlab.train.checkpoint import list_checkpoints, load_run
from attnlab.train.evaluate import evaluate_pairs
from attnlab.train.loop import train

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "tatoeba-en-it" / "train.tsv.gz"
NAMES = list(MECHANISMS)  # every registered mechanism


def model_config(mechanism: str, args) -> ModelConfig:
    return ModelConfig(
        d_model=args.d_model, heads=args.heads, layers=args.layers, ff=4 * args.d_model, attention=mechanism,
        attention_on="all" if MECHANISMS[mechanism].causal else "encoder,cross",  # no causal mask where it has none
        w=args.w, num_pos=args.num_pos, num_random=2 if "num_random" in MECHANISMS[mechanism].options else 0, proj_len=32, seed=args.seed,
    )


def run_one(job) -> dict:
    """Train (unless already trained) and score one mechanism; runs in its own process with --jobs > 1."""
    mechanism, args = job
    torch.set_num_threads(args.threads)
    out = Path(args.out) / mechanism
    trained = args.force or not list_checkpoints(out)
    if trained:
        tc = TrainConfig(data=args.data, vocab_size=8000, max_tokens=args.max_tokens, lr=args.lr, warmup=args.warmup,
                         minutes=args.minutes, precision="bf16", checkpoint_every=1000, dev_limit=0, seed=args.seed)
        train(model_config(mechanism, args), tc, out, force=True, quiet=True)
    run = load_run(out)
    test = load_corpus(args.data, split="test")
    t0 = time.perf_counter()
    scores = evaluate_pairs(run.model, run.tokenizer, test, limit=args.limit or None)
    # what the run was trained with (read back from it: an existing run is only scored again)
    return {"mechanism": mechanism, "seed": run.train_cfg.seed, "w": run.cfg.w, "num_pos": run.cfg.num_pos,
            "minutes": run.train_cfg.minutes, "threads": args.threads if trained else None, "steps": list_checkpoints(out)[-1], "bleu": round(scores["bleu"], 2),
            "chrf": round(scores["chrf"], 2), "sentences": scores["sentences"],
            "eval_s": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mechanisms", nargs="+", default=NAMES, choices=NAMES)
    ap.add_argument("--minutes", type=float, default=12.0, help="training budget per mechanism (wall minutes)")
    ap.add_argument("--threads", type=int, default=max(1, torch.get_num_threads()), help="torch threads per run")
    ap.add_argument("--jobs", type=int, default=1, help="mechanisms trained side by side")
    ap.add_argument("--w", type=int, default=8)
    ap.add_argument("--num-pos", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=2048, help="tokens per batch")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0, help="initialisation and batch order (run twice to see the noise)")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--out", default="runs/quality")
    ap.add_argument("--limit", type=int, default=0, help="score the first N test sources only (0 = all)")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    jobs = [(mechanism, args) for mechanism in args.mechanisms]
    pool = multiprocessing.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) if args.jobs > 1 else None
    with pool or contextlib.nullcontext():
        rows = []
        for row in (pool.imap if pool else map)(run_one, jobs):  # in --mechanisms order
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
    if not args.json:
        full = next((r["bleu"] for r in rows if r["mechanism"] == "full"), None)
        print(f"{'mechanism':12s} {'steps':>6s} {'BLEU':>6s} {'chrF':>6s} {'Δ vs full':>9s}")
        for r in rows:
            delta = f"{r['bleu'] - full:+.2f}" if full is not None else "-"
            print(f"{r['mechanism']:12s} {r['steps']:6d} {r['bleu']:6.2f} {r['chrf']:6.2f} {delta:>9s}")
        minutes = sorted({r["minutes"] for r in rows})
        print(f"budget {', '.join(map(str, minutes))} min of training each (read from the runs); this call: {args.threads} thread(s), "
              f"{args.jobs} run(s) at a time, w={args.w}, num_pos={args.num_pos}; test: {rows[0]['sentences'] if rows else 0} sources")


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

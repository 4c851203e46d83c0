"""Long-context language models: full (SDPA) attention against O(n·w) structured / band attention.

The same character-level DecoderLM (``--layers`` 4, ``--d-model`` 128, 4 heads,
pre-LN, dropout 0) is trained on the Shakespeare text for the same wall-clock
budget at each context n, once per mechanism, with attnlab's own training loop
(``attnlab.train.loop.train``: random windows of n + 1 characters, AdamW or
``--optimizer muon``, warm-up + cosine over the budget).  Each configuration runs in its own
subprocess, one after another, so that

* training tokens/s = tokens trained / seconds of training (the loop's clock);
* peak memory = the subprocess's peak resident set (``resource.getrusage``
  ``ru_maxrss``), printed with its growth over the same process just before
  training (Python, torch, the text read and encoded once);
* dev bits per char = ``attnlab.train.perplexity.evaluate_lm`` on the first
  ``--dev-tokens`` characters of ``dev.txt.gz`` in windows of n, with the
  final weights.

    python benchmarks/lm_long_context.py [--contexts 1024,4096,8192] [--mechanisms full,structured,band]
        [--seconds 120] [--batch-size 2] [--threads 1] [--optimizer adamw|muon] [--json results.json]

Prints one row per (context, mechanism) and, per context, the ratios of each
mechanism to full: tokens/s, peak-memory growth, dev bpc.  Structured is
``--w`` 64 with ``--num-pos`` 4 key columns (the first 4 characters of the
window); band is ``--w`` 64; both causal, through the chunked kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "shakespeare" / "train.txt.gz"


def one(args) -> dict:
    """Train one configuration in this process; return what was measured."""
    import torch

    from attnlab.allocator import keep_freed_memory
    from attnlab.config import ModelConfig, TrainConfig
    from attnlab.data.text import load_text
    from attnlab.train.checkpoint import load_run
    from attnlab.train.loop import train
    from attnlab.train.perplexity import evaluate_lm

    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the attnlab command does (attnlab/allocator.py)
    n, mech = args.context, args.mechanism
    mcfg = ModelConfig(model="lm", d_model=args.d_model, heads=args.heads, layers=args.layers, ff=4 * args.d_model,
                       dropout=0.0, max_len=n, norm="pre", attention=mech, w=args.w,
                       num_pos=args.num_pos if mech in ("structured", "global") else 0)
    with tempfile.TemporaryDirectory() as tmp:
        tcfg = TrainConfig(data=str(args.data), tokenizer="char", context=n, batch_size=args.batch_size, lr=args.lr,
                           optimizer=args.optimizer, muon_lr=args.muon_lr, warmup=args.warmup, label_smoothing=0.0,
                           minutes=args.seconds / 60, schedule="cosine",
                           checkpoint_every=10**9, eval_every=10**9, eval_tokens=args.dev_tokens, log_every=10)
        # the text read, a tokenizer trained and the stream encoded once before measuring the base, so that
        # the growth over it is the model's training (train() repeats these steps in memory already paged in)
        from attnlab.data import Tokenizer
        from attnlab.data.text import encode_text, read_text

        text = read_text(str(args.data), "train")
        encode_text(Tokenizer.train_char([text]), text)
        del text
        base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = train(mcfg, tcfg, Path(tmp) / "run", quiet=True)
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        run = load_run(Path(tmp) / "run")
        dev = evaluate_lm(run.model, load_text(str(args.data), "dev", run.tokenizer), n, limit=args.dev_tokens)
    return {"context": n, "mechanism": mech, "steps": result.steps, "tokens": result.tokens, "seconds": result.seconds,
            "tokens_per_s": result.tokens / result.seconds, "peak_mb": peak_kb / 1024, "base_mb": base_kb / 1024,
            "dev_loss": dev["loss"], "dev_bpc": dev["bpc"], "dev_tokens": dev["tokens"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--contexts", default="1024,4096,8192")
    p.add_argument("--mechanisms", default="full,structured,band")
    p.add_argument("--seconds", type=float, default=120.0, help="training wall-clock budget per configuration")
    p.add_argument("--batch-size", type=int, default=2, help="windows per step (the same at every context)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--w", type=int, default=64)
    p.add_argument("--num-pos", type=int, default=4)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--optimizer", choices=["adamw", "muon"], default="adamw", help="as `attnlab train --optimizer`")
    p.add_argument("--muon-lr", type=float, default=0.02, help="Muon's rate for the hidden matrices (--optimizer muon)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--dev-tokens", type=int, default=32768)
    p.add_argument("--threads", type=int, default=1, help="torch threads (2 OpenMP threads on a loaded 2-core machine measure contention)")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--context", type=int, help=argparse.SUPPRESS)
    p.add_argument("--mechanism", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args)))
        return
    if not args.data.is_file():
        sys.exit(f"lm_long_context: error: {args.data} not found (the Shakespeare text of ../shared/data)")
    from attnlab.option_values import items, numbers

    contexts = numbers(args.contexts, int, "--contexts")    # canonical integers, no empty or repeated item
    mechanisms = items(args.mechanisms, "--mechanisms")
    rows = []
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    passthrough = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in
                   ("seconds", "batch_size", "layers", "heads", "d_model", "w", "num_pos", "lr", "optimizer", "muon_lr", "warmup",
                    "dev_tokens", "threads", "data")]
    print(f"char LM: {args.layers} layers, d {args.d_model}, {args.heads} heads, batch {args.batch_size} windows, "
          f"{args.seconds:.0f} s of training per configuration, {args.threads} threads; structured/band w = {args.w}, "
          f"structured columns g = {args.num_pos}", flush=True)
    print(f"{'context':>8} {'mechanism':>11} {'steps':>6} {'tokens/s':>9} {'peak MB':>8} {'+MB':>7} {'dev bpc':>8}", flush=True)
    for n in contexts:
        for mech in mechanisms:
            cmd = [sys.executable, __file__, "--one", f"--context={n}", f"--mechanism={mech}", *passthrough]
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode != 0:
                tail = (r.stderr.strip().splitlines() or ["?"])[-1]
                print(f"{n:>8} {mech:>11}  failed: {tail}", flush=True)
                rows.append({"context": n, "mechanism": mech, "error": tail})
                continue
            row = json.loads(r.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{n:>8} {mech:>11} {row['steps']:>6} {row['tokens_per_s']:>9,.0f} {row['peak_mb']:>8,.0f} "
                  f"{row['peak_mb'] - row['base_mb']:>7,.0f} {row['dev_bpc']:>8.3f}", flush=True)
    print("\nratios to full at the same context (tokens/s ×, memory growth ×, dev bpc difference):")
    for n in sorted({r["context"] for r in rows}):
        full = next((r for r in rows if r["context"] == n and r["mechanism"] == "full" and "error" not in r), None)
        for r in rows:
            if r["context"] != n or r["mechanism"] == "full" or "error" in r or full is None:
                continue
            growth = (r["peak_mb"] - r["base_mb"]) / max(full["peak_mb"] - full["base_mb"], 1e-9)
            print(f"  n = {n:>5} {r['mechanism']:>11}: {r['tokens_per_s'] / full['tokens_per_s']:5.2f}× tokens/s, "
                  f"{growth:5.2f}× memory growth, dev bpc {r['dev_bpc']:.3f} vs {full['dev_bpc']:.3f} "
                  f"({r['dev_bpc'] - full['dev_bpc']:+.3f})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    failed = [f"{r['mechanism']} at {r['context']}" for r in rows if "error" in r]
    if failed:   # the table holds what was measured; a configuration that failed is not a success
        print(f"lm_long_context: {len(failed)} of {len(rows)} configurations failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

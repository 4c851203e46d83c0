"""Structured inference of a real LLM: attnlab's per-head plans against StreamingLLM, MInference, DuoAttention.

    python benchmarks/llm_structured.py calibrate --lengths 2048,8192        # exact statistics on train text
    python benchmarks/llm_structured.py ppl --lengths 2048 --budgets 0.05,0.1,0.25,0.5 --windows 2
    flock /tmp/attnlab-cpu.lock python benchmarks/llm_structured.py speed --n 8192 --budget 0.1
    python benchmarks/llm_structured.py decode --model gemma3-270m --n 8192 --method attnlab --new-tokens 8 --rounds 24   # A/B, one process
    python benchmarks/llm_structured.py report                              # table + plot

Calibration windows come from ``train.txt.gz``, perplexity windows from ``test.txt.gz`` (text not
used for calibration).  Methods are looked up by name in the registry (``attnlab.llm.methods``),
prepared at length n (from the calibration when they need one) and applied as a context manager
that restores the model; a plan method keeps at most β of the causal entries at length n and runs
through the same attention function (``attnlab.llm.apply_plan``); ``full`` is the model's own SDPA.
Results go to ``--out`` as JSON lines (``ppl.jsonl``, ``speed.jsonl``, ``decode.jsonl``); ``report`` prints the table
and draws perplexity vs budget.  ``speed`` runs one configuration per process (its peak memory is the process's);
``decode`` times the decoding of a method against the model's own attention in one process, alternated chunk by chunk,
so that a drift of the machine's speed falls on both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlab.allocator import keep_freed_memory  # noqa: E402
from attnlab.llm.methods.method_specs import method_list  # noqa: E402
from attnlab.errors import UserError  # noqa: E402
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.calibration.statistics import ERR_ROWS, Calibration, calibrate  # noqa: E402
from attnlab.llm.eval.eval_settings import parse_method  # noqa: E402
from attnlab.llm.calibration.build import retrieval_calibration  # noqa: E402
from attnlab.llm.execution.attention import attention_modules  # noqa: E402
from attnlab.llm.execution.kv_cache import PlanLayer, kv_bytes, read_tokens, store_bytes  # noqa: E402
from attnlab.llm.eval.perplexity import perplexity  # noqa: E402
from attnlab.llm.plans.plan import model_shape  # noqa: E402
from attnlab.llm.models.text_windows import token_windows  # noqa: E402
from attnlab.llm.calibration.page_ranking import add_page_ranking  # noqa: E402
from attnlab.masks import visible  # noqa: E402
from attnlab.progress import LineProgress  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "shakespeare"  # the default of --data: a folder of train/dev/test.txt(.gz)


def load(spec: str):
    """The model and tokenizer (attnlab.llm.models.loading when present, else a local HF folder)."""
    try:
        from attnlab.llm.models.loading import load_causal_lm
    except ImportError:
        load_causal_lm = None
    if load_causal_lm is not None:
        return load_causal_lm(spec)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(spec) if Path(spec).is_dir() else Path.home() / ".cache" / "attnlab" / "models" / spec
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()
    return model, AutoTokenizer.from_pretrained(folder)


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


ALIASES = {"sdpa": "full"}  # speed --method sdpa (the README's commands): the model's own attention, the method ``full``


def prepared(name: str, budget: float, model, n: int, cal: Calibration | None) -> methods.Method:
    """The registered method ``name`` at ``budget``, prepared at length n (a calibrated one reads ``cal``)."""
    m = methods.get(name, budget)
    m.prepare(model, n, cal if m.calibrated else None)
    return m


def with_retrieval(cal: Calibration, path: Path, model, tok, n: int, pages: int = 0, text: Path | None = None) -> None:
    """The retrieval scores attnlab-retrieval reads, and with ``pages`` = K the page ranking its page_score=calibrated
    reads (on one window of ``text``, the calibration's), made once and kept in the calibration file (as ``attnlab eval``)."""
    if not cal.retrieval.any():
        cal.retrieval = retrieval_calibration(model, tok, n)
        cal.save(path)
    if add_page_ranking(cal, model, tok, text, n, pages):
        cal.save(path)


def cmd_calibrate(args):
    model, tok = load(args.model)
    shape = model_shape(model)
    out = Path(args.out)
    for n in args.lengths:
        path = out / f"calibration-{n}.npz"
        if path.exists() and not args.force:
            log("have", path)
            continue
        windows = token_windows(tok, split_file(args.data, "train"), n, args.windows)
        cands = sorted({c for b in args.budgets for name in methods.names()   # every candidate a method asks for
                        for c in methods.get(name, b).calibration_candidates(shape, n) or ()})
        t = time.time()
        cal = calibrate(model, windows, cands, progress=LineProgress(), err_rows=args.err_rows, grads=args.grads)
        cal.save(path)
        log(f"calibrated n={n} windows={len(windows)} in {time.time() - t:.0f} s -> {path}")


def cmd_ppl(args):
    model, tok = load(args.model)
    out = Path(args.out)
    for n in args.lengths:
        path = out / f"calibration-{n}.npz"
        need = [m for m in args.methods if methods.get(m).calibrated]
        if need and not path.exists():
            print(f"{path}: no calibration at n = {n} (run calibrate first; {', '.join(need)} need it)", file=sys.stderr)
            sys.exit(2)
        cal = Calibration.load(path) if path.exists() else None
        if cal is not None and any(methods.get(m).needs_retrieval for m in args.methods):
            pages = max(methods.get(m).page_ranking_pages for m in args.methods)
            with_retrieval(cal, path, model, tok, n, pages, split_file(args.data, "train"))
        windows = token_windows(tok, split_file(args.data, args.split), n, args.windows)
        done = set()
        if (out / "ppl.jsonl").exists():
            for line in (out / "ppl.jsonl").read_text().splitlines():
                r = json.loads(line)
                done.add((r["n"], r["method"], r["budget"], r["windows"], r.get("split", "test")))
        todo = [(methods.REFERENCE, 1.0)] + [(m, b) for b in args.budgets for m in args.methods if m != methods.REFERENCE]
        for method, budget in todo:
            if (n, method, budget, len(windows), args.split) in done:
                continue
            m = prepared(method, budget, model, n, cal)
            fraction, full_heads = m.prefill_fraction(n), m.describe().get("full_heads", 0)
            t = time.time()
            with m.applied(model):
                ppl = perplexity(model, windows)
            row = {"n": n, "split": args.split, "method": method, "budget": budget, "fraction": fraction, "full_heads": full_heads,
                   "ppl": ppl, "windows": len(windows), "seconds": time.time() - t}
            log(json.dumps(row))
            with open(out / "ppl.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def prepared_on_test(args):
    """(model, the first test window of ``--n`` tokens, ``--method`` prepared at that length from ``--out``'s
    calibration where it needs one), torch on ``--threads`` threads."""
    model, tok = load(args.model)
    torch.set_num_threads(args.threads)
    n = args.n
    ids = token_windows(tok, split_file(args.data, "test"), n, 1)[0]
    name, opts = parse_method(args.method)                                       # NAME or NAME:key=value (attnlab-retrieval:blocks=8)
    m = methods.get(ALIASES.get(name, name), args.budget, **opts)
    cal = None
    if m.calibrated:
        path = Path(args.out) / f"calibration-{n}.npz"
        cal = Calibration.load(path)
        if m.needs_retrieval:
            with_retrieval(cal, path, model, tok, n, m.page_ranking_pages, split_file(args.data, "train"))
    m.prepare(model, n, cal)
    return model, ids, m


@torch.no_grad()
def cmd_speed(args):
    """One configuration per process (peak RSS is per process): prefill time, peak memory; generation tok/s, KV bytes."""
    model, ids, m = prepared_on_test(args)
    n = args.n
    base = peak_rss_mib()
    with m.applied(model):
        cache = m.new_cache(model)   # the method's decoding policy (DynamicCache: every key kept)
        t = time.time()
        o = model(ids, cache=cache, use_cache=True, logits_to_keep=1)  # the prefill of generation
        prefill = time.time() - t
        peak = peak_rss_mib()
        nxt = o.logits[:, -1:].argmax(-1)
        kv = kv_bytes(cache)
        t = time.time()
        for _ in range(args.new_tokens):
            o = model(nxt, cache=cache, use_cache=True)
            nxt = o.logits[:, -1:].argmax(-1)
        decode = time.time() - t
    row = {"n": n, "method": args.method, "budget": m.budget, "threads": args.threads,
           "prefill_s": prefill, "peak_rss_mib": peak, "rss_before_mib": base,
           "kv_bytes_after_prefill": kv, "kv_bytes_end": kv_bytes(cache), "decode_tokens": args.new_tokens,
           "decode_tok_s": args.new_tokens / decode, "fraction": m.prefill_fraction(n),
           "store_bytes_end": store_bytes(cache), "read_tokens": read_tokens(cache)}   # read-back: the store of evicted keys (same device)
    log(json.dumps(row))
    with open(Path(args.out) / "speed.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def resident_tokens(cache) -> list[float]:
    """Keys held per layer after a prefill, per (batch row, KV head): a ``PlanLayer``'s filled slots (its read-back
    store apart), any other layer's cached length."""
    return [layer.tokens() if isinstance(layer, PlanLayer) else float(layer.keys.shape[-2]) for layer in cache.layers]


def alternated(rounds: int, timed):
    """``timed(which)`` (seconds) for which = full and method, ``rounds`` times, the order alternated round by round:
    yields (round 1 …, {"full": s, "method": s}) as each ends — a drift of the machine's speed falls on both alike."""
    for k in range(rounds):
        yield k + 1, {w: timed(w) for w in (("full", "method") if k % 2 == 0 else ("method", "full"))}


@torch.no_grad()
def cmd_decode(args):
    """Prefill seconds and decoding tokens/s of ``--method`` against the model's own attention (SDPA, every key cached),
    in one process: ``--prefills`` rounds each prefill the same test window (n tokens) into a fresh cache under both, the
    order alternated, the last round's caches kept; then ``--rounds`` rounds each decode ``--new-tokens`` greedy tokens
    under both, the order alternated (a compaction of the method's cache falls every ``kv_cache.EVICT_EVERY`` tokens).
    One JSON line per round and one for all rounds (tokens/s over the summed times, full's time over the method's, the
    rounds' smallest, median and largest ratio; the same for the prefills), with the keys each cache holds after the
    prefill (summed over layers, per KV head; and over the sliding-window layers alone, where the model has them)
    → ``decode.jsonl``."""
    model, ids, m = prepared_on_test(args)
    n = args.n
    own = model.config._attn_implementation
    full = methods.get(methods.REFERENCE)
    caches, nxt = {}, {}
    with m.applied(model):
        planned = model.config._attn_implementation
        impl, policy = {"full": own, "method": planned}, {"full": full, "method": m}

        def prefill(which: str) -> float:
            model.set_attn_implementation(impl[which])
            caches[which] = None                                                  # the last round's freed first
            caches[which] = policy[which].new_cache(model)
            t = time.perf_counter()
            o = model(ids, cache=caches[which], use_cache=True, logits_to_keep=1)
            nxt[which] = o.logits[:, -1:].argmax(-1)
            return time.perf_counter() - t

        head = {"n": n, "method": args.method, "budget": m.budget, "threads": args.threads}   # every line's first fields
        prefills = []
        for k, sec in alternated(args.prefills, prefill):
            prefills.append({**head, "round": f"prefill {k}", "full_prefill_s": sec["full"], "method_prefill_s": sec["method"],
                             "prefill_ratio": sec["full"] / sec["method"]})
            log(json.dumps(prefills[-1]))
        kv = {w: resident_tokens(c) for w, c in caches.items()}                    # per layer, after the prefill
        sliding = [bool(getattr(mod, "sliding_window", None)) for mod in attention_modules(model)]

        def steps(which: str, count: int) -> float:
            model.set_attn_implementation(impl[which])
            t = time.perf_counter()
            for _ in range(count):
                nxt[which] = model(nxt[which], cache=caches[which], use_cache=True).logits[:, -1:].argmax(-1)
            return time.perf_counter() - t

        steps("full", 2), steps("method", 2)                                     # first steps (allocations) untimed
        rows = []
        for k, sec in alternated(args.rounds, lambda w: steps(w, args.new_tokens)):
            rows.append({**head, "round": k, "tokens": args.new_tokens, "full_tok_s": args.new_tokens / sec["full"],
                         "method_tok_s": args.new_tokens / sec["method"], "ratio": sec["full"] / sec["method"]})
            log(json.dumps(rows[-1]))
        model.set_attn_implementation(planned)
    total = {w: sum(args.new_tokens / r[f"{w}_tok_s"] for r in rows) for w in ("full", "method")}   # seconds, all rounds
    summary = {"full_tok_s": args.new_tokens * args.rounds / total["full"], "method_tok_s": args.new_tokens * args.rounds / total["method"],
               "ratio": total["full"] / total["method"], "ratio_min": min(r["ratio"] for r in rows),
               "ratio_median": statistics.median(r["ratio"] for r in rows), "ratio_max": max(r["ratio"] for r in rows)}
    resident = {}
    for w in ("full", "method"):
        resident[f"{w}_kv_tokens"] = round(sum(kv[w]), 1)
        if any(sliding):
            resident[f"{w}_kv_tokens_sliding_layers"] = round(sum(t for t, sl in zip(kv[w], sliding) if sl), 1)
    full_s, method_s = sum(r["full_prefill_s"] for r in prefills), sum(r["method_prefill_s"] for r in prefills)
    summary |= {"prefills": len(prefills), "full_prefill_s": full_s / len(prefills), "method_prefill_s": method_s / len(prefills),
                "prefill_ratio": full_s / method_s, "prefill_ratio_min": min(r["prefill_ratio"] for r in prefills),
                "prefill_ratio_max": max(r["prefill_ratio"] for r in prefills)}
    rows = prefills + rows
    rows.append({**head, "round": "all", "tokens": args.new_tokens * args.rounds, **summary, **resident})
    log(json.dumps(rows[-1]))
    with open(Path(args.out) / "decode.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


@torch.no_grad()
def cmd_attention(args):
    """Attention alone at length n, every layer: SDPA (causal, GQA; a sliding layer with its window as a mask, as the
    model runs it) vs the plan's LayerRunner.prefill, on random q, k, v of the model's head size."""
    import torch.nn.functional as F

    from attnlab.llm.execution.attention import LayerRunner

    torch.set_num_threads(args.threads)
    model = load(args.model)[0]
    shape = model_shape(model)                                                    # head size and windows
    name, opts = parse_method(args.method)
    m = methods.get(name, args.budget, **opts)
    plan = m.make_plan(model, args.n, Calibration.load(Path(args.out) / f"calibration-{args.n}.npz") if m.calibrated else None)
    H, H_kv, n, d = plan.num_heads, plan.num_kv_heads, args.n, shape["head_dim"]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, H, n, d, generator=g)
    k, v = torch.randn(1, H_kv, n, d, generator=g), torch.randn(1, H_kv, n, d, generator=g)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    t_sdpa = t_plan = 0.0
    for l in range(plan.num_layers):
        window = plan.window(l)
        mask = None if window is None else visible(i, j, window)                  # (n, n) the model's sliding mask
        t = time.time()
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=True)
        t_sdpa += time.time() - t
        runner = LayerRunner(plan.heads[l], l, H_kv, window)
        t = time.time()
        runner.prefill(q, k, v, d ** -0.5)
        t_plan += time.time() - t
    row = {"n": n, "model": args.model, "method": args.method, "budget": args.budget, "threads": args.threads, "layers": plan.num_layers,
           "attention_sdpa_s": t_sdpa, "attention_plan_s": t_plan, "speedup": t_sdpa / t_plan, "fraction": plan.fraction(n)}
    log(json.dumps(row))
    with open(Path(args.out) / "attention.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def cmd_report(args):
    out = Path(args.out)
    rows = [json.loads(x) for x in (out / "ppl.jsonl").read_text().splitlines()] if (out / "ppl.jsonl").exists() else []
    rows = [r for r in rows if r.get("split", "test") == "test"]  # dev rows choose settings; the table reports test
    last = {}
    for r in rows:
        last[(r["n"], r["method"], r["budget"])] = r
    rows = list(last.values())
    print("| n | method | budget | entries kept | full heads | perplexity | vs full |")
    print("|---|---|---|---|---|---|---|")
    full = {r["n"]: r["ppl"] for r in rows if r["method"] == methods.REFERENCE}
    for r in sorted(rows, key=lambda r: (r["n"], r["budget"], r["method"])):
        rel = f"{100 * (r['ppl'] / full[r['n']] - 1):+.2f} %" if r["n"] in full else ""
        print(f"| {r['n']} | {r['method']} | {r['budget']:.2f} | {r['fraction']:.3f} | {r['full_heads']} | {r['ppl']:.3f} | {rel} |")
    if (out / "attention.jsonl").exists():
        print()
        print("| n | method | budget | threads | layers | attention SDPA s | attention plan s | speed-up |")
        print("|---|---|---|---|---|---|---|---|")
        for line in (out / "attention.jsonl").read_text().splitlines():
            r = json.loads(line)
            print(f"| {r['n']} | {r['method']} | {r['budget']:.2f} | {r['threads']} | {r['layers']} | {r['attention_sdpa_s']:.1f} | "
                  f"{r['attention_plan_s']:.1f} | {r['speedup']:.2f}× |")
    if (out / "speed.jsonl").exists():
        print()
        print("| n | method | budget | threads | prefill s | peak RSS MiB | KV MiB | stored MiB (read back / step) | decode tok/s |")
        print("|---|---|---|---|---|---|---|---|---|")
        for line in (out / "speed.jsonl").read_text().splitlines():
            r = json.loads(line)
            stored = f"{r['store_bytes_end'] / 2**20:.1f} ({r['read_tokens']:.0f})" if r.get("store_bytes_end") else "–"
            print(f"| {r['n']} | {r['method']} | {r['budget']:.2f} | {r['threads']} | {r['prefill_s']:.1f} | {r['peak_rss_mib']:.0f} | "
                  f"{r['kv_bytes_end'] / 2**20:.1f} | {stored} | {r['decode_tok_s']:.2f} |")
    if rows:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from attnlab.atomic import write_atomic

        lengths = sorted({r["n"] for r in rows})
        fig, axes = plt.subplots(1, len(lengths), figsize=(5 * len(lengths), 4), squeeze=False)
        for ax, n in zip(axes[0], lengths):
            for method in sorted({r["method"] for r in rows if r["n"] == n and r["method"] != methods.REFERENCE}):
                pts = sorted((r["fraction"], r["ppl"]) for r in rows if r["n"] == n and r["method"] == method)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=method)
            if n in full:
                ax.axhline(full[n], color="k", ls="--", label="full")
            ax.set_xlabel("fraction of causal attention entries")
            ax.set_ylabel("perplexity (test)")
            ax.set_yscale("log")
            ax.set_title(f"{args.model}, n = {n}")
            ax.legend(fontsize=7)
        fig.tight_layout()
        write_atomic(out / "ppl_vs_budget.png", lambda tmp: fig.savefig(tmp, dpi=110))
        print(f"\nplot: {out / 'ppl_vs_budget.png'}")


def ints(text):
    """--lengths: canonical integers, no empty or repeated item (``attnlab.option_values``)."""
    from attnlab.option_values import numbers

    return numbers(text, int, "--lengths")


def floats(text):
    """--budgets: canonical finite numbers, no empty or repeated item."""
    from attnlab.option_values import numbers

    return numbers(text, float, "--budgets")


def split_file(folder: Path, split: str) -> Path:
    """``folder/split.txt.gz`` or ``folder/split.txt``; a one-line exit when neither is there."""
    for name in (f"{split}.txt.gz", f"{split}.txt"):
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    raise UserError(f"--data {folder}: {'no such folder' if not Path(folder).is_dir() else f'no {split}.txt.gz or {split}.txt'}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=["calibrate", "ppl", "speed", "decode", "attention", "report"])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--data", type=Path, default=DATA, help="folder of train/dev/test text (.txt or .txt.gz): calibration on train, "
                   "perplexity on --split, speed on test [default: ../shared/data/shakespeare]")
    p.add_argument("--out", default=str(ROOT / "runs" / "llm_structured"))
    p.add_argument("--lengths", type=ints, default=[2048])
    p.add_argument("--budgets", type=floats, default=[0.05, 0.1, 0.25, 0.5])
    p.add_argument("--methods", type=lambda t: method_list(t, "--methods"), default=list(methods.default_names()),
                   help="registered methods (attnlab.llm.methods); default: those with default_run")
    p.add_argument("--windows", type=int, default=2)
    p.add_argument("--split", default="test", choices=["dev", "test"], help="ppl: the text scored (dev: to choose settings; test: to report)")
    p.add_argument("--force", action="store_true")
    p.add_argument("--grads", action="store_true", help="calibrate: also the loss gradients (tables err-grad, delta; one backward pass per window)")
    p.add_argument("--err-rows", type=int, default=ERR_ROWS, help="calibrate: rows on which every executed option's output error is measured (0: none)")
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--method", default="attnlab-band", help="speed, attention: a registered method (speed: or sdpa, the model as loaded)")
    p.add_argument("--budget", type=float, default=0.1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--new-tokens", type=int, default=16, help="speed: tokens decoded; decode: tokens a round, each way")
    p.add_argument("--rounds", type=int, default=4, help="decode: alternated rounds of decoding (≥ 1)")
    p.add_argument("--prefills", type=int, default=2, help="decode: alternated rounds of prefill before them (≥ 1)")
    p.add_argument("--system-malloc", action="store_true", help="leave glibc's malloc as it is (default: attnlab.allocator.keep_freed_memory(), as the CLI)")
    args = p.parse_args()
    known = set(methods.names()) | set(methods.preset_names())
    bad = [m for m in args.methods if m not in known]
    if bad:
        p.exit(2, f"llm_structured: error: --methods: unknown {', '.join(bad)} (known: {', '.join(sorted(known))})\n")
    for opt, value, least in (("--err-rows", args.err_rows, 0), ("--rounds", args.rounds, 1), ("--prefills", args.prefills, 1),
                              ("--new-tokens", args.new_tokens, 1)):
        if value < least:
            raise UserError(f"{opt}: must be >= {least}, got {value}")
    if not args.system_malloc:
        keep_freed_memory()
    reads = {"calibrate": "train", "ppl": args.split, "speed": "test", "decode": "test"}.get(args.stage)
    if reads is not None:
        split_file(args.data, reads)   # the text the stage reads: one line before anything is written
    Path(args.out).mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", args.threads)))
    {"calibrate": cmd_calibrate, "ppl": cmd_ppl, "speed": cmd_speed, "decode": cmd_decode, "attention": cmd_attention,
     "report": cmd_report}[args.stage](args)


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

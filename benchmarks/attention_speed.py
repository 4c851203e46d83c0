"""Speed and memory of every attention mechanism against SDPA full attention.

    python benchmarks/attention_speed.py [--n N ...] [--w 64] [--g 4] [--repeat R] [--threads 2]
        [--case bidirectional causal] [--mechanisms full band structured structured(flex) ...] [--no-flex] [--json]
        [--system-malloc]

For each case and length n: forward time (no grad), forward+backward time, and
the peak extra memory of the forward, at H = 8, d_k = 64, batch 1, float32.
Cases: ``bidirectional`` (encoder self-attention) and ``causal`` (the causal LM
case: every mechanism with a causal mask, SDPA with ``is_causal``).  All
mechanisms run in ONE process and are timed in alternation (repeat r times:
every mechanism once), the minimum over repeats is kept: ratios measured this
way are robust to other work on the machine, absolute times are not.

``structured(flex)`` is the same pattern as ``structured`` (band w + g key
columns, ``Support.mask_mod()``) through compiled FlexAttention on CPU
(forward only: it has no CPU backward); its compilation is timed separately
(``compile_s``: the first call at each n, block mask excluded; ``block_mask_s``).

ideal_speedup is the ratio of multiply-adds of full attention (4·n²·d; causal:
half of it) to the mechanism's: n/(2w+1+g) for band + g columns (causal:
(n+1)/2 / (w+1+g)), + r random keys for BigBird, n/D for linear attention
(D = feature size), n/(2k') for Linformer.

Peak memory: the allocations made by the forward, read from the PyTorch
profiler's memory events (``profile_memory=True``: every CPU allocation and
free, in order; the running sum's maximum is the peak extra memory above the
inputs).  It is compared with dense eager attention's n²·H floats.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnlab.allocator import keep_freed_memory  # noqa: E402
from attnlab.nn.mask import Mask  # noqa: E402
from attnlab.config import ModelConfig  # noqa: E402
from attnlab.nn.mechanisms import MECHANISMS, build_mechanism, keys_per_query  # noqa: E402
from attnlab.support import Support  # noqa: E402

H, D_K = 8, 64
DEFAULT_N = [256, 512, 1024, 2048, 4096, 8192, 16384]


class SDPAFull(torch.nn.Module):
    name = "full"

    def forward(self, q, k, v, mask, need_weights=False):
        return F.scaled_dot_product_attention(q, k, v, is_causal=mask.causal), None


class StructuredFlex(torch.nn.Module):
    """Band w + g key columns (the structured support) through compiled FlexAttention (inference only)."""

    name = "structured(flex)"

    def __init__(self, w: int, g: int):
        super().__init__()
        self.pattern = Support(w=w, columns=torch.arange(g)).mask_mod()
        self.block_mask = None
        self.compile_s = self.block_mask_s = None

    def forward(self, q, k, v, mask, need_weights=False):
        from attnlab.nn.mechanisms.flex import flex_block_mask, flex_forward

        n, m = q.shape[-2], k.shape[-2]
        if self.block_mask is None:  # depends on (n, m, causal) only: built once, as a model would
            t = time.perf_counter()
            self.block_mask = flex_block_mask(self.pattern, mask, 1, H, n, m, q.device)
            self.block_mask_s = time.perf_counter() - t
        if self.compile_s is None:
            t = time.perf_counter()
            out = flex_forward(q, k, v, self.pattern, mask, self.block_mask)
            self.compile_s = time.perf_counter() - t
            return out, None
        return flex_forward(q, k, v, self.pattern, mask, self.block_mask), None


def mechanisms(n: int, w: int, g: int, r: int, proj_len: int, flex: bool, causal: bool, only: list[str] | None) -> dict[str, tuple[torch.nn.Module, float]]:
    """name → (mechanism, ideal speedup: keys per query of full attention / the mechanism's) — every registered
    mechanism that runs under the mask, built and costed by the registry (``attnlab.nn.mechanisms.MECHANISMS``)."""
    cost = dict(w=w, g=g, r=r, d_k=D_K, proj_len=proj_len, causal=causal)
    full_keys = keys_per_query("full", n, causal=causal)
    out = {}
    for name, spec in MECHANISMS.items():
        if (causal and not spec.causal) or (only and name not in only and name != "full"):
            continue
        cfg = ModelConfig(vocab_size=8, d_model=H * D_K, heads=H, attention=name, w=w, num_pos=g, num_random=r,
                          proj_len=proj_len, max_len=max(n, 2))
        mech = SDPAFull() if name == "full" else build_mechanism(cfg, "encoder", D_K)
        out[name] = (mech, full_keys / keys_per_query(name, n, **cost))
    if flex and (not only or "structured(flex)" in only or "structured" in only):
        out["structured(flex)"] = (StructuredFlex(w, g), full_keys / keys_per_query("structured", n, **cost))
    return out


def time_once(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def peak_memory_mb(fn) -> float:
    """Peak of the running sum of allocations − frees during fn() (profiler memory events)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns())
    total = peak = 0
    for e in events:
        total += e.nbytes()
        peak = max(peak, total)
    return peak / 1e6


def bench_n(n: int, args, case: str) -> list[dict]:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, H, n, D_K) for _ in range(3))
    grad = torch.randn(1, H, n, D_K)
    mask = Mask(causal=case == "causal")
    mechs = mechanisms(n, args.w, args.g, args.r, args.proj_len, args.flex, mask.causal, args.mechanisms)
    slow_full = n > args.max_full_bwd  # full forward+backward at the longest n costs minutes

    def fwd(mech):
        with torch.no_grad():
            mech(q, k, v, mask)

    def fwd_bwd(mech):
        qq, kk, vv = (x.clone().requires_grad_(True) for x in (q, k, v))
        out, _ = mech(qq, kk, vv, mask)
        out.backward(grad)

    times = {name: {"fwd": [], "fwd_bwd": []} for name in mechs}
    for name, (mech, _) in mechs.items():  # warm-up (and FlexAttention's compilation)
        fwd(mech)
    for rep in range(args.repeat):
        for name, (mech, _) in mechs.items():
            times[name]["fwd"].append(time_once(lambda: fwd(mech)))
            if name.endswith("(flex)") or (name == "full" and slow_full and rep > 0):
                continue
            times[name]["fwd_bwd"].append(time_once(lambda: fwd_bwd(mech)))
    rows = []
    full_fwd = min(times["full"]["fwd"])
    full_fb = min(times["full"]["fwd_bwd"]) if times["full"]["fwd_bwd"] else None
    for name, (mech, ideal) in mechs.items():
        f = min(times[name]["fwd"])
        fb = min(times[name]["fwd_bwd"]) if times[name]["fwd_bwd"] else None
        rows.append(
            {
                "case": case,
                "mechanism": name,
                "n": n,
                "w": args.w,
                "g": args.g,
                "fwd_ms": round(f, 3),
                "fwd_bwd_ms": None if fb is None else round(fb, 3),
                "peak_mb": round(peak_memory_mb(lambda: fwd(mech)), 3),
                "speedup_vs_full": round(full_fwd / f, 3),
                "fwd_bwd_speedup_vs_full": None if (fb is None or full_fb is None) else round(full_fb / fb, 3),
                "ideal_speedup": round(ideal, 3),
                "dense_eager_mb": round(n * n * H * 4 / 1e6, 3),
                "threads": torch.get_num_threads(),
                **({"compile_s": round(mech.compile_s, 2), "block_mask_s": round(mech.block_mask_s, 2)} if isinstance(mech, StructuredFlex) else {}),
            }
        )
    return rows


def print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"attention speed vs SDPA full (H={H}, d_k={D_K}, batch 1, {torch.get_num_threads()} threads)")
    for col in ("case", "n", "mechanism", "fwd ms", "fwd+bwd ms", "fwd ×", "fwd+bwd ×", "ideal ×", "peak MB", "dense/peak"):
        table.add_column(col, justify="right")
    fmt = lambda x, p=1: "–" if x is None else f"{x:.{p}f}"  # noqa: E731
    for r in rows:
        table.add_row(
            r["case"], str(r["n"]), r["mechanism"], fmt(r["fwd_ms"]), fmt(r["fwd_bwd_ms"]), fmt(r["speedup_vs_full"]),
            fmt(r["fwd_bwd_speedup_vs_full"]), fmt(r["ideal_speedup"]), fmt(r["peak_mb"]),
            fmt(r["dense_eager_mb"] / r["peak_mb"] if r["peak_mb"] > 0 else None, 0),
        )
    Console().print(table)
    for r in rows:
        if "compile_s" in r:
            print(f"{r['case']} n={r['n']} {r['mechanism']}: compile {r['compile_s']:.1f} s (first call), block mask {r['block_mask_s']:.1f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=DEFAULT_N, help="sequence lengths")
    ap.add_argument("--w", type=int, default=64, help="band half-width")
    ap.add_argument("--g", type=int, default=4, help="global tokens / key columns")
    ap.add_argument("--r", type=int, default=4, help="BigBird random keys per query block")
    ap.add_argument("--proj-len", type=int, default=256, help="Linformer projection length k'")
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions (minimum kept)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--max-full-bwd", type=int, default=8192, help="above this n, full fwd+bwd is timed once")
    ap.add_argument("--no-flex", dest="flex", action="store_false", help="skip compiled FlexAttention (structured(flex))")
    ap.add_argument("--case", nargs="+", default=["bidirectional", "causal"], choices=["bidirectional", "causal"], help="attention cases")
    ap.add_argument("--mechanisms", nargs="+", default=None, help="only these mechanisms (full is always timed)")
    ap.add_argument("--json", action="store_true", help="print one JSON object per (mechanism, n)")
    ap.add_argument("--system-malloc", action="store_true", help="leave glibc's malloc as it is (default: attnlab.allocator.keep_freed_memory())")
    args = ap.parse_args(argv)
    for name, value, low in (("--w", args.w, 0), ("--g", args.g, 0), ("--r", args.r, 0), ("--repeat", args.repeat, 1), ("--threads", args.threads, 1), ("--proj-len", args.proj_len, 1)):
        if value < low:
            ap.error(f"{name} must be >= {low}, got {value}")
    if min(args.n) < 1:
        ap.error(f"--n must be positive, got {min(args.n)}")
    torch.set_num_threads(args.threads)
    kept = False if args.system_malloc else keep_freed_memory()
    print(f"# malloc: {'freed memory kept for reuse (attnlab.allocator)' if kept else 'system default'}", file=sys.stderr)
    rows = []
    for case in args.case:
        for n in args.n:
            part = bench_n(n, args, case)
            rows.extend(part)
            if args.json:
                for r in part:
                    print(json.dumps(r), flush=True)
    if not args.json:
        print_table(rows)
    return 0


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

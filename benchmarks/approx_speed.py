"""Speed of the optimal structured fit vs the thesis's random-search protocol.

    python benchmarks/approx_speed.py [--heads 10000] [--n 32] [--w 3] [--num-pos 2] [--attempts 30]

Draws ``--heads`` realistic n×n heads (``planted_heads``), times
``structured_fit`` (band w + num_pos columns + s = n sparse entries) and
``random_search`` (n_attempts draws of each of Σ1, Σ2(w), Σ3) on the same
heads, and prints both times, their ratio and the mean errors.  Target: the
optimal fit of 10,000 heads of 32×32 in ≤ 1 s.
"""

from __future__ import annotations

import argparse
import os
import time

from attnlab.analysis.families import planted_heads
from attnlab.analysis.structured_fit import structured_fit
from attnlab.analysis.validation import random_search


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=10_000)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--w", type=int, default=3)
    ap.add_argument("--num-pos", type=int, default=2)
    ap.add_argument("--attempts", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3, help="best of REPEAT runs of the fit")
    args = ap.parse_args()

    a = planted_heads(args.heads, args.n, w=args.w, num_pos=args.num_pos, rng=0)  # (H, n, n)
    fit_times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        fit = structured_fit(a, args.w, args.num_pos, args.n)
        fit_times.append(time.perf_counter() - t0)
    t_fit = min(fit_times)
    t0 = time.perf_counter()
    rs = random_search(a, args.w, args.num_pos, n_attempts=args.attempts, seed=0)
    t_rand = time.perf_counter() - t0

    print(f"heads {args.heads} of {args.n}x{args.n}, w={args.w}, num_pos={args.num_pos}, s={args.n}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"{'method':<34}{'time (s)':>10}{'mean error':>14}")
    print(f"{'optimal structured fit (best of ' + str(args.repeat) + ')':<34}{t_fit:>10.3f}{fit.mean_error.mean():>14.5f}")
    print(f"{'random search (' + str(3 * args.attempts) + ' draws/head)':<34}{t_rand:>10.3f}{rs.mean_error.mean():>14.5f}")
    print(f"time ratio random/optimal: {t_rand / t_fit:.1f}x   error ratio random/optimal: "
          f"{rs.mean_error.mean() / fit.mean_error.mean():.1f}x   target fit <= 1 s: {'met' if t_fit <= 1.0 else 'NOT met'}")


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

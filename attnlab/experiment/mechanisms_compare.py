"""Stage 8a: the speed of every attention mechanism at the corpus's own lengths.

For the source lengths of the evaluation set (median, 95th percentile,
maximum, in tokens) and one long length for perspective, a batch of
``timing_batch`` sequences with the 8-head model's shape (H = 8,
d_k = d_model / 8) goes through the forward of each mechanism of
``attnlab.nn.mechanisms.MECHANISMS`` (built by ``build_mechanism`` from a
ModelConfig, with the 8-head model's automatic (w, num_pos) of its encoder:
band and columns as the fit chose them), no gradient.  Mechanisms are timed
in alternation, ``timing_repeats`` rounds, the minimum kept: ratios are
robust to other work on the machine, absolute times are not.  The ideal
speed-up is the ratio of multiply-adds, n over the registry's keys per query
(``MechanismSpec.cost``): n / (2w + 1 + g) for band + g columns, n / d_k for
the linear forms, n / (2k') for Linformer.

At the corpus's lengths (tens of tokens) n is not much larger than 2w + 1 + g:
the efficient mechanisms cannot win there, and the table shows it; the
O(n·w) forms pay off at long n (``benchmarks/attention_speed.py``).
"""

from __future__ import annotations

import time

import torch

from attnlab.config import ModelConfig
from attnlab.experiment.corpus import length_stats
from attnlab.experiment.stages import Context
from attnlab.experiment.training import eval_pairs, load_model
from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms import MECHANISMS, build_mechanism, keys_per_query

__all__ = ["time_mechanisms", "ideal_speedup", "mechanisms_stage", "LONG_N", "NAMES"]

LONG_N = 512
NAMES = tuple(MECHANISMS)  # every registered mechanism, in the registry's order


def ideal_speedup(name: str, n: int, w: int, g: int, r: int, d_k: int, proj_len: int) -> float:
    """Multiply-adds of full attention over the mechanism's (per query: n keys vs its keys, the registry's cost)."""
    return keys_per_query("full", n) / keys_per_query(name, n, w=w, g=g, r=r, d_k=d_k, proj_len=proj_len)


@torch.no_grad()
def time_mechanisms(n: int, batch: int, heads: int, d_k: int, w: int, g: int, repeats: int,
                    r: int = 2, proj_len: int = 16) -> list[dict]:
    """Forward time (ms, min over ``repeats``) of every mechanism on (batch, heads, n, d_k) inputs."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, n, d_k) for _ in range(3))
    mask = Mask()
    mechs = {}
    for name in NAMES:
        cfg = ModelConfig(vocab_size=8, d_model=heads * d_k, heads=heads, attention=name, w=w, num_pos=min(g, n),
                          num_random=r, proj_len=min(proj_len, n), max_len=max(n, 2))
        mechs[name] = build_mechanism(cfg, "encoder", d_k).eval()
    times = {name: [] for name in mechs}
    for name, mech in mechs.items():  # warm-up
        mech(q, k, v, mask)
    for _ in range(repeats):
        for name, mech in mechs.items():  # alternation: every mechanism once per round
            t0 = time.perf_counter()
            mech(q, k, v, mask)
            times[name].append((time.perf_counter() - t0) * 1e3)
    full = min(times["full"])
    return [
        {"mechanism": name, "n": n, "batch": batch, "w": w, "g": g, "fwd_ms": round(min(t), 4),
         "speedup_vs_full": round(full / min(t), 3),
         "ideal_speedup": round(ideal_speedup(name, n, w, g, r, d_k, proj_len), 3)}
        for name, t in times.items()
    ]


def mechanisms_stage(model_name: str):
    def run(ctx: Context) -> dict:
        pairs, _ = eval_pairs(ctx)
        r = load_model(ctx, model_name)
        stats = length_stats([p.src for p in list(pairs)[:1000]], r.tokenizer)
        enc = ctx.results.get("choices", {}).get("models", {}).get(model_name, {}).get("encoder", {})
        w, g = max(int(enc.get("model_w", 3)), 0), max(int(enc.get("model_num_pos", 2)), 0)
        lengths = sorted({stats["median"], stats["p95"], stats["max"]}) + [LONG_N]
        rows = []
        for n in lengths:
            batch = ctx.settings.timing_batch if n < LONG_N else 1
            rows.extend(time_mechanisms(n, batch, r.cfg.heads, r.cfg.d_k, w, g, ctx.settings.timing_repeats))
        torch_threads = torch.get_num_threads()
        at_max = {row["mechanism"]: row["speedup_vs_full"] for row in rows if row["n"] == stats["max"]}
        return {"lengths": stats, "timed_n": lengths, "long_n": LONG_N, "w": w, "g": g, "heads": r.cfg.heads,
                "d_k": r.cfg.d_k, "threads": torch_threads, "rows": rows,
                "_note": f"n = {lengths}: structured {at_max.get('structured', float('nan')):.2f}× full"
                         f" at n = {stats['max']}"}

    return run

"""A layer's columns in FlexAttention's BlockMask, or gathered beside it: attention alone at SmolLM2-135M's shape (9 query /
3 KV heads of 64, bf16 on CUDA), band w = 1,676 (streaming-llm's at β = 10 % of n = 32,768) with and without 4 sink
columns, each way (``gathered_parts``), q, k, v contiguous and as transformers hands them (transposed views).

    python benchmarks/gpu_columns.py [n]          # n = 32768 (≥ 2048); on a machine without CUDA: the CPU, float32 (no speed claim)

Prints one line per layout and support: FlexAttention alone (flex), the same returning its log-sum-exp (flex+lse), and
the sinks gathered (column part + merge); SDPA causal first, for scale.  Median of 7 calls after 2 (compiling) ones.
"""
import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from attnlab.llm.execution.backend import PrefillParts  # noqa: E402
from attnlab.llm.execution.gathered_parts import band_part, flex_prefill, gathered_prefill  # noqa: E402
from gpu_check import timed  # noqa: E402


def layer_parts(H: int, n: int, w: int, sinks: bool, dev) -> PrefillParts:
    """A layer of H heads reading a band of w (and the 4 sink columns 0…3, the plan's own)."""
    cols = torch.arange(4, device=dev).expand(1, H, 4).clone() if sinks else torch.zeros(1, H, 0, dtype=torch.long, device=dev)
    return PrefillParts(w=(w,) * H, columns=cols, diagonals=torch.zeros(1, H, 0, dtype=torch.long, device=dev),
                        blocks=torch.zeros(1, H, -(-n // 16), 0, dtype=torch.long, device=dev), block_counts=(0,) * H, tails=(0,) * H,
                        kv_of=torch.arange(H) // 3, block=16, fixed=((0, 1, 2, 3),) * H if sinks else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=32768, help="the prefill's length (≥ 2048: the band is 1,676)")
    a = ap.parse_args()
    if a.n < 2048:
        ap.error(f"n {a.n}: at least 2048 (the band of 1,676 fits)")
    n, H, H_kv, d, w = a.n, 9, 3, 64, 1676
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(1, n, H + 2 * H_kv, d, device=dev, dtype=torch.bfloat16 if dev.type == "cuda" else torch.float32, generator=g)
    contiguous = [t.transpose(1, 2).contiguous() for t in x.split([H, H_kv, H_kv], 2)]
    transposed = [t.transpose(1, 2) for t in x.split([H, H_kv, H_kv], 2)]   # transformers' layout: transposed views
    s = d ** -0.5
    q, k, v = contiguous
    sdpa = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), dev, reps=7)
    print("SDPA causal contiguous", 1e3 * sdpa)
    for layout, (q, k, v) in (("contiguous", contiguous), ("transposed", transposed)):
        for sinks in (True, False):
            p = layer_parts(H, n, w, sinks, dev)
            print(layout, "sinks" if sinks else "band only", "flex", round(1e3 * timed(lambda: flex_prefill(p, q, k, v, s), dev, reps=7), 3),
                  "flex+lse", round(1e3 * timed(lambda: band_part(p, q, k, v, s), dev, reps=7), 3), flush=True)
        p = layer_parts(H, n, w, True, dev)
        print(layout, "sinks gathered (column part + merge)", round(1e3 * timed(lambda: gathered_prefill(p, q, k, v, s), dev, reps=7), 3), flush=True)
    return 0


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

"""The fused decoding step (``decode_kernel.c``) against SDPA: one query per head over L cached keys, every head reading
every key (the same work as SDPA's), the keys of a (batch row, KV head) in one part or split across the threads.

    o_h = Σ_t e^{m_t − m} o_t / Σ_t e^{m_t − m} l_t      (part t: m_t = max s_j, l_t = Σ e^{s_j − m_t}, o_t = Σ e^{s_j − m_t} v_j)

    python benchmarks/decode_kernel_speed.py --threads 2 --json runs/decode-kernel/decode-kernel.jsonl

Shapes: Gemma-3-270M's layer (1 KV head, 4 query heads, d = 256) and SmolLM2-135M's (3 KV heads of 3, d = 64), batch 1,
float32 on the CPU.  For each L: SDPA (``enable_gqa``), the native step with one part per (batch row, KV head) (no split)
and with ``native.DECODE_CHUNK`` (the split as attnlab runs it).  Median of ``--reps`` calls after 20 untimed ones.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from attnlab.errors import UserError  # noqa: E402
from attnlab.nn.mechanisms import native  # noqa: E402
from gpu_check import timed  # noqa: E402   (median seconds after warm-up calls)

SHAPES = {"gemma3-270m": (1, 4, 256), "smollm2-135m": (3, 3, 64)}   # (KV heads, query heads per KV head, d)
NO_SPLIT = 1 << 40                                                  # a chunk longer than any cache: one part


def median_ms(f, reps: int) -> float:
    return 1e3 * timed(f, "cpu", reps=reps, warmup=20)


def measure(shape: str, L: int, reps: int) -> dict:
    """SDPA, the native step in one part and split: milliseconds a call for one layer of ``shape`` over L keys."""
    H_kv, r, d = SHAPES[shape]
    g = torch.Generator().manual_seed(L)
    q = torch.randn(1, H_kv * r, 1, d, generator=g)                       # (B, H, 1, d)
    k, v = torch.randn(1, H_kv, L, d, generator=g), torch.randn(1, H_kv, L, d, generator=g)   # (B, H_kv, L, d)
    pos = torch.arange(L).expand(1, H_kv, L).contiguous()                 # every slot filled, in order
    flags = torch.zeros(1, H_kv, r, L, dtype=torch.bool)                  # no columns: the band covers every key
    w = torch.full((H_kv, r), -1, dtype=torch.int64)                      # FULL
    reads = torch.zeros(H_kv, r, dtype=torch.bool)
    scale = d ** -0.5

    def step():
        return native.decode_read_back(q, k, v, pos, flags, w, reads, None, None, L - 1, sliding=None, page=16, pages=0,
                                       scale=scale)[0]

    chunk = native.DECODE_CHUNK
    row = {"model": shape, "L": L, "threads": torch.get_num_threads(), "chunk": chunk,
           "sdpa_ms": median_ms(lambda: F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True), reps)}
    ref = F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
    try:
        native.DECODE_CHUNK = NO_SPLIT
        row["one_part_ms"] = median_ms(step, reps)
        one = step()
    finally:
        native.DECODE_CHUNK = chunk
    row["split_ms"] = median_ms(step, reps)
    row["split_vs_one_part"] = row["one_part_ms"] / row["split_ms"]
    row["sdpa_vs_split"] = row["sdpa_ms"] / row["split_ms"]
    row["max_abs_diff"] = max(float((step() - ref).abs().max()), float((one - ref).abs().max()))   # both against SDPA
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="16,135,513,1300,3000,6900",
                    help="cached keys L, comma-separated (Gemma-3 at 8K decodes over ~135–519 in its sliding layers, "
                         "1,300–6,900 in its full ones)")
    ap.add_argument("--models", default="gemma3-270m,smollm2-135m", help=f"layer shapes: {', '.join(SHAPES)}")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=300, help="timed calls per figure (median)")
    ap.add_argument("--json", type=Path, help="append one JSON line per (model, L) to this file")
    a = ap.parse_args()
    from attnlab.option_values import items, numbers

    lengths = numbers(a.lengths, int, "--lengths")        # canonical integers, no empty or repeated item
    models = items(a.models, "--models")
    for opt, bad in (("--lengths", [x for x in lengths if x < 1]), ("--models", [m for m in models if m not in SHAPES])):
        if bad:
            raise UserError(f"{opt}: {', '.join(map(str, bad))} not accepted ({'each ≥ 1' if opt == '--lengths' else 'known: ' + ', '.join(SHAPES)})")
    for opt, value in (("--threads", a.threads), ("--reps", a.reps)):
        if value < 1:
            raise UserError(f"{opt}: must be >= 1, got {value}")
    if not native.decode_library():
        raise UserError(f"the native decoding step is unavailable: {native.decode_unavailable_reason()}")
    torch.set_num_threads(a.threads)
    print("| model | L | threads | SDPA ms | one part ms | split ms | split vs one part | SDPA ÷ split | max |Δ| vs SDPA |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for m in models:
        for L in lengths:
            r = measure(m, L, a.reps)
            rows.append(r)
            print(f"| {m} | {L} | {r['threads']} | {r['sdpa_ms']:.3f} | {r['one_part_ms']:.3f} | {r['split_ms']:.3f} | "
                  f"{r['split_vs_one_part']:.2f}× | {r['sdpa_vs_split']:.2f}× | {r['max_abs_diff']:.1e} |", flush=True)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        with open(a.json, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return 0


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

"""Perplexity of the default against the band floor of a sliding layer's heads (``sliding_floor``), on dev text.

A model with sliding-window layers (Gemma-3: 15 of 18 layers keep 512 keys) spends much of β = 10 % on them at 8K:
their whole windows are 10.1 % of the causal entries.  The default's plan (``choose_plan``) gives a sliding head a
band of at least min(F, window − 1) keys and the knapsack the rest of β to the global layers.  This measures, for each
F, the perplexity of the default (its preset's options, the floor replaced by F) on ``--windows`` windows of dev text
(a floor is a setting, chosen there), β measured and the floor the plan could afford (``meta["sliding_floor"]``: a
floor β cannot pay is lowered to the grid's next band), beside full attention's.  One JSON line per (length, floor)
(``--json``), or a table.  The calibration (one window of the train text, as ``attnlab eval --calibrate-windows 1``)
is made once per length into ``--out/calibration-N.npz`` and reused.

    python benchmarks/sliding_floor.py --hf gemma3-270m --n 8192 --windows 2 --floors 128,256,384 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlab.errors import UserError  # noqa: E402
from attnlab.script_guard import main_guard  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "shakespeare"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hf", default="gemma3-270m", help="a model with sliding layers (attnlab's name, a folder, a .gguf)")
    p.add_argument("--n", type=int, default=8192, help="tokens of a window")
    p.add_argument("--windows", type=int, default=2, help="windows of --ppl scored")
    p.add_argument("--floors", default="128,256,384", help="comma list of floors F (keys)")
    p.add_argument("--budget", type=float, default=0.1, help="β")
    p.add_argument("--ppl", type=Path, default=DATA / "dev.txt.gz", help="text scored (dev text: to choose by)")
    p.add_argument("--calibrate", type=Path, default=DATA / "train.txt.gz", help="calibration text (never --ppl)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "sliding-floor-dev", help="folder of the calibrations")
    p.add_argument("--json", action="store_true", help="one JSON line per (length, floor)")
    a = p.parse_args()
    from attnlab.option_values import numbers

    floors = numbers(a.floors, int, f"--floors {a.floors!r}")   # canonical integers, no empty or repeated item
    if any(f < 0 for f in floors) or a.n < 64 or a.windows < 1 or not 0 < a.budget <= 1:
        raise UserError("--floors ≥ 0, --n ≥ 64, --windows ≥ 1, 0 < --budget ≤ 1")
    for opt, path in (("--ppl", a.ppl), ("--calibrate", a.calibrate)):
        if not path.is_file():
            raise UserError(f"{opt} {path}: no such file")

    from attnlab.llm import methods
    from attnlab.llm.calibration.build import calibration_file
    from attnlab.llm.eval.perplexity import perplexity
    from attnlab.llm.models.loading import load_causal_lm
    from attnlab.llm.models.text_windows import token_windows

    model, tok = load_causal_lm(a.hf)
    windows = token_windows(tok, a.ppl, a.n, a.windows)
    a.out.mkdir(parents=True, exist_ok=True)
    default = methods.get(methods.DEFAULT, a.budget)   # what it calibrates, its options with the floor replaced by each F
    cal = calibration_file(model, tok, [default], a.n, a.out / f"calibration-{a.n}.npz", a.calibrate, 1)
    full = perplexity(model, windows)
    for F in floors:
        m = methods.get(default.preset.base, a.budget, **{**default.preset.values, "sliding_floor": F})
        m.prepare(model, a.n, cal)
        t0 = time.perf_counter()
        with m.applied(model):
            ppl = perplexity(model, windows)
        row = {"model": a.hf, "n": a.n, "text": a.ppl.name, "windows": len(windows), "sliding_floor": F,
               "floor_used": int(m.plan.meta.get("sliding_floor", 0)), "beta": round(m.prefill_fraction(a.n), 4),
               "ppl": round(ppl, 3), "ppl_full": round(full, 3), "vs_full_pct": round(100 * (ppl / full - 1), 2),
               "seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps(row) if a.json else
              f"n={a.n} F={F} (plan: {row['floor_used']}): β {row['beta']}, ppl {row['ppl']} "
              f"({row['vs_full_pct']:+.2f} % over full's {row['ppl_full']})", flush=True)


if __name__ == "__main__":
    main_guard(main)

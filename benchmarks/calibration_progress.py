"""How often the calibration's bar moves, and how good its time left is, on a real model.

    python benchmarks/calibration_progress.py --hf smollm2-135m --n 8192

One calibration window of ``--text`` at n tokens, calibrated for ``--method`` (its candidates and, where it needs
them, the gradient pass) with a display that records each move of the bar: the longest and the median wait between
two moves, and the time left the bar said at 1, 5, 10, 25, 50, 75 and 90 % of its moves beside the time that was
actually left (a JSON line).  Steps of a kind not timed yet are not in the estimate (``attnlab.progress``: the bar
then says "≥ … left").
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from attnlab.llm import load_causal_lm, methods
    from attnlab.llm.models.text_windows import token_windows
    from attnlab.llm.calibration.statistics import calibrate
    from attnlab.llm.plans.plan import model_shape
    from attnlab.progress import Progress

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf", default="smollm2-135m")
    ap.add_argument("--n", type=int, default=2048, help="tokens of the calibration window")
    ap.add_argument("--method", default="attnlab")
    ap.add_argument("--text", type=Path, default=Path("../shared/data/shakespeare/train.txt.gz"))
    a = ap.parse_args(argv)
    if a.n < 64:
        ap.error("--n must be >= 64")
    model, tokenizer = load_causal_lm(a.hf)
    method = methods.get(a.method, budget=0.1)
    moves: list[tuple[float, float | None]] = []          # (time, the bar's time left)

    class Recorded(Progress):
        def __init__(self):
            pass

        def _updated(self, bar):
            moves.append((time.perf_counter(), bar.remaining()))

    candidates = sorted(method.calibration_candidates(model_shape(model), a.n) or []) or None
    start = time.perf_counter()
    calibrate(model, token_windows(tokenizer, a.text, a.n, 1), candidates, progress=Recorded(),
              grads=bool(method.calibration_grads))
    end = time.perf_counter()
    t = [start] + [m[0] for m in moves]
    waits = sorted(b - a for a, b in zip(t, t[1:]))
    said = {f"{q:.0%}": {"said_s": None if moves[i][1] is None else round(moves[i][1], 1),
                         "left_s": round(end - moves[i][0], 1)}
            for q in (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9) for i in [int(q * (len(moves) - 1))]}
    print(json.dumps({"model": a.hf, "n": a.n, "method": a.method, "grads": bool(method.calibration_grads),
                      "moves": len(moves), "seconds": round(end - start, 1), "longest_wait_s": round(waits[-1], 2),
                      "median_wait_s": round(waits[len(waits) // 2], 2), "time_left": said}))
    return 0


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

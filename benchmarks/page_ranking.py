"""How well a page summary ranks the pages a decoding query reads: Quest's bound against the page's mean key.

recall@K and hit@K of Quest's bound U_P, the page's mean key μ_P and the split ("half": K/2 by U, the rest by μ), on one
window of text (dev text by default: a page score is a setting, chosen there), over the last ``--rows`` rows of every
layer without a sliding window, the candidate pages before a band of ``--band`` keys, averaged over the (layer, head,
row) whose candidates hold ≥ ``--far`` of the row's mass.  The definitions and the measurement are
``attnlab.llm.calibration.page_ranking`` (which the calibration also runs on its own text).  One JSON line per model
(``--json``), or a table.

    python benchmarks/page_ranking.py --hf smollm2-135m gemma3-270m --n 8192 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlab.errors import UserError  # noqa: E402
from attnlab.script_guard import main_guard  # noqa: E402
from attnlab.llm.execution.pages import PAGE  # noqa: E402
from attnlab.llm.models.loading import load_causal_lm  # noqa: E402
from attnlab.llm.models.text_windows import token_windows  # noqa: E402
from attnlab.llm.calibration.page_ranking import rank_pages  # noqa: E402

DEV = ROOT.parent / "shared" / "data" / "shakespeare" / "dev.txt.gz"


def measure(spec: str, data: Path, n: int, rows: int, w: int, K: int, far: float) -> dict:
    model, tok = load_causal_lm(spec)
    return {"model": spec, "text": data.name, **rank_pages(model, token_windows(tok, data, n, 1)[0], rows, w, K, far)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hf", nargs="+", default=["smollm2-135m", "gemma3-270m"], help="models (attnlab's names, a folder, a .gguf)")
    p.add_argument("--data", type=Path, default=DEV, help="a text file (.txt or .txt.gz): dev text, to choose by")
    p.add_argument("--n", type=int, default=8192, help="tokens of the window")
    p.add_argument("--rows", type=int, default=32, help="its last rows, the queries")
    p.add_argument("--band", type=int, default=128, help="w: the keys a head reads anyway before its query")
    p.add_argument("--pages", type=int, default=16, help="K: the pages read back a step")
    p.add_argument("--far", type=float, default=0.25, help="a (head, row) counts when its candidates hold this much mass")
    p.add_argument("--json", action="store_true", help="one JSON line per model")
    a = p.parse_args()
    for name, v, lo in (("--n", a.n, 2 * PAGE), ("--rows", a.rows, 1), ("--pages", a.pages, 1), ("--band", a.band, 0)):
        if v < lo:
            raise UserError(f"{name}: must be >= {lo}, got {v}")
    if a.rows >= a.n or not 0 <= a.far <= 1:
        raise UserError(f"--rows must be < --n ({a.rows} ≥ {a.n})" if a.rows >= a.n else f"--far: must be in [0, 1], got {a.far}")
    if not a.data.is_file():
        raise UserError(f"--data {a.data}: no such file")
    for spec in a.hf:
        row = measure(spec, a.data, a.n, a.rows, a.band, a.pages, a.far)
        print(json.dumps(row) if a.json else
              f"{spec}: d = {row['d']}, {row['layers']} layers, {row['far_rows']}/{row['all_rows']} (head, row) reading far; "
              f"recall@{a.pages} bound {row['recall_bound']} mean {row['recall_mean']} half {row['recall_half']}; "
              f"hit@{a.pages} bound {row['hit_bound']} mean {row['hit_mean']} half {row['hit_half']}", flush=True)


if __name__ == "__main__":
    main_guard(main)

"""The tables a GPU run printed, as JSON lines for ``benchmarks/results.py``: the logs of ``gpu_check.py`` and
``gpu_columns.py`` (saved with ``tee``) read back, each figure as printed, nothing recomputed.

    python benchmarks/gpu_records.py --gpu "NVIDIA H200" --out runs/gpu-check runs/gpu-check/*.log

Writes into ``--out``: gpu-attention.jsonl (attention alone), gpu-model.jsonl (whole-model prefill and decoding),
gpu-logits.jsonl (per model: the methods within the bf16 tolerance, the largest relative error, the smallest top-1
agreement, the methods that cannot run), gpu-tests.jsonl (the CUDA tests' summary line), gpu-columns.jsonl (a layer's
columns in the BlockMask or gathered).  A log with none of these: one line naming it, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ATTENTION = ("n", "SDPA causal ms", "flex band + 64 sinks ms", "its mask built ms", "flex, mask each call ms", "attnlab plan ms",
             "attnlab plan, all in the BlockMask ms", "× SDPA band + sinks", "× SDPA attnlab", "× SDPA all in the BlockMask")
MODEL = ("shape", "method", "prefill ms", "× SDPA", "KV MiB after prefill", "decode tokens/s")


def _value(cell: str):
    """'0.943 ms' → 0.943, '2.13×' → 2.13, '8,192' → 8192, '720.0 MiB' → 720.0; other text as it is."""
    x = cell.strip().removesuffix("ms").removesuffix("MiB").removesuffix("×").strip().replace(",", "")
    try:
        return int(x) if x.isdigit() else float(x)
    except ValueError:
        return cell.strip()


def records(text: str, gpu: str) -> dict[str, list[dict]]:
    """Every table row of one log, by the file it goes to."""
    out: dict[str, list[dict]] = {}
    for line in text.splitlines():
        cells = [c for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == len(ATTENTION) and _value(cells[0]) != "n":
            out.setdefault("gpu-attention.jsonl", []).append({"gpu": gpu, **{k: _value(c) for k, c in zip(ATTENTION, cells)}})
        elif line.startswith("| ") and len(cells) == len(MODEL) and cells[0].strip() in ("smollm2-135m", "gemma3-270m"):
            out.setdefault("gpu-model.jsonl", []).append({"gpu": gpu, **{k: _value(c) for k, c in zip(MODEL, cells)}})
        elif m := re.fullmatch(r"(\d+ (?:passed|failed).*) in [\d.]+s", line.strip()):
            out.setdefault("gpu-tests.jsonl", []).append({"gpu": gpu, "CUDA tests": m.group(1)})
        elif m := re.fullmatch(r"(contiguous|transposed) (sinks|band only) flex ([\d.]+) flex\+lse ([\d.]+)", line.strip()):
            out.setdefault("gpu-columns.jsonl", []).append({"gpu": gpu, "q, k, v": m.group(1), "support": m.group(2) + " in the BlockMask",
                                                            "ms": float(m.group(3)), "ms, with log-sum-exp": float(m.group(4))})
        elif m := re.fullmatch(r"(contiguous|transposed) sinks gathered \(column part \+ merge\) ([\d.]+)", line.strip()):
            out.setdefault("gpu-columns.jsonl", []).append({"gpu": gpu, "q, k, v": m.group(1), "support": "sinks gathered (column part + merge)",
                                                            "ms": float(m.group(2))})
        elif m := re.fullmatch(r"SDPA causal contiguous ([\d.]+)", line.strip()):
            out.setdefault("gpu-columns.jsonl", []).append({"gpu": gpu, "q, k, v": "contiguous", "support": "SDPA causal",
                                                            "ms": round(float(m.group(1)), 3)})
    logits = _logits(text, gpu)
    if logits:
        out["gpu-logits.jsonl"] = logits
    return out


def _logits(text: str, gpu: str) -> list[dict]:
    """gpu_check's (b): one row per model."""
    rows, model = [], None
    for line in text.splitlines():
        if m := re.match(r"(.+), n = ([\d,]+):  method \|", line):
            model = {"gpu": gpu, "model": m.group(1), "n": _value(m.group(2)), "methods within tolerance": 0, "largest rel. error": 0.0,
                     "smallest top-1 agreement %": 100.0, "cannot run": ""}
            rows.append(model)
        elif model is not None and (m := re.fullmatch(r"\s+(\S+)\s+\| ([\d.e+-]+) \|\s+([\d.]+) % \| (ok|ABOVE TOLERANCE)", line)):
            model["methods within tolerance"] += m.group(4) == "ok"
            model["largest rel. error"] = max(model["largest rel. error"], float(m.group(2)))
            model["smallest top-1 agreement %"] = min(model["smallest top-1 agreement %"], float(m.group(3)))
        elif model is not None and (m := re.fullmatch(r"\s+(\S+)\s+\| cannot run: (.*)", line)):
            reason = m.group(2).split(" (")[0]
            model["cannot run"] = (model["cannot run"] + "; " if model["cannot run"] else "") + f"{m.group(1)}: {reason}"
    return rows


def main() -> int:
    from attnlab.errors import UserError

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", type=Path, help="the logs of gpu_check.py / gpu_columns.py")
    ap.add_argument("--gpu", required=True, help="the GPU the logs were measured on, as its name is published")
    ap.add_argument("--out", type=Path, required=True, help="the folder the JSON lines go to")
    a = ap.parse_args()
    found: dict[str, list[dict]] = {}
    for log in a.logs:
        if not log.is_file():
            raise UserError(f"{log}: no such log")
        got = records(log.read_text(encoding="utf-8", errors="replace"), a.gpu)
        if not got:
            raise UserError(f"{log}: no table of gpu_check.py or gpu_columns.py in it")
        for name, rows in got.items():
            found.setdefault(name, []).extend({"log": log.name, **r} for r in rows)
    a.out.mkdir(parents=True, exist_ok=True)
    for name, rows in found.items():
        (a.out / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        print(f"{a.out / name}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

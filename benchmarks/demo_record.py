"""The record of one ``attnlab experiment`` run (the demo): a JSON line per model from its results.json.

    python benchmarks/demo_record.py runs/demo/run --wall 612.4 --cpu 530.1 --load 1.9 > runs/demo/demo.jsonl

Each line: the model, its training steps and why training stopped, its loss, BLEU and chrF on the evaluation split,
how many of its heads the roles stage named (a role other than "other") out of all, and, per run, the per-language
estimate ŵ against the grammar's known max_reorder and the run's seconds (``--wall``: the wall time the shell
measured around the command, beside the experiment's own total; ``--cpu``: the CPU seconds of the command and its
children; ``--load``: the machine's mean 1-minute load average over the run, how busy the 2 cores were).
``tests/test_first_demo.py`` holds the committed record to a floor.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["record_lines"]


def record_lines(results: dict, wall: float | None = None, cpu: float | None = None,
                 load: float | None = None) -> list[dict]:
    """The lines of the record, from an experiment's results.json (module docstring)."""
    settings = results.get("_settings", {})
    est = results.get("estimate-w", {})
    lines = []
    for key, train in sorted((k, v) for k, v in results.items() if k.startswith("train-")):
        name = key[len("train-"):]
        scores = results["evaluate"]["models"][name]
        roles = results["roles"]["models"][name]
        lines.append({
            "model": name, "title": train["title"], "data": settings.get("data"), "steps": train["steps"],
            "max_steps": train.get("max_steps"), "stopped": train.get("stopped"), "loss": round(train["final_loss"], 4),
            "bleu": round(scores["bleu"], 2), "chrf": round(scores["chrf"], 2), "sentences": scores["sentences"],
            "heads_named": sum(1 for r in roles if r["role"] != "other"), "heads": len(roles),
            "w_hat": est.get("models", {}).get(name, {}).get("w"), "train_s": train["train_seconds"],
        })
    lines.append({"model": "run", "w_hat": est.get("w"), "known_max_reorder": est.get("known_max_reorder"),
                  "recovers_max_reorder": est.get("recovers_max_reorder"),
                  "experiment_s": results.get("_total_seconds"), "wall_s": wall,
                  **({"cpu_s": cpu} if cpu is not None else {}), **({"load": load} if load is not None else {})})
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="an attnlab experiment run folder (its results.json)")
    ap.add_argument("--wall", type=float, default=None, help="the wall seconds measured around the command")
    ap.add_argument("--cpu", type=float, default=None, help="the CPU seconds of the command and its children")
    ap.add_argument("--load", type=float, default=None, help="the mean 1-minute load average during the run")
    args = ap.parse_args(argv)
    path = args.run / "results.json"
    if not path.is_file():
        print(f"demo_record.py: error: {path}: no such file (is {args.run} a finished attnlab experiment?)",
              file=sys.stderr)
        return 2
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
        lines = record_lines(results, args.wall, args.cpu, args.load)
    except (json.JSONDecodeError, KeyError) as err:
        print(f"demo_record.py: error: {path}: not a finished experiment's results ({err})", file=sys.stderr)
        return 2
    for line in lines:
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    from attnlab.script_guard import main_guard   # a usage error or a bad file: one line, exit 2

    main_guard(main)

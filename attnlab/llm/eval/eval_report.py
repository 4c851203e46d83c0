"""What ``attnlab eval`` shows: the depth × length accuracy heatmap per (task, method, β), a table, a summary.

    acc(task, n, method, β)         = mean over depths and samples of string_match_all
    kept(task, n, method, β)        = acc / acc(full)            (the fraction of full attention's ceiling kept)
    cells ≥ 80 %                    = (n, d) cells where full attention scores ≥ 0.8: only there a method is
                                      compared

Rows with a ``reference`` field (another library run on the same prompts, e.g. kvpress by
``benchmarks/kvpress_eval.py``) are marked † in the table; a field a row lacks (β, timings) shows as –.

Written into the run's folder: ``table.md`` (one row per task, length, method, β, with β measured, KV
tokens kept — resident, + stored tokens read back per step, stored beside them (read-back plans,
``attnlab.llm.eval.greedy``; "–" for rows measured before these fields) —, perplexity beside, seconds per prompt
with the prompt tokens whose prefill was reused, and the grid's wall time from ``wall.jsonl``), ``summary.json`` and
``heatmap-TASK-METHOD-β.png``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from attnlab.atomic import write_text_atomic

__all__ = ["CEILING", "read_walls", "summarise", "wall_time", "write_report"]

CEILING = 0.8  # full attention's accuracy at or above which a cell counts for comparing methods


def summarise(rows: list[dict], walls: list[dict] | None = None) -> dict:
    """Aggregates of the answer and perplexity rows (no file I/O); ``walls``: the lines of ``wall.jsonl``."""
    answers = [r for r in rows if r.get("kind") == "answer"]
    ppl = {(r["method"], r["budget"], r["n"]): r for r in rows if r.get("kind") == "ppl"}
    cell = defaultdict(list)                                        # (method, β, task, n, depth) → scores
    for r in answers:
        cell[(r["method"], r["budget"], r["task"], r["n"], r["depth"])].append(r["score"])
    full = {(t, n, d): float(np.mean(v)) for (m, b, t, n, d), v in cell.items() if m == "full"}
    groups = defaultdict(list)
    for r in answers:
        groups[(r["task"], r["n"], r["method"], r["budget"])].append(r)
    table = []
    def order(kv):   # task, n, full first, method, β
        return kv[0][0], kv[0][1], kv[0][2] != "full", kv[0][2], kv[0][3]

    for (task, n, method, budget), rs in sorted(groups.items(), key=order):
        depths = sorted({r["depth"] for r in rs}, key=lambda d: -1 if d is None else d)
        good = [d for d in depths if full.get((task, n, d), 0.0) >= CEILING]
        acc = float(np.mean([r["score"] for r in rs]))
        acc_good = float(np.mean([r["score"] for r in rs if r["depth"] in good])) if good else None
        full_good = float(np.mean([full[(task, n, d)] for d in good])) if good else None
        p = ppl.get((method, budget, n))
        table.append({
            "task": task, "n": n, "method": method, "budget": budget, "prompts": len(rs), "accuracy": acc,
            "cells_full_ge_80": f"{len(good)}/{len(depths)}", "accuracy_on_those": acc_good,
            "kept_of_full": (acc_good / full_good) if acc_good is not None and full_good else None,
            **{k: _mean(rs, k) for k in ("beta", "kv_tokens", "prefill_s", "decode_s")},
            "reused_tokens": float(np.mean([r.get("reused_tokens", 0) for r in rs])),   # older rows: none reused
            "ppl": p["ppl"] if p else None,
            **{k: _mean(rs, k, every=True) for k in ("kv_read_tokens", "kv_store_tokens")},
            "reference": rs[0].get("reference"),
        })
    skipped = [{k: r[k] for k in ("method", "budget", "n", "reason")} for r in rows if r.get("kind") == "skipped"]
    return {"table": table, "cells": {"|".join(map(str, k)): float(np.mean(v)) for k, v in cell.items()},
            "ppl": [ppl[k] for k in sorted(ppl, key=str)], "skipped": skipped,
            **wall_time(walls or [])}


def wall_time(walls: list[dict]) -> dict:
    """The grid's wall time from the lines of ``wall.jsonl``: the length of the union of the runs' intervals
    [started, started + seconds], so that runs side by side (torchrun's ranks, each writing its line, or runs made in
    two folders and merged into one) count once.

    ``started`` is to the second, so two runs overlap when one starts more than a second before the other ends; runs
    one after the other add up as before.  Returns wall_s (None without lines), wall_runs, wall_side_by_side (the runs
    that overlapped another).
    """
    def started(w: dict) -> float | None:   # a line without a readable start is a run by itself
        try:
            return datetime.strptime(w["started"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
        except (KeyError, TypeError, ValueError):
            return None

    spans = [(started(w), w["seconds"]) for w in walls]
    undated = [seconds for start, seconds in spans if start is None]
    groups: list[list[float]] = []                       # [start, end, runs] of each stretch of overlapping dated runs
    for start, seconds in sorted(x for x in spans if x[0] is not None):
        if groups and start < groups[-1][1] - 1.0:       # overlaps the stretch before by more than a second's rounding
            groups[-1][1], groups[-1][2] = max(groups[-1][1], start + seconds), groups[-1][2] + 1
        else:
            groups.append([start, start + seconds, 1])
    wall = sum(end - start for start, end, _ in groups) + sum(undated)
    return {"wall_s": round(wall, 3) if walls else None, "wall_runs": len(walls),   # seconds are logged to the ms
            "wall_side_by_side": int(sum(runs for _, _, runs in groups if runs > 1))}


def _mean(rows: list[dict], key: str, every: bool = False) -> float | None:
    """Mean of ``key`` over the rows that hold it (a reference row may lack β or timings); None if none do,
    or (``every``) if one lacks it (a row measured before the field existed)."""
    v = [r[key] for r in rows if r.get(key) is not None]
    return float(np.mean(v)) if v and (not every or len(v) == len(rows)) else None


def _fmt(x, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def markdown(summary: dict) -> str:
    lines = ["| task | n | method | β target | β measured | KV tokens | + read/step | stored | prompts | accuracy | "
             "full ≥ 80 % cells | accuracy there | of full | ppl | prefill s | reused tokens | decode s |",
             "|" + "---|" * 17]
    for r in summary["table"]:
        method = r["method"] + (" †" if r.get("reference") else "")
        there = None if r["accuracy_on_those"] is None else 100 * r["accuracy_on_those"]
        kept = None if r["kept_of_full"] is None else 100 * r["kept_of_full"]
        lines.append(f"| {r['task']} | {r['n']} | {method} | {r['budget']:g} | {_fmt(r.get('beta'), '.3f')} | "
                     f"{_fmt(r.get('kv_tokens'), '.0f')} | {_fmt(r.get('kv_read_tokens'), '.1f')} | "
                     f"{_fmt(r.get('kv_store_tokens'), '.0f')} | {r['prompts']} | {100 * r['accuracy']:.1f} % | "
                     f"{r['cells_full_ge_80']} | {_fmt(there, '.1f')} | {_fmt(kept, '.0f')} | "
                     f"{_fmt(r['ppl'], '.3f')} | "
                     f"{_fmt(r.get('prefill_s'), '.2f')} | {r.get('reused_tokens', 0):.0f} | "
                     f"{_fmt(r.get('decode_s'), '.2f')} |")
    refs = sorted({r["reference"] for r in summary["table"] if r.get("reference")})
    if refs:
        lines.append(f"\n† reference rows ({', '.join(refs)}): another library's methods run on the same prompts and "
                     "scored the same way (`benchmarks/kvpress_eval.py`); β target = the fraction of the KV kept; "
                     "– = not measured by that run")
    lines += [f"\n{r['method']} β={r['budget']:g} at n = {r['n']}: not run — {r['reason']}"
              for r in summary.get("skipped", [])]
    if summary.get("wall_s") is not None:
        side = summary.get("wall_side_by_side", 0)
        side = f", {side} of them side by side, counted once" if side else ""
        runs = summary["wall_runs"]
        lines.append(f"\ngrid wall time: {summary['wall_s']:.1f} s ({runs} run{'s' if runs != 1 else ''}"
                     f" of attnlab eval on this folder{side}; prefill s and decode s are per prompt, a prefix reused "
                     "across prompts — reused tokens — counted once: not a speed benchmark, which is "
                     "benchmarks/llm_structured.py speed and decode)")
    return "\n".join(lines) + "\n"


def heatmaps(rows: list[dict], out: Path) -> list[Path]:
    """One depth × length picture per (task, method, β) of the tasks placed at a depth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnlab.viz.heatmap import save_figure

    cell = defaultdict(list)
    for r in rows:
        if r.get("kind") == "answer" and r["depth"] is not None:
            cell[(r["task"], r["method"], r["budget"])].append(r)
    written = []
    for (task, method, budget), rs in sorted(cell.items(), key=str):
        ns = sorted({r["n"] for r in rs})
        ds = sorted({r["depth"] for r in rs})
        acc = np.full((len(ds), len(ns)), np.nan)
        for i, d in enumerate(ds):
            for j, n in enumerate(ns):
                v = [r["score"] for r in rs if r["n"] == n and r["depth"] == d]
                if v:
                    acc[i, j] = np.mean(v)
        fig, ax = plt.subplots(figsize=(max(3.4, 1.8 + 0.9 * len(ns)), max(2.6, 1.2 + 0.32 * len(ds))))
        im = ax.imshow(acc, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
        for i in range(len(ds)):
            for j in range(len(ns)):
                if not np.isnan(acc[i, j]):
                    ax.text(j, i, f"{100 * acc[i, j]:.0f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(ns)), [f"{n // 1024}K" if n % 1024 == 0 else str(n) for n in ns])
        ax.set_yticks(range(len(ds)), [f"{100 * d:.0f} %" for d in ds])
        ax.set_xlabel("prompt length (tokens)")
        ax.set_ylabel("needle depth")
        label = method if method in ("full", "plan") else f"{method} β={budget:g}"
        ax.set_title(f"{task}: {label}", fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.05, label="accuracy")
        fig.tight_layout()
        name = f"heatmap-{task}-{method}" + ("" if method in ("full", "plan") else f"-{budget:g}") + ".png"
        written.append(save_figure(fig, out / name))
        plt.close(fig)
    return written


def read_walls(out: str | Path) -> list[dict]:
    """The lines of ``out/wall.jsonl`` (one per run of the grid: seconds, rows measured, reuse on or off), each through
    its schema (``attnlab.schemas.result_row.WallRow``); a torn last line is left out."""
    from attnlab.schemas.result_row import WALL, read_rows

    return read_rows(Path(out) / "wall.jsonl", WALL)


def write_report(rows: list[dict], out: str | Path) -> dict:
    """table.md, summary.json and the heatmaps of ``rows`` in ``out``; returns the summary."""
    out = Path(out)
    summary = summarise(rows, read_walls(out))
    write_text_atomic(out / "table.md", markdown(summary))
    write_text_atomic(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    summary["figures"] = [str(p) for p in heatmaps(rows, out)]
    return summary

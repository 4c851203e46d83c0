"""The last lines of ``attnlab eval``: how each method did against full attention, and what explains a lost prompt.

For each (method, β, task, n) of the run, on the prompts both answered:

    found_m, found_full = Σ score over those prompts        with their 95 % Wilson intervals (eval/wilson.py)
    lost = prompts full attention found (score 1) and the method did not

and the verdict: the same count, or above / below with the intervals apart (the prompts tell them apart) or
overlapping (they do not: more prompts, ``--samples``, would).  A method that lost prompts gets the command that
explains them, ``attnlab eval-why --out OUT --method M``: for each lost prompt, which heads read the needle under
full attention and what the method let them read.
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from pathlib import Path

from attnlab.llm.eval.wilson import interval_text, separated

__all__ = ["verdict_lines"]


def verdict_lines(rows: list[dict], out: Path, default: str = "attnlab") -> list[str]:
    """One line per (method, β, task, n) against full attention, the ``default`` method first, then the eval-why
    command of each method that lost prompts."""
    answers = [r for r in rows if r.get("kind") == "answer" and not r.get("reference")]
    full = {(r["task"], r["n"], r["depth"], r["sample"]): r["score"] for r in answers if r["method"] == "full"}
    groups: dict = defaultdict(list)
    for r in answers:
        prompt = (r["task"], r["n"], r["depth"], r["sample"])
        if r["method"] != "full" and prompt in full:
            groups[(r["method"], r["budget"], r["task"], r["n"])].append((r["score"], full[prompt]))
    lines, lost_by = [], defaultdict(int)
    for (method, budget, task, n), pairs in sorted(groups.items(),
                                                   key=lambda kv: (kv[0][0] != default, kv[0][3], kv[0][2], kv[0][0],
                                                                   kv[0][1])):
        k = sum(s for s, _ in pairs)
        k_full = sum(f for _, f in pairs)
        lost = sum(1 for s, f in pairs if f == 1.0 and s < 1.0)
        lost_by[method] += lost
        if abs(k - k_full) < 1e-9:
            said = "the same as full attention"
        else:
            side = "above" if k > k_full else "below"
            apart = separated((k, len(pairs)), (k_full, len(pairs)))
            said = f"{side} full attention, " + ("the 95 % intervals apart" if apart
                                                 else "within noise (the 95 % intervals overlap)")
        lines.append(f"{method} β={budget:g}, {task} at n = {n}: {interval_text(k, len(pairs))} against full's "
                     f"{interval_text(k_full, len(pairs))}: {said}" + (f"; {lost} prompt{'s' if lost != 1 else ''} "
                                                              f"full found and {method} lost" if lost else ""))
    for method, lost in lost_by.items():
        if lost:
            lines.append(f"why {method} lost {lost} prompt{'s' if lost != 1 else ''}: "
                         f"attnlab eval-why --out {shlex.quote(str(out))} --method {shlex.quote(method)}")
    return lines

"""The first table of docs/results.md: every committed test run of ``attnlab eval`` in one grid, a row per prompt
format (model, task, haystack, template, length) and a column per method, so that the recommended default is read
against full attention and every baseline on every format at once.

    cell(format, method) = Σ_prompts score / prompts          (RULER's string_match_all; "found / asked" when 0/1)
    of full              = accuracy on the depths where full ≥ 80 % / full's accuracy there  (issue's "≥ 95 % of full")

Folders whose name ends in ``-dev`` are the checks made on dev seeds before a test run: they are left out here (their
tables stay in their sections).  A second table gathers, from the runs that scored perplexity beside, each method's
perplexity (and its change from full attention) and its resident KV tokens per length.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.llm.eval.eval_report import summarise

__all__ = ["overview"]

FIRST = ("full", "attnlab")      # then the other methods by name, the oracle last
LAST = ("oracle-topk",)


def _haystack(cfg: dict) -> str:
    h = str(cfg.get("haystack") or "noise")
    return "noise" if h == "noise" else f"{Path(h).parent.name} {Path(h).name.split('.')[0]}"   # shakespeare test


def _order(methods) -> list[str]:
    rest = sorted(m for m in methods if m not in FIRST + LAST)
    return [m for m in FIRST if m in methods] + rest + [m for m in LAST if m in methods]


def _cell(row: dict | None) -> str:
    if row is None:
        return "–"
    found = row["accuracy"] * row["prompts"]
    return f"{found:.0f}/{row['prompts']}" if abs(found - round(found)) < 1e-9 else f"{100 * row['accuracy']:.0f} %"


def overview(folders: list[tuple[Path, dict, list[dict], list[dict]]], rel) -> str:
    """``folders``: (folder, config, result rows, wall rows) of every committed eval run; ``rel(folder)``: its shown path."""
    grid, ppl, methods = [], [], set()
    for folder, cfg, rows, walls in folders:
        if folder.name.endswith("-dev"):
            continue
        table = summarise(rows, walls)["table"]
        for t in table:
            methods.add(t["method"])
        for task, n in sorted({(t["task"], t["n"]) for t in table}, key=lambda x: (x[1], x[0])):
            mine = {t["method"]: t for t in table if t["task"] == task and t["n"] == n}
            label = (cfg.get("model", "?"), task, _haystack(cfg), cfg.get("template", "auto"), n)
            grid.append((label, mine, rel(folder)))
            if any(t.get("ppl") for t in mine.values()) and (label[0], n) not in {(l[0], l[4]) for l, _ in ppl}:
                ppl.append((label, mine))   # one row per (model, n): the same plans score the same text in each task's run
    if not grid:
        return ""
    cols = _order(methods)
    lines = ["## At a glance", "",
             "Prompts found by each method on every committed test run of `attnlab eval` (β = the run's budget; its "
             "section gives the commands). *of full*: the default's accuracy on the depths where full attention finds "
             "≥ 80 %, over full's there (the target: ≥ 95 %); *full ≥ 80 %*: those depths over all.", "",
             "| model | task | haystack | template | n | " + " | ".join(f"`{m}`" for m in cols) + " | full ≥ 80 % | `attnlab` of full | run |",
             "|" + "---|" * (len(cols) + 8)]
    for (model, task, hay, template, n), mine, where in sorted(grid, key=lambda g: (g[0][0], g[0][4], g[0][1], g[0][2])):
        any_row = next(iter(mine.values()))
        a = mine.get("attnlab")
        kept = f"{100 * a['kept_of_full']:.0f} %" if a and a.get("kept_of_full") is not None else "–"
        lines.append(f"| {model} | {task} | {hay} | {template} | {n} | " + " | ".join(_cell(mine.get(m)) for m in cols)
                     + f" | {any_row['cells_full_ge_80']} | {kept} | `{where}` |")
    if ppl:
        pcols = _order({m for _, mine in ppl for m in mine if mine[m].get("ppl")})
        lines += ["", "Perplexity (one test window of the run's `--ppl` text, the same plans) and resident KV tokens per "
                  "(layer, KV head) after the prefill, from the runs that scored it:", "",
                  "| model | n | " + " | ".join(f"`{m}`" for m in pcols) + " |", "|" + "---|" * (len(pcols) + 2)]
        for (model, task, hay, template, n), mine in sorted(ppl, key=lambda g: (g[0][0], g[0][4])):
            full = mine.get("full", {}).get("ppl")
            cells = []
            for m in pcols:
                r = mine.get(m)
                if not r or not r.get("ppl"):
                    cells.append("–")
                    continue
                change = f" ({100 * (r['ppl'] / full - 1):+.2f} %)" if full and m != "full" else ""
                cells.append(f"{r['ppl']:.3f}{change}, KV {r['kv_tokens']:.0f}")
            lines.append(f"| {model} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

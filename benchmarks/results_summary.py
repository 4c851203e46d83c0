"""The summary of docs/results.md: a row per method over every committed test run of ``attnlab eval``.

A *test row* is one (model, task, n) of a test run (a folder not ending in ``-dev``), as in the first table
(``results_overview``).  For a method m and the test rows R_m it ran on:

    found_m   = Σ_{prompts of R_m} score          (RULER's string_match_all: 1 a prompt found, a fraction for part)
    prompts_m = |prompts of R_m|
    interval  = Wilson 95 % of found_m / prompts_m   (attnlab/llm/eval/wilson.py)

and full attention's found on the *same* prompts (full runs on every row: the ceiling).  ``vs full`` says whether
the two intervals are apart (a finding) or overlap (the prompts cannot tell them apart: noise at this size).

KV: resident = Σ kv_bytes_m / Σ kv_bytes_full over the same prompts (the cache after the prefill); stored =
Σ kv_store_bytes_m / Σ kv_bytes_full (evicted keys kept aside on the same device and read back at decoding).
Perplexity: the change from full attention on each (model, n) that scored it.  Prefill and decoding speed: the
A/B runs of ``llm_structured.py decode`` (full attention's time over the method's in one process).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.llm.eval.wilson import interval_text, separated, wilson

__all__ = ["Tally", "tally_rows", "method_tallies", "summary_table", "SHORT", "CHECKED"]

PPL_ONLY = ("attnlab-band",)
PREFILL_IN_FULL = ("quest", "snapkv")   # their perplexity window is scored with full attention's prefill
SHORT = {"smollm2-135m": "SmolLM2", "gemma3-270m": "Gemma-3"}
# what each baseline was checked against (docs/baselines.md): the reference implementation and how they agree
CHECKED = {
    "snapkv": "kvpress 0.5.5 `SnapKVPress`: the same kept positions (0 of 138,240 differ at 2K); on NIAH 2K noise "
              "kvpress's press finds 20 %, attnlab's 2/10",
    "streaming-llm": "kvpress 0.5.5 `StreamingLLMPress`: the same kept positions; on NIAH 2K noise kvpress 20 %",
    "quest": "no kvpress press; its tests check the rule (the bound ≥ every score, the chosen pages read)",
    "minference": "no kvpress press; its tests check the vertical-slash pattern against the dense mask",
}


@dataclass
class Tally:
    """Prompts found and KV bytes summed over prompts: one method's, on a set of test rows."""
    found: float = 0.0
    prompts: int = 0
    kv_bytes: float = 0.0
    store_bytes: float = 0.0
    rows: set = field(default_factory=set)

    def add(self, r: dict, row: tuple) -> None:
        self.found += r["score"]
        self.prompts += 1
        self.kv_bytes += r.get("kv_bytes") or 0
        self.store_bytes += r.get("kv_store_bytes") or 0
        self.rows.add(row)

    @property
    def accuracy(self) -> float:
        return self.found / self.prompts

    def interval(self) -> tuple[float, float]:
        return wilson(self.found, self.prompts)


def tally_rows(folders: list[tuple[Path, dict, list[dict], list[dict]]]) -> dict:
    """{test row (model, folder, task, n): {method: Tally}} over the test runs' answers (named methods only)."""
    cells: dict = defaultdict(lambda: defaultdict(Tally))
    for folder, cfg, rows, _ in folders:
        if folder.name.endswith("-dev"):
            continue
        seen = set()
        for r in rows:
            if r.get("kind") != "answer" or ":" in r["method"] or r["method"] in PPL_ONLY or r.get("reference"):
                continue
            if r.get("key") in seen:                    # a torchrun grid's rank files may repeat a row
                continue
            seen.add(r.get("key"))
            row = (cfg.get("model", "?"), str(folder), r["task"], r["n"])
            cells[row][r["method"]].add(r, row)
    return cells


def method_tallies(cells: dict, model: str | None = None) -> dict[str, tuple[Tally, Tally]]:
    """{method: (its tally, full's tally on the same rows)} over every test row (of ``model`` when given)."""
    out: dict = {}
    for row, by_method in cells.items():
        if model is not None and row[0] != model or "full" not in by_method:
            continue
        for m, t in by_method.items():
            mine, full = out.setdefault(m, (Tally(), Tally()))
            for attr in ("found", "prompts", "kv_bytes", "store_bytes"):
                setattr(mine, attr, getattr(mine, attr) + getattr(t, attr))
                setattr(full, attr, getattr(full, attr) + getattr(by_method["full"], attr))
            mine.rows.add(row)
            full.rows.add(row)
    return out


def verdict(mine: Tally, full: Tally) -> str:
    """Above / below full attention on the same prompts, and whether the 95 % intervals say it is a finding."""
    if abs(mine.found - full.found) < 1e-9:
        return "= full"
    side = "above" if mine.found > full.found else "below"
    apart = separated((mine.found, mine.prompts), (full.found, full.prompts))
    return f"**{side}**, intervals apart" if apart else f"{side}, within noise (intervals overlap)"


def _kv(mine: Tally, full: Tally) -> tuple[str, str]:
    if not full.kv_bytes or not mine.kv_bytes:
        return "–", "–"
    resident = mine.kv_bytes / full.kv_bytes
    stored = mine.store_bytes / full.kv_bytes
    return (f"{100 * resident:.1f} % ({1 / resident:.2f}× less)" if resident < 0.9995 else "100 %",
            f"+ {100 * stored:.1f} %" if stored else "none")


def _model_first(item) -> tuple:
    (model, n), _ = item
    return model != "smollm2-135m", model, n


def summary_table(cells: dict, ppl: dict, speed: dict, order: list[str]) -> str:
    """The summary (module docstring): ``ppl`` {(model, n): {method: (ppl, full's ppl)}}, ``speed`` {method: [(model,
    n, threads, prefill ×, decoding ×)]}, ``order`` the methods in the table's order."""
    models = sorted({row[0] for row in cells}, key=lambda x: (x != "smollm2-135m", x))
    every = method_tallies(cells)
    per_model = {model: method_tallies(cells, model) for model in models}
    head = (["method", "found, all test rows [95 %]", *(f"{SHORT.get(m, m)} [95 %]" for m in models),
             "full, same prompts [95 %]", "vs full", "KV resident (of full's bytes)", "KV stored aside",
             "perplexity vs full", "prefill, decoding × full", "checked against"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in [m for m in order if m in every]:
        mine, full = every[m]
        by_model = [interval_text(per_model[x][m][0].found, per_model[x][m][0].prompts) if m in per_model[x] else "–"
                    for x in models]
        resident, stored = _kv(mine, full)
        ppl_cells = [f"{SHORT.get(x, x)} {n // 1024}K {round(100 * (p / f - 1), 1) + 0.0:+.1f} %"   # + 0.0: no −0.0
                     for (x, n), by in sorted(ppl.items(), key=_model_first) for mm, (p, f) in by.items()
                     if mm == m and m != "full"]
        if m in PREFILL_IN_FULL and ppl_cells:
            ppl_cells = ["= full (its prefill is full attention)"]
        speeds = [f"{SHORT.get(x, x)} {n // 1024}K, {t} thread{'s' if t > 1 else ''}: {pre:.2f}×, {dec:.2f}×"
                  for x, n, t, pre, dec in speed.get(m, [])]
        lines.append("| " + " | ".join([
            f"`{m}`", interval_text(mine.found, mine.prompts), *by_model,
            interval_text(full.found, full.prompts) if m != "full" else "–",
            verdict(mine, full) if m != "full" else "the ceiling",
            resident if m != "full" else "100 %", stored if m != "full" else "none",
            "; ".join(ppl_cells) or ("the reference" if m == "full" else "–"),
            "; ".join(speeds) or "–", CHECKED.get(m, "–")]) + " |")
    return "\n".join(lines) + "\n"


def perplexities(folders: list[tuple[Path, dict, list[dict], list[dict]]]) -> dict:
    """{(model, n): {method: (its perplexity, full's)}} from the test runs that scored perplexity (first run wins)."""
    from attnlab.llm.eval.eval_report import summarise

    out: dict = {}
    for folder, cfg, rows, walls in folders:
        if folder.name.endswith("-dev"):
            continue
        table = [t for t in summarise(rows, walls)["table"] if ":" not in t["method"] and t.get("ppl")]
        for n in sorted({t["n"] for t in table}):
            full = next((t["ppl"] for t in table if t["n"] == n and t["method"] == "full"), None)
            for t in table:
                if t["n"] == n and full:
                    out.setdefault((cfg.get("model", "?"), n), {}).setdefault(t["method"], (t["ppl"], full))
    return out


def speeds(decode_files: list[tuple[str, list[dict]]]) -> dict:
    """{method: [(model, n, threads, prefill × full, decoding × full)]} from the A/B lines (round "all") of
    ``llm_structured.py decode``; ``decode_files``: (the model its recipe ran, the file's lines)."""
    out: dict = defaultdict(list)
    for model, lines in decode_files:
        for r in lines:
            if r.get("round") == "all":
                out[r["method"]].append((model, r["n"], r["threads"], r["prefill_ratio"], r["ratio"]))
    return {m: sorted(v, key=lambda x: (x[0] != "smollm2-135m", x[1], -x[2])) for m, v in out.items()}

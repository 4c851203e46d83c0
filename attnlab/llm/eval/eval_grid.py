"""``attnlab eval``: retrieval and perplexity of a model under methods, on a grid, resumable.

    for n in lengths:                                   (the calibration of n, when a method needs one)
      for task, depth d, sample s:                      the methods whose prefill is full attention, one shared prefill
        for (method, β) in [full] + those methods × budgets:  score = string_match_all(answer, expected) → results.jsonl
      for (method, β) in the other methods × budgets:
        for task, depth d, sample s:   score = string_match_all(greedy answer, expected)   → results.jsonl
      perplexity of each method at n on ``ppl`` windows                                  → results.jsonl

Each line of ``results.jsonl`` is one prompt (or one perplexity), written and flushed as soon as it
is measured, under a key of (method, β, task, n, d, s).  A run started again on the same ``--out``
reads the lines there, drops a torn last line, and measures only the keys still missing: a killed run
continues where it stopped and ends with the same lines as one never killed (greedy decoding is
deterministic).  ``config.json`` holds the settings; a later run in the same folder may add tasks, lengths,
methods and budgets (the rows are keyed by all four), any other setting that differs is refused.
Full attention runs on every prompt: it is the ceiling the methods are compared against.  The methods
whose prefill is full attention (``Method.prefill_reuse``: full, SnapKV, Quest) run prompt by prompt
together, on one shared full-attention prefill that also keeps the prefix shared with the previous
prompt (``prefix_cache``; ``reuse=False``, ``--no-reuse``: every answer its own prefill).  Each row
records the prefill seconds it spent and its ``reused_tokens``; ``wall.jsonl`` the wall time of each run.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import numpy as np

from attnlab.atomic import write_text_atomic
from attnlab.errors import UserError
from attnlab.llm.calibration.build import calibration_file
from attnlab.llm.eval.eval_inputs import GridTexts, check_eval_folder, token_texts
from attnlab.llm.eval.eval_settings import CheckedSettings, EvalSettings, check_context, method_at
from attnlab.llm.eval.results_file import FORMAT, GROWS, read_results
from attnlab.llm.eval.tasks import TASKS, Haystack, sample_key, string_match_all
from attnlab.llm.methods import PLAN_FILE
from attnlab.progress import SILENT, Progress

__all__ = ["depth_grid", "read_results", "run_eval"]


def depth_grid(count: int) -> list[float]:
    """``count`` depths from 0 (the needle first) to 1 (last), evenly spaced (one: the middle)."""
    return [0.5] if count == 1 else [float(x) for x in np.linspace(0.0, 1.0, count)]


def _claim(out: Path, settings: EvalSettings, old: dict | None) -> None:
    """Write ``config.json``, or grow the one of the run ``old`` there (``check_eval_folder``: same settings but
    ``GROWS``, which may gain values)."""
    cfg = {"format": FORMAT, **asdict(settings)}
    path = out / "config.json"
    if old is not None:
        grown = {k: list(old.get(k) or []) + [x for x in cfg[k] if x not in (old.get(k) or [])] for k in GROWS}
        if any(grown[k] != old.get(k) for k in GROWS):
            write_text_atomic(path, json.dumps({**old, **grown}, indent=1) + "\n")
        return
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(cfg, indent=1) + "\n")


def calibrations(model, tokenizer, checked: CheckedSettings, out: Path, text=None, progress: Progress = SILENT):
    """``calibration(n, methods)``: the calibration at length n for the calibrated ``methods`` (``_calibration``), set
    up once before the grid and asked by it at each n when a calibrated run is first prepared there (after the runs
    that need none: a slow calibration holds back no cheap method)."""
    def calibration(n: int, methods: list):
        return _calibration(model, tokenizer, checked, out, n, methods, progress, text)

    return calibration


def _calibration(model, tokenizer, checked: CheckedSettings, out: Path, n: int, methods: list,
                 progress: Progress = SILENT, text=None):
    """The calibration at length n for the calibrated ``methods``, resolved in this one place: without --calibrate
    the archive attnlab ships for the model at n (read by ``check_settings``), else ``out/calibration-n.npz``, made
    once on the calibration ``text`` (the --calibrate file's ``TokenText``, read before the grid)."""
    if not any(m.calibrated for m in methods):
        return None
    settings = checked.settings
    if settings.calibrate:   # ``text``: check_grid's TokenText of it (a calibrated method: always tokenised there)
        return calibration_file(model, tokenizer, methods, n, out / f"calibration-{n}.npz", text,
                                settings.calibrate_windows, checked.mix, progress)
    from attnlab.llm.calibration.archive import compact_of

    shipped = checked.shipped[n]
    progress.stage(f"calibration n={n}: the one attnlab ships ({shipped.path.name})")
    return compact_of(shipped.archive, str(shipped.path))   # an archive: attnlab ships no other form


def run_eval(model, tokenizer, checked: CheckedSettings, out: str | os.PathLike, progress: Progress = SILENT,
             stop_after: int | None = None, reuse: bool = True) -> list[dict]:
    """Measure the grid into ``out/results.jsonl`` (resuming what is there); returns every row.

    ``checked``: the settings as ``check_settings`` returns them (every option checked and every file they name read
    once, where they were built: ``attnlab eval`` before the model loads); here they are checked against the model,
    the folder and the tokenizer, before anything is written (``check_grid``).  ``progress`` (``attnlab.progress``):
    a bar over the rows, row by row, and the calibrations' bars; ``stop_after``: stop after measuring that many new
    rows (tests of resumption).  ``reuse``: the methods whose prefill is full attention (``Method.prefill_reuse``)
    share one prefill per prompt, and a prompt reuses the prefix it shares with the one before (``prefix_cache``);
    the answers are those of ``reuse=False``, the seconds fewer.
    """
    from attnlab.llm.eval.ranks import Ranks, read_all
    from attnlab.llm.execution.prefix_cache import FullPrefill

    if not isinstance(checked, CheckedSettings):   # settings handed unchecked: said, not an AttributeError deeper
        raise TypeError(f"run_eval takes check_settings(settings), not {type(checked).__name__}")
    out = Path(out)
    settings = checked.settings
    grid = check_grid(model, tokenizer, checked, out)    # the model's, the texts', the folder's checks: nothing written
    _claim(out, settings, grid.folder)
    ranks = Ranks.from_env()
    results = ranks.results_path(out)    # torchrun: this rank's file, its share of the prompts (ranks)
    rows = read_all(out)                 # every rank's rows: resumable with any number of ranks
    done = {r["key"] for r in rows}
    mine, share = rank_share(settings, ranks)
    calibration = calibrations(model, tokenizer, checked, out, grid.texts.calibration, progress)
    prefixes = FullPrefill() if reuse else None
    measured, t_start = 0, time.time()
    bar = progress.start(ranks.label("eval"), total=len(share), unit="rows", done=len(done & share.keys()),
                         kinds=[k for key, k in share.items() if key not in done])   # a row's cost: its method and n
    with open(results, "a", encoding="utf-8") as log:
        def emit(row):
            nonlocal measured
            log.write(json.dumps(row) + "\n")
            log.flush()
            os.fsync(log.fileno())
            rows.append(row)
            done.add(row["key"])
            measured += 1
            what = f"{row['method']} β={row['budget']:g} n={row['n']} " + row.get("task", "ppl")
            bar.update(len(done & share.keys()), kind=share.get(row["key"]), note=what)
            if stop_after is not None and measured >= stop_after:
                raise KeyboardInterrupt

        try:
            for n in settings.lengths:
                samples = dict.fromkeys(mine)    # this rank's prompts at n, each built when first answered
                answer = answerer(model, tokenizer, settings, grid.hay, n, samples, prefixes, emit)
                for calibrated in (False, True):   # the methods without a calibration are answered before it is made
                    ready = _prepared_runs(model, settings, n, samples, done, emit, calibrated, calibration)
                    shared = [r for r in ready if prefixes is not None and r.method.prefill_reuse]
                    for key in samples:  # prompts outer, the sharing methods inner: one full prefill serves them all
                        for run in shared:
                            if key in run.todo:
                                answer(run, key)
                    for run in shared + [r for r in ready if r not in shared]:
                        if run not in shared:   # the others method by method, as before
                            for key in run.todo:
                                answer(run, key)
                        if run.ppl_key is not None and ranks.rank == 0:
                            emit(_perplexity_row(model, run, n, grid.texts.ppl.windows(n, settings.ppl_windows)))
        finally:
            bar.close()
            if measured:
                _log_wall(out, t_start, measured, reuse)
    return rows


class GridInputs(NamedTuple):
    """What the grid reads, checked before anything is written (``check_grid``)."""

    hay: Haystack             # the haystack of every prompt
    texts: GridTexts          # --calibrate and --ppl, each read once
    folder: dict | None       # the config.json of the run ``out`` continues (None: a new run)


def check_grid(model, tokenizer, checked: CheckedSettings, out: Path) -> GridInputs:
    """Everything the grid will read, checked against the model before anything is written (the settings themselves
    were checked, and their files read, where they were built: ``check_settings``): the lengths against its context,
    the haystack and every task at every length, the plan file, each method's own files, the run folder ``out``
    (``check_eval_folder``), the texts in its tokens (``token_texts``)."""
    from attnlab.llm.models.loading import model_max_len

    settings = checked.settings
    check_context(settings.lengths, model_max_len(model))
    if settings.haystack == "noise":
        hay = Haystack.noise(tokenizer)
    else:
        hay = Haystack.of_text(tokenizer, checked.texts["--haystack"], settings.haystack, max(settings.lengths))
    for t in settings.tasks:  # every task fits every length and the haystack holds it
        for n in settings.lengths:
            TASKS[t].make(tokenizer, hay, n, 0.5, 0, settings.seed, settings.format())
    if settings.plan:  # a plan for another model or length
        for n in settings.lengths:
            method_at(settings, PLAN_FILE, 0.0).make_plan(model, n, None)
    for name in settings.methods:  # a method's own files (a gate file for another model): refused, not a skipped row
        method_at(settings, name, 1.0).check_model(model)
    calibrated = any(method_at(settings, m, 1.0).calibrated for m in settings.methods)
    folder = check_eval_folder(out, settings)   # a user's folder, another model's or other settings' run: refused
    return GridInputs(hay, token_texts(tokenizer, settings.lengths, checked.texts,
                                       settings.calibrate if calibrated else None, settings.ppl), folder)


def rank_share(settings: EvalSettings, ranks) -> tuple[list, dict]:
    """This rank's prompts (task, depth, sample) in grid order, and its rows {key: kind} — kind (method, β, n), or
    (method, β, n, "ppl") for a perplexity (rank 0's) — which the progress paces (a folder may hold other rows)."""
    depths = depth_grid(settings.depths)
    cells = [(t, d) for t in settings.tasks for d in (depths if TASKS[t].uses_depth else [None])]
    prompts = [(t, d, s) for t, d in cells for s in range(settings.samples)]
    mine = [p for i, p in enumerate(prompts) if ranks.mine(i)]
    share = {}
    for n in settings.lengths:
        for name, b in settings.runs():
            share |= {answer_key(name, b, t, n, d, s): (name, b, n) for t, d, s in mine}
    if settings.ppl and ranks.rank == 0:
        for n in settings.lengths:
            share |= {ppl_key(name, b, n, settings.ppl_windows): (name, b, n, "ppl") for name, b in settings.runs()}
    return mine, share


def answerer(model, tokenizer, settings: EvalSettings, hay, n: int, samples: dict, prefixes, emit):
    """``answer(run, key)``: the prompt ``key`` = (task, depth, sample) at length n (built when first asked, kept in
    ``samples``) answered greedily under ``run``'s method, its row emitted."""
    # torch: imported here, the settings are checked without it
    from attnlab.llm.eval.greedy import greedy_answer

    def answer(run: Run, key) -> None:
        t, d, s = key
        if samples[key] is None:
            depth = d if d is not None else 0.0
            samples[key] = TASKS[t].make(tokenizer, hay, n, depth, s, settings.seed, settings.format())
        smp = samples[key]
        ans = greedy_answer(model, tokenizer, run.method, smp.ids, settings.max_new or smp.max_new, prefixes=prefixes,
                            done=lambda text: string_match_all(text, smp.answers) == 1.0)
        emit(answered_row(run, n, key, smp, ans))

    return answer


def answered_row(run: Run, n: int, key, smp, ans) -> dict:
    """The results.jsonl row of the prompt ``smp`` at ``key`` = (task, depth, sample) answered ``ans`` under ``run``:
    its score, the seconds, the KV kept and read, the plan's description (``Method.plan_fields``)."""
    t, d, s = key
    return {"key": answer_key(run.name, run.budget, t, n, d, s), "kind": "answer", "method": run.name,
            "budget": run.budget, "task": t, "n": n, "depth": d, "sample": s,
            "score": string_match_all(ans.text, smp.answers), "answer": ans.text, "expected": smp.answers,
            "prompt_tokens": len(smp.ids), "prefill_s": round(ans.prefill_s, 4), "reused_tokens": ans.reused,
            "decode_s": round(ans.decode_s, 4), "new_tokens": ans.tokens, "beta": run.beta,
            "kv_tokens": ans.kv_tokens, "kv_bytes": ans.kv_bytes, "kv_read_tokens": ans.kv_read_tokens,
            "kv_store_tokens": ans.kv_store_tokens, "kv_store_bytes": ans.kv_store_bytes, **run.method.plan_fields()}


def answer_key(name: str, budget: float, task: str, n: int, depth: float | None, sample: int) -> str:
    """The key of a prompt's row in results.jsonl: method, β and the sample (``sample_key``)."""
    return f"{name}|{budget:g}|{sample_key(task, n, depth, sample)}"


def ppl_key(name: str, budget: float, n: int, windows: int) -> str:
    """The key of a perplexity row in results.jsonl."""
    return f"ppl|{name}|{budget:g}|{n}|{windows}"


class Run(NamedTuple):
    """One (method, β) at one length, prepared, with what is left to measure."""
    name: str
    budget: float
    method: object          # a prepared methods.Method
    todo: dict              # {(task, depth, sample): None}: the prompts to answer, in grid order
    ppl_key: str | None     # the perplexity row's key when it is still to measure
    beta: float             # β measured: Method.prefill_fraction(n)


def _prepared_runs(model, settings, n, samples, done, emit, calibrated: bool, calibration) -> list[Run]:
    """The (method, β) runs at length n with something left to measure whose method is ``calibrated`` or not, prepared
    (a run the method refuses: a skipped row); ``calibration(n, methods)``: the calibration (``calibrations``)."""
    runs = [(name, b, method_at(settings, name, b)) for name, b in settings.runs()]
    cal, ready = None, []
    for name, budget, method in runs:
        if method.calibrated != calibrated:
            continue
        todo = {(t, d, s): None for (t, d, s) in samples if answer_key(name, budget, t, n, d, s) not in done}
        ppl = ppl_key(name, budget, n, settings.ppl_windows)
        ppl = ppl if settings.ppl and ppl not in done else None
        if not todo and ppl is None:
            continue
        if method.calibrated and cal is None:
            cal = calibration(n, [m for _, _, m in runs])
        skip_key = f"{name}|{budget:g}|skipped|{n}"
        if skip_key in done:
            continue
        try:
            method.prepare(model, n, cal)
        except UserError as err:  # a budget below the method's cheapest plan: said in the results, the grid goes on
            emit({"key": skip_key, "kind": "skipped", "method": name, "budget": budget, "n": n, "reason": str(err)})
            continue
        ready.append(Run(name, budget, method, todo, ppl, method.prefill_fraction(n)))
    return ready


def _log_wall(out: Path, started: float, measured: int, reuse: bool) -> None:
    """One line of ``wall.jsonl`` per run of the grid: its wall-clock seconds and the rows it measured."""
    with open(out / "wall.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                            "seconds": round(time.time() - started, 3), "rows": measured, "reuse": reuse}) + "\n")


def _perplexity_row(model, run: Run, n: int, windows: list) -> dict:
    """The perplexity row of ``run`` at length n, on ``windows`` (the ``--ppl`` text's first windows of n tokens)."""
    from attnlab.llm.eval.perplexity import perplexity

    t0 = time.perf_counter()
    with run.method.applied(model):
        ppl = perplexity(model, windows)
    return {"key": run.ppl_key, "kind": "ppl", "method": run.name, "budget": run.budget, "n": n, "ppl": ppl,
            "windows": len(windows), "beta": run.beta, "seconds": round(time.perf_counter() - t0, 3)}

"""kvpress's presses as reference rows of an ``attnlab eval`` table, on the very prompts attnlab's methods got.

    # (a) attnlab's env: the run's prompts (token ids, expected strings, keys as in results.jsonl)
    PYTHONPATH=. .venv/bin/python benchmarks/kvpress_eval.py export runs/smol-noise-2k runs/smol-noise-2k/kvpress-prompts.json
    # (b) kvpress's env (``kvpress_reference.py --setup``), nothing of attnlab imported
    .venv-kvpress/bin/python benchmarks/kvpress_answers.py runs/smol-noise-2k/kvpress-prompts.json \\
        runs/smol-noise-2k/kvpress-answers.jsonl --presses snapkv,streaming-llm --compressions 0.75,0.9,0.95
    # (c) attnlab's env: score with string_match_all, append to results.jsonl, re-make table.md / summary / heatmaps
    PYTHONPATH=. .venv/bin/python benchmarks/kvpress_eval.py import runs/smol-noise-2k runs/smol-noise-2k/kvpress-answers.jsonl

The prompts are regenerated from the run's ``config.json`` by ``attnlab.llm.eval.tasks`` (same seed, haystack,
lengths, depths, samples) with the run's tokenizer, so they are the ids attnlab's methods answered.
A row of kvpress press P at compression c is ``method = kvpress-P`` (``kvpress-P-split``: the question after
compression), ``budget`` = 1 − c (the fraction of the KV kept: c = 0.9 beside attnlab's β = 0.1),
``kv_tokens`` = keys a (layer, KV head) reads after the prefill, and ``reference`` = "kvpress VERSION".
It has no ``beta``: kvpress prefills with full attention and compresses each layer's cache after it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from attnlab.atomic import write_text_atomic
from attnlab.errors import UserError
from attnlab.llm.eval.eval_grid import depth_grid, read_results
from attnlab.llm.eval.eval_settings import EvalSettings
from attnlab.llm.eval.eval_report import write_report
from attnlab.llm.eval.tasks import TASKS, Haystack, string_match_all

FORMAT = "attnlab-kvpress-prompts/1"
QUESTION_MARKS = {"vt": "\nQuestion:", "cwe": "\nQuestion:"}   # where each task's question starts (niah*: "\nWhat")


def question_at(tokenizer, task: str, ids: list[int]) -> int | None:
    """Token index where the question (+ chat closing + answer prefix) begins: the last place the ids of the
    task's question mark (tokenized alone, as ``assemble`` tokenizes the question apart) occur; None if nowhere."""
    m = tokenizer(QUESTION_MARKS.get(task, "\nWhat"), add_special_tokens=False).input_ids
    return next((i for i in range(len(ids) - len(m), -1, -1) if ids[i:i + len(m)] == m), None)


def model_dir(spec: str) -> str:
    """The HF folder (or hub name) kvpress loads for the run's model: a known model's converted folder."""
    from attnlab.llm.models.loading import fetch_model, resolve_spec

    kind, path, _ = resolve_spec(spec)
    if kind == "gguf":
        raise UserError(f"{spec}: kvpress loads HF folders, not a .gguf file")
    return str(fetch_model(path)) if kind == "known" else path


def export_prompts(run: Path, out: Path, tokenizer=None) -> dict:
    """Every answer prompt of the eval run in ``run`` (from its config.json) into ``out``; returns the JSON."""
    from attnlab.llm.eval.greedy import _stop_ids

    from attnlab.schemas import eval_config

    cfg = eval_config.load(run / "config.json").model_dump()     # the run's settings, through their schema
    s = EvalSettings(**{f.name: cfg[f.name] for f in dataclasses.fields(EvalSettings) if f.name in cfg})
    if tokenizer is None:
        from attnlab.llm.models.loading import load_causal_lm

        tokenizer = load_causal_lm(s.model)[1]
    hay = Haystack.noise(tokenizer) if s.haystack == "noise" else Haystack.file(tokenizer, s.haystack, max(s.lengths))
    prompts = []
    for n in s.lengths:
        for t in s.tasks:
            for d in (depth_grid(s.depths) if TASKS[t].uses_depth else [None]):
                for i in range(s.samples):
                    smp = TASKS[t].make(tokenizer, hay, n, d if d is not None else 0.0, i, s.seed)
                    prompts.append({"key": smp.key, "task": t, "n": n, "depth": d, "sample": i, "ids": smp.ids,
                                    "question_at": question_at(tokenizer, t, smp.ids), "expected": smp.answers,
                                    "max_new": s.max_new or smp.max_new})
    doc = {"format": FORMAT, "run": str(run), "model": s.model, "model_dir": model_dir(s.model),
           "stop_ids": sorted(_stop_ids(tokenizer)), "prompts": prompts}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, json.dumps(doc) + "\n")
    return doc


def import_answers(run: Path, answers: Path, prompts: Path) -> list[dict]:
    """Score kvpress's answers, append the rows missing from ``run/results.jsonl``, re-make the report; returns the new rows."""
    by_key = {p["key"]: p for p in json.loads(prompts.read_text(encoding="utf-8"))["prompts"]}
    rows = read_results(run / "results.jsonl")
    done = {r["key"] for r in rows}
    new = []
    for line in answers.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        a = json.loads(line)
        if a["key"] in done:
            continue
        p = by_key[a["key"].split("|", 2)[2]]
        new.append({"key": a["key"], "kind": "answer", "method": a["method"], "budget": a["budget"], "task": p["task"],
                    "n": p["n"], "depth": p["depth"], "sample": p["sample"], "score": string_match_all(a["answer"], p["expected"]),
                    "answer": a["answer"], "expected": p["expected"], "prompt_tokens": len(p["ids"]),
                    "prefill_s": a.get("prefill_s"), "decode_s": a.get("decode_s"), "new_tokens": a.get("new_tokens"),
                    "kv_tokens": a["kv_tokens"], "reference": f"kvpress {a['kvpress']}", "press": a["press"],
                    "compression": a["compression"], "question": a["question"]})
        done.add(a["key"])
    with open(run / "results.jsonl", "a", encoding="utf-8") as log:
        log.writelines(json.dumps(r) + "\n" for r in new)
    write_report(rows + new, run)
    return new


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="the run's prompts → JSON (attnlab's env)")
    e.add_argument("run", type=Path)
    e.add_argument("out", type=Path)
    i = sub.add_parser("import", help="kvpress's answers → the run's results.jsonl and report (attnlab's env)")
    i.add_argument("run", type=Path)
    i.add_argument("answers", type=Path)
    i.add_argument("--prompts", type=Path, help="the export [default: RUN/kvpress-prompts.json]")
    a = ap.parse_args(argv)
    if a.cmd == "export":
        doc = export_prompts(a.run, a.out)
        cut = sum(p["question_at"] is not None for p in doc["prompts"])
        print(f"{len(doc['prompts'])} prompts ({cut} with a clean question cut) of {a.run} → {a.out}")
    else:
        prompts = a.prompts or a.run / "kvpress-prompts.json"
        for path, what in ((prompts, "--prompts (the export)"), (a.answers, "answers")):
            if not Path(path).is_file():
                ap.exit(2, f"kvpress_eval.py import: {what}: no file {path}\n")
        new = import_answers(a.run, a.answers, prompts)
        print(f"{len(new)} kvpress rows added to {a.run / 'results.jsonl'}; table.md re-made")
        print((a.run / "table.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

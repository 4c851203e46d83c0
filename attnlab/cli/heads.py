"""``attnlab heads``: previous-token, duplicate-token, induction, sink and retrieval scores of every head."""

from __future__ import annotations

import re
import shlex
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer

from attnlab.cli.options import checked
from attnlab.errors import UserError


def _load(run_dir: str | None, hf: str | None, progress, device=None):
    """(model, tokenizer, name) of RUN_DIR or --hf (exactly one of them is given); ``progress`` says "loading …" first;
    ``device``: where an --hf model runs (``models.device``; None: the CPU)."""
    if hf is not None:
        from attnlab.llm.models.loading import load_causal_lm

        model, tokenizer = load_causal_lm(hf, progress=progress, device=device)
        return model, tokenizer, hf
    from attnlab.train.checkpoint import load_run

    progress.stage(f"loading the run {run_dir}")
    run = load_run(run_dir)
    return run.model, run.tokenizer, Path(run_dir).name


@checked("heads")
def heads_command(
    args: List[str] = typer.Argument(None, metavar="[RUN_DIR]", help="an attnlab run folder (unless --hf)"),
    hf: Optional[str] = typer.Option(None, "--hf",
                                     help="a causal LM: known name (smollm2-135m, gemma3-270m), HF folder, "
                                          ".gguf or hub name"),
    length: int = typer.Option(512, "--length", help="tokens per input (repeated random tokens and needle prompts)"),
    repeats: int = typer.Option(2, "--repeats", help="copies of the random segment in each input"),
    samples: int = typer.Option(4, "--samples", help="random inputs (the score is their mean)"),
    prompts: int = typer.Option(4, "--prompts", help="needle prompts for the retrieval score"),
    detectors: str = typer.Option("all", "--detectors",
                                  help="comma list: previous-token, duplicate-token, induction, sink, retrieval "
                                       "(or all)"),
    exclude_bos: bool = typer.Option(False, "--exclude-bos",
                                     help="leave the first key out of every row (TransformerLens exclude_bos)"),
    exclude_current: bool = typer.Option(False, "--exclude-current",
                                         help="leave the diagonal out (TransformerLens exclude_current_token)"),
    seed: int = typer.Option(0, "--seed", help="seed of the random tokens and needle values"),
    top: int = typer.Option(5, "--top", help="also print the top K heads of each detector"),
    block_rows: Optional[int] = typer.Option(None, "--block-rows",
                                             help="query rows per block (default: ~64 MB of weights)"),
    out: Optional[Path] = typer.Option(None, "--out",
                                       help="output folder (default ./heads-MODEL): heads.json, summary.md"),
    force: bool = typer.Option(False, "--force", help="replace an earlier heads folder in --out"),
    device: str = typer.Option("cpu", "--device",
                               help="with --hf: cpu (float32), cuda (bfloat16) or auto (cuda when one is visible)"),
    quiet: bool = typer.Option(False, "--quiet",
                               help="no progress (bars in a terminal, a line per stage otherwise); errors still said"),
) -> None:
    """Score every head as a previous-token, duplicate-token, induction, sink and retrieval head; print the table,
    write heads.json.

    For smollm2-135m and gemma3-270m attnlab ships this file (made by benchmarks/recipes/shipped-heads.sh), which
    `attnlab attention --hf MODEL --file TEXT` draws without --heads.
    """
    from attnlab.analysis.detector_names import parse_detectors  # torch-free: --detectors checked before torch loads
    from attnlab.outputs import claim_folder, write_folder

    names = parse_detectors(detectors)
    args = list(args or [])
    if len(args) > 1:
        raise UserError(f"unexpected argument {args[1]!r}: give one RUN_DIR")
    run_dir = args[0] if args else None
    if (run_dir is None) == (hf is None):
        raise UserError("give RUN_DIR or --hf MODEL (one of them)")
    name = hf or Path(run_dir).name
    from attnlab.llm.models.device import check_device

    dev = check_device(device)     # cuda without CUDA: one line, before anything is written (torch: cuda, auto)
    if out is None:
        out = Path("heads-" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(name).name) or "model"))
    claim = claim_folder(out, kind="heads", inputs=[("RUN_DIR", run_dir), ("--hf", hf)], force=force)
    if hf is not None:   # an unknown model, a --length beyond its context: one line before it loads
        from attnlab.llm.models.loading import check_length

        check_length(hf, length, "--length")

    from attnlab.llm.heads.head_scan import context_of, detector_scores, retrieval_scan
    from attnlab.llm.heads.heads_report import heads_document, write_heads
    from attnlab.llm.heads.needle_prompts import needle_prompts
    from attnlab.progress import Progress

    progress = Progress.for_command(quiet)
    model, tokenizer, name = _load(run_dir, hf, progress, dev if hf is not None else None)
    top_n = context_of(model)
    if top_n is not None and length > top_n:
        raise UserError(f"--length must be at most the model's context of {top_n} tokens, got {length}")
    if "retrieval" in names and not (hf or _is_lm(model)):
        raise UserError("--detectors: retrieval needs a language model (RUN_DIR is a translation run)")
    # a too short --length fails here
    needles = needle_prompts(tokenizer, length, prompts, seed=seed) if "retrieval" in names else None
    start = time.perf_counter()
    res = detector_scores(model, tokenizer, length, detectors=names, repeats=repeats, samples=samples, seed=seed,
                          exclude_bos=exclude_bos, exclude_current=exclude_current, block_rows=block_rows,
                          progress=progress)
    scores, meta = dict(res.scores), dict(res.meta)
    if "retrieval" in names:
        per_prompt, copied = retrieval_scan(model, tokenizer, needles, block_rows=block_rows, progress=progress)
        scores["retrieval"] = per_prompt.mean(0)
        meta.update(prompts=prompts, copy_accuracy=round(float(copied.mean()), 4),
                    copy_accuracy_per_prompt=copied.round(4).tolist())
    scores = {d: scores[d] for d in names}
    meta.update(seconds=round(time.perf_counter() - start, 1), command="attnlab " + shlex.join(sys.argv[1:]))
    doc = heads_document(name, length, scores, res.thresholds, meta)
    _table(doc, top)
    progress.stage(f"writing {out}")
    for p in write_folder(claim, lambda: write_heads(doc, out)):
        typer.echo(str(p))


def register(app: typer.Typer) -> None:
    app.command("heads")(heads_command)


def _is_lm(model) -> bool:
    from attnlab.nn.lm import DecoderLM

    return isinstance(model, DecoderLM)


def _table(doc: dict, top: int) -> None:
    """Rich table: every head named by a detector or among the top ``top`` of one, with all its scores."""
    import numpy as np
    from rich.console import Console
    from rich.table import Table

    from attnlab.llm.heads.heads_report import top_heads

    names = list(doc["detectors"])
    s = {d: np.asarray(v) for d, v in doc["detectors"].items()}
    named = {(h["layer"], h["head"]): [] for h in doc["named"]}
    for h in doc["named"]:
        named[(h["layer"], h["head"])].append(h["detector"])
    rows = set(named)
    for d in names:
        rows |= {(l, h) for l, h, _ in top_heads(s[d], top)}
    th = ", ".join(f"{d} {doc['thresholds'][d]}" for d in names)
    t = Table(title=f"{doc['model']}: {len(doc['named'])} named heads at n = {doc['n']} (thresholds {th})")
    for c in ["layer", "head", *names, "named"]:
        t.add_column(c.replace("-", "-\n"), justify="left" if c == "named" else "right")
    for l, h in sorted(rows):
        t.add_row(str(l), str(h), *(f"{s[d][l, h]:.3f}" for d in names), ", ".join(named.get((l, h), [])))
    Console().print(t)

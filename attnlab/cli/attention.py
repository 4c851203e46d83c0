"""``attnlab attention`` and ``attnlab roles``: capture, draw and classify attention heads."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import List, Optional

import typer

from attnlab.cli.options import checked
from attnlab.errors import UserError


def _source(args: list[str], hf: str | None) -> tuple[str | None, list[str]]:
    """Split the positional arguments into (RUN_DIR or None, rest)."""
    if hf:
        return None, args
    if not args:
        raise UserError("give a RUN_DIR or --hf MODEL")
    return args[0], args[1:]


def _capture(run_dir: str | None, hf, sentences: list[str], targets, truncate: bool):
    from attnlab.llm.heads.hf_capture import capture_hf
    from attnlab.workflows import capture_run

    if run_dir is not None:
        return capture_run(run_dir, sentences, targets, truncate=truncate)
    return capture_hf(hf, sentences, targets, truncate=truncate)


def _check_long_source(run_dir: str | None, hf: str | None) -> None:
    """--file streams exactly one model: an attnlab LM RUN_DIR or --hf MODEL."""
    if run_dir is not None and hf is not None:
        raise UserError("give RUN_DIR or --hf MODEL, not both")
    if run_dir is None and hf is None:
        raise UserError("--file needs a language-model RUN_DIR or --hf MODEL (a known name, a HF folder, "
                        "a hub name or a .gguf file)")


def long_source(run_dir: str | None, hf: str | None):
    """What --file streams: the attnlab LM run of RUN_DIR (``load_run``), else the --hf spec."""
    _check_long_source(run_dir, hf)
    if hf is not None:
        return hf
    from attnlab.train.checkpoint import load_run

    return load_run(run_dir)


def _long(hf: str | None, file: Path, tokens, block_rows, layers, rows=None, pool=None, memory_gib=None,
          run_dir: str | None = None, progress=None, device=None):
    """The streamed statistics of RUN_DIR (an attnlab LM) or --hf on --file
    (``attnlab.llm.heads.long_capture.capture_long``); ``progress`` (``attnlab.progress``): the loading, then the blocks
    of rows with the time left."""
    from attnlab.llm.heads.long_capture import capture_long, parse_layers, parse_rows
    from attnlab.llm.models.text_windows import read_text
    from attnlab.progress import SILENT

    _check_long_source(run_dir, hf)
    layers = parse_layers(layers)  # options first: nothing is loaded for a typo
    rows = rows if rows == "auto" else parse_rows(rows)
    check_tokens(hf, tokens)
    text = read_text(file)
    limit = None if memory_gib is None else int(memory_gib * 2**30)
    progress = progress or SILENT
    if hf is None:
        progress.stage(f"loading the run {run_dir}")
    source, tokenizer = long_source(run_dir, hf), None
    if hf is not None and device not in (None, "cpu"):   # --device cuda: the model loaded there first
        from attnlab.llm.models.loading import load_causal_lm

        source, tokenizer = load_causal_lm(hf, progress=progress, device=device)
    res = capture_long(source, text, tokenizer=tokenizer, name=hf if tokenizer is not None else None, max_tokens=tokens,
                       block_rows=block_rows, layers=layers, rows=rows, pool=pool, memory_limit=limit, truncate=True,
                       progress=progress)
    if "truncated_from" in res.meta:  # no --tokens: the first context-length tokens of a longer file
        typer.echo(f"attnlab: note: {file} has {res.meta['truncated_from']} tokens, more than the model's context; "
                   f"reading its first {res.n} (choose with --tokens)", err=True)
    return res


def check_file_only(file, **values) -> None:
    """Options read only with --file (``--tokens``, ``--layers`` ...) are refused without it, not ignored."""
    given = [name for name, value in values.items() if value is not None]
    if file is None and given:
        flag = "--memory-limit" if given[0] == "memory_gib" else "--" + given[0].replace("_", "-")
        raise UserError(f"{flag} applies with --file TEXT (a long text); leave it out or give --file")


def check_tokens(hf: str | None, tokens: int | None) -> None:
    """--tokens against the context of --hf, from its configuration (before any weight or text is read)."""
    if hf is not None and tokens is not None:
        from attnlab.llm.models.loading import check_length

        check_length(hf, tokens, "--tokens")


def _one_run(args: list[str] | None, option: str = "--file") -> str | None:
    """RUN_DIR of ``--file`` (at most one positional argument)."""
    args = list(args or [])
    if len(args) > 1:
        raise UserError(f"{option} reads the text from the file: give one RUN_DIR and no sentence (got {args[1]!r})")
    return args[0] if args else None


def _long_summary(res) -> None:
    from attnlab.llm.heads.report import summary

    s = summary(res)
    typer.echo(f"{s['model']}: {s['tokens']} tokens, {s['layers']} layers x {s['heads']} heads in {s['seconds']} s "
               f"(CPU {s['cpu_seconds']} s); "
               f"peak memory {s['peak']} (estimated {s['estimate']}, block {s['block_rows']} rows)", err=True)


def _is_long(path: Path) -> bool:
    from attnlab.llm.heads.long_capture import LongAttention

    return LongAttention.is_file(path)


def _plan_file(path: Path | None, tokens: int | None):
    """The --plan file, loaded before anything runs (its length checked against --tokens when both are known)."""
    if path is None:
        return None
    from attnlab.llm.methods import is_registered
    from attnlab.llm.plans.plan import Plan
    from attnlab.option_paths import input_file

    plan = Plan.load(input_file("--plan", path), "--plan", is_registered)   # missing, a folder, a FIFO: one line
    if tokens is not None and plan.n and plan.n != tokens:
        raise UserError(f"--plan {path}: made for {plan.n} tokens; this input has --tokens {tokens}")
    return plan


def _overlays(res, heads: Path | None, plan, source: str | None = None):
    """(detector scores, plan) checked against the capture ``res``
    (one-line UserError when made for another model or length); ``source`` names the heads file (default its path)."""
    from attnlab.llm.heads.heads_file import read_detector_scores
    from attnlab.viz.long_explorer import check_plan, model_layers

    detectors = None if heads is None else read_detector_scores(heads, model_layers(res), int(res.profile.shape[1]),
                                                                source=source)
    return detectors, None if plan is None else check_plan(plan, res)


def _shipped_detectors(model: str | None) -> tuple[Path | None, str | None]:
    """(path, name) of the head detectors attnlab ships for the known ``model`` (``shipped_heads``), said on stderr;
    (None, None) for any other model.  Read only when --heads is not given: the user's file wins."""
    from attnlab.llm.heads.shipped_heads import shipped

    path = None if model is None else shipped(model)
    if path is None:
        return None, None
    typer.echo(f"attnlab: heads: the detectors attnlab ships for {model} ({path.name}); --heads FILE gives others",
               err=True)
    return path, f"{path.name} (shipped with attnlab)"


FILE_HELP = "a long text file (.txt or .txt.gz): streamed statistics of RUN_DIR (an LM run) or --hf in bounded memory"


@checked("attention")
def attention_command(
    args: List[str] = typer.Argument(None, metavar="[RUN_DIR] SENTENCE...",
                                     help="a run folder (unless --hf) then one or more sentences"),
    hf: Optional[str] = typer.Option(None, "--hf", help="a Hugging Face model: hub name or local folder"),
    target: Optional[List[str]] = typer.Option(None, "--target",
                                               help="target sentence(s) for the decoder (default: greedy translation)"),
    out: Optional[Path] = typer.Option(None, "--out",
                                       help="output folder (default RUN_DIR/attention or ./attention-MODEL)"),
    truncate: bool = typer.Option(False, "--truncate",
                                  help="truncate sentences longer than the model maximum (default: error)"),
    maps_file: Optional[Path] = typer.Option(None, "--maps", help="draw a saved attention file instead of capturing"),
    force: bool = typer.Option(False, "--force", help="replace the earlier attention output in --out"),
    file: Optional[Path] = typer.Option(None, "--file", help=FILE_HELP),
    tokens: Optional[int] = typer.Option(None, "--tokens",
                                         help="with --file: keep the first N tokens (default: the whole file, "
                                              "at most the model's context)"),
    block_rows: Optional[int] = typer.Option(None, "--block-rows",
                                             help="with --file: query rows per block (default: ~64 MB of weights)"),
    layers: Optional[str] = typer.Option(None, "--layers",
                                         help="with --file: layers to analyse, e.g. 0-3 or 0,5 (default all)"),
    rows: Optional[str] = typer.Option(None, "--rows",
                                       help="with --file: keep the exact maps of rows a:b (keys a:b), e.g. 4096:4352"),
    pool: Optional[int] = typer.Option(None, "--pool",
                                       help="with --file: pooled overview, tokens per group (default: n/256)"),
    memory_gib: Optional[float] = typer.Option(None, "--memory-limit",
                                               help="with --file: refuse a run estimated above this many GiB (default: "
                                                    "memory available)"),
    heads_json: Optional[Path] = typer.Option(None, "--heads",
                                              help="with --file or a long --maps: the head detectors' heads.json, "
                                                   "drawn in the explorer's grid (default for smollm2-135m and "
                                                   "gemma3-270m: the file attnlab ships)"),
    plan_json: Optional[Path] = typer.Option(None, "--plan",
                                             help="with --file or a long --maps: a plan of `attnlab plan` for this "
                                                  "model and length, drawn on the maps"),
    device: str = typer.Option("cpu", "--device",
                               help="with --hf --file: cpu (float32), cuda (bfloat16) or auto "
                                    "(cuda when one is visible)"),
    quiet: bool = typer.Option(False, "--quiet",
                               help="no progress (bars in a terminal, a line per stage otherwise); errors still said"),
) -> None:
    """Capture the attention of every layer and head on SENTENCE; write the maps file, PNG grids and the HTML explorer.

    With --hf MODEL --file TEXT: stream every head's statistics (band profile, key columns, structured fit,
    roles) over the long text without holding any n x n matrix; write them, a pooled overview and an optional
    exact window to --out, with OUT/explorer.html (heads grid, pooled overview that zooms into exact tiles).
    With --maps OUT/long-attention.safetensors: write that folder again from the saved capture (with --heads, --plan).
    """
    if hf is not None:   # an unknown model: one line before torch and transformers are imported, no download tried
        from attnlab.llm.models.loading import resolve_spec

        if file is not None:   # the sources contradict each other: said before the model name is looked up
            _check_long_source(_one_run(args), hf)
        resolve_spec(hf)
    from attnlab.analysis.attention_maps import AttentionMaps
    from attnlab.llm.models.device import check_device
    from attnlab.outputs import claim_folder, write_folder
    from attnlab.viz.export import write_attention

    dev = check_device(device)                        # cuda without CUDA: one line, before anything is read or written
    if maps_file is not None:
        from attnlab.option_paths import input_file

        input_file("--maps", maps_file)               # missing, a folder, a FIFO or device: one line, never opened
    if maps_file is None or not _is_long(maps_file):  # a saved capture refuses these options with its own line (below)
        check_file_only(file, tokens=tokens, block_rows=block_rows, layers=layers, rows=rows, pool=pool,
                        memory_gib=memory_gib)
    if dev != "cpu" and (file is None or hf is None):
        raise UserError(f"--device {device}: the attention maps of sentences and of a RUN_DIR are captured on the CPU; "
                        f"--device applies to --hf MODEL --file TEXT")
    if file is not None:
        run_dir = _one_run(args)
        _check_long_source(run_dir, hf)
        from attnlab.llm.eval.eval_inputs import check_input_file

        check_input_file("--file", file)              # missing, a folder, empty, binary:
                                                      # one line before the model loads

        if out is None:
            out = Path(run_dir) / "attention-long" if run_dir else Path(
                "attention-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(hf or "model").name or "model"))
        claim = claim_folder(out, kind="attention",
                             inputs=[("--file", file), ("RUN_DIR", run_dir), ("--hf", hf), ("--heads", heads_json),
                                     ("--plan", plan_json)], force=force)
        the_plan = _plan_file(plan_json, tokens)
        heads_source = None
        if heads_json is not None:
            check_input_file("--heads", heads_json)
            from attnlab.schemas import heads_file

            heads_file.load(heads_json, "--heads", detectors=True)   # its schema, before the model loads
        else:                                                        # a known --hf model: the detectors shipped
            heads_json, heads_source = _shipped_detectors(hf)
        from attnlab.progress import Progress

        progress = Progress.for_command(quiet)
        res = _long(hf, file, tokens, block_rows, layers, rows or "auto", "auto" if pool is None else pool, memory_gib,
                    run_dir=run_dir, progress=progress, device=dev)
        detectors, the_plan = _overlays(res, heads_json, the_plan, heads_source)  # before the summary: one line
        _long_summary(res)
        progress.stage(f"writing {out}: the capture, summary, pictures and explorer.html")
        from attnlab.llm.heads.report import write_long_attention

        for p in write_folder(claim, lambda: write_long_attention(res, out, detectors=detectors, plan=the_plan)):
            typer.echo(str(p))
        return
    if (heads_json is not None or plan_json is not None) and not (maps_file is not None and _is_long(maps_file)):
        raise UserError("--heads and --plan draw on a long input's explorer: give --file TEXT "
                        "(or --maps OUT/long-attention.safetensors)")

    if maps_file is not None and _is_long(maps_file):
        if args or hf or rows or tokens is not None:
            raise UserError("--maps draws a saved capture: give no RUN_DIR, --hf, sentence, --tokens or --rows "
                            "(rows are kept at capture time)")
        if out is None:
            raise UserError("--maps needs --out DIR")
        from attnlab.llm.heads.heads_file import detector_scores_beside
        from attnlab.llm.heads.long_capture import LongAttention
        from attnlab.llm.heads.report import write_long_attention

        claim = claim_folder(out, kind="attention",
                             inputs=[("--maps", maps_file), ("--heads", heads_json), ("--plan", plan_json)],
                             force=force)
        the_plan = _plan_file(plan_json, None)
        res = LongAttention.load(maps_file)
        detectors, the_plan = _overlays(res, heads_json, the_plan)
        if detectors is None:
            from attnlab.viz.long_explorer import model_layers

            detectors = detector_scores_beside(maps_file, model_layers(res), int(res.profile.shape[1]))
        if detectors is None:   # a capture of a known model: the detectors attnlab ships for it
            path, source = _shipped_detectors(res.name)
            detectors, _ = _overlays(res, path, None, source)
        for p in write_folder(claim, lambda: write_long_attention(res, out, detectors=detectors, plan=the_plan)):
            typer.echo(str(p))
        return

    if maps_file is not None:
        if args or hf:
            raise UserError("--maps draws a saved file: give no RUN_DIR, --hf or sentence")
        if out is None:
            raise UserError("--maps needs --out DIR")
        claim = claim_folder(out, kind="attention", inputs=[("--maps", maps_file)], force=force)
        maps = AttentionMaps.load(maps_file)
    else:
        run_dir, sentences = _source(list(args or []), hf)
        if not sentences:
            raise UserError("give at least one sentence")
        if out is None:
            out = Path(run_dir) / "attention" if run_dir else Path(
                "attention-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(hf).name or "model"))
        claim = claim_folder(out, kind="attention", inputs=[("RUN_DIR", run_dir), ("--hf", hf)], force=force)
        maps = _capture(run_dir, hf, sentences, target or None, truncate)
    for p in write_folder(claim, lambda: write_attention(maps, out)):
        typer.echo(str(p))


@checked("roles")
def roles_command(
    args: List[str] = typer.Argument(None, metavar="[RUN_DIR]", help="a run folder (unless --hf)"),
    hf: Optional[str] = typer.Option(None, "--hf", help="a Hugging Face model: hub name or local folder"),
    data: Optional[str] = typer.Option(None, "--data",
                                       help="corpus spec (synthetic, a TSV file, Moses pair, hf:NAME:CONFIG)"),
    maps: Optional[Path] = typer.Option(None, "--maps", help="a saved attention file (instead of a model and --data)"),
    conllu: Optional[Path] = typer.Option(None, "--conllu",
                                          help="a CoNLL-U file: its sentences and gold dependencies "
                                               "(instead of --data)"),
    split: str = typer.Option("dev", "--split", help="split of --data to classify on"),
    limit: int = typer.Option(200, "--limit", help="number of sentences"),
    kind: Optional[List[str]] = typer.Option(None, "--kind", help="encoder, decoder and/or cross (default: all)"),
    as_json: bool = typer.Option(False, "--json", help="print a JSON list instead of a table"),
    truncate: bool = typer.Option(False, "--truncate", help="truncate sentences longer than the model maximum"),
    file: Optional[Path] = typer.Option(None, "--file", help=FILE_HELP),
    tokens: Optional[int] = typer.Option(None, "--tokens", help="with --file: keep the first N tokens"),
    block_rows: Optional[int] = typer.Option(None, "--block-rows", help="with --file: query rows per block"),
    layers: Optional[str] = typer.Option(None, "--layers", help="with --file: layers to analyse, e.g. 0-3"),
    memory_gib: Optional[float] = typer.Option(None, "--memory-limit",
                                               help="with --file: refuse a run estimated above this many GiB"),
) -> None:
    """Scores and role of every head over --limit sentences of --data (or --conllu), or over one long --file."""
    if hf is not None:   # an unknown model: one line before torch and transformers are imported, no download tried
        from attnlab.llm.models.loading import resolve_spec

        if file is not None:   # the sources contradict each other: said before the model name is looked up
            _check_long_source(_one_run(args), hf)
        resolve_spec(hf)
    from attnlab.workflows import classify_heads

    check_file_only(file, tokens=tokens, block_rows=block_rows, layers=layers, memory_gib=memory_gib)
    if file is not None:
        if data or maps or conllu:
            raise UserError("--file reads one long text: give no --data, --maps or --conllu")
        res = _long(hf, file, tokens, block_rows, layers, memory_gib=memory_gib, run_dir=_one_run(args))
        _long_summary(res)
        if as_json:
            typer.echo(json.dumps([r.to_dict() for r in res.roles], indent=1))
        else:
            _table(res.roles)
        return

    run_dir, rest = (None, list(args or [])) if maps else _source(list(args or []), hf)
    if rest:
        raise UserError(f"unexpected argument {rest[0]!r}")
    result = classify_heads(run_dir=run_dir, hf=hf, data=data, maps_file=maps, conllu=conllu, split=split, limit=limit,
                            kinds=kind, truncate=truncate)
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in result], indent=1))
        return
    _table(result)


def register(app: typer.Typer) -> None:
    app.command("attention")(attention_command)
    app.command("roles")(roles_command)


def _table(result) -> None:
    from rich.console import Console
    from rich.table import Table

    syn = any(r.syntactic is not None for r in result)
    t = Table(title=f"{len(result)} heads")
    for c in ["kind", "layer", "head", "role", "conf", "pos (off)", "rare", "rare2", "sink (token)",
              "entropy"] + (["syntactic (base, rel)"] if syn else []):
        t.add_column(c, justify="left" if c in ("kind", "role") else "right")
    for r in result:
        row = [r.kind, str(r.layer), str(r.head), r.role, f"{r.confidence:.2f}", f"{r.positional:.2f} ({r.offset:+d})",
               f"{r.rare_token:.2f}", f"{r.rare_token_2:.2f}", f"{r.sink:.2f} ({r.sink_token})", f"{r.entropy:.2f}"]
        if syn:
            row.append("" if r.syntactic is None else f"{r.syntactic:.2f} ({r.syntactic_baseline:.2f}, "
                                                      f"{r.syntactic_relation})")
        t.add_row(*row)
    Console().print(t)

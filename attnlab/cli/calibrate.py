"""``attnlab calibrate``: the compact calibration archive of a model at one length, as attnlab ships them.

    attnlab calibrate --hf smollm2-135m --n 2048 [--text train.txt.gz] [--windows 2] [--calibrate-mix niah:2]
                      [--method attnlab,minference] [--budget 0.1] [--full FULL.npz] --out FILE.safetensors

The full statistics are measured as ``attnlab eval --calibrate TEXT`` measures them (``calibration.build``), for the
methods in the order given — each adds what it lacks, as successive evals in one folder do — and kept in ``--full``
when given (measured there once, read again by a later run).  The archive (``calibration.proof.write_compact``)
keeps the tables those methods read, at the smallest precision whose plans equal the full calibration's; ``attnlab
eval`` without ``--calibrate`` reads the shipped archive of its model and length (``attnlab/calibrations/``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from attnlab.cli.options import checked

DEFAULT_TEXT = Path("../shared/data/shakespeare/train.txt.gz")   # eval's calibration text in the recipes


@checked("calibrate")
def calibrate_command(
    hf: str = typer.Option(..., "--hf",
                           help="model: a HF folder, a .gguf file or a known name (smollm2-135m, gemma3-270m)"),
    n: int = typer.Option(..., "--n", help="the length in tokens the calibration is for (eval's --lengths)"),
    text: Path = typer.Option(DEFAULT_TEXT, "--text", help="calibration text, plain or .gz (never an eval's haystack)"),
    windows: int = typer.Option(2, "--windows", help="calibration windows of n tokens (eval's --calibrate-windows)"),
    calibrate_mix: Optional[str] = typer.Option(
        None, "--calibrate-mix", help="synthetic retrieval prompts added, a comma list of task:count (as eval's)"),
    method: str = typer.Option(
        "attnlab,minference", "--method",
        help="comma list of the calibrated methods the archive serves, in the order their measurements are added"),
    budget: str = typer.Option(
        "0.1", "--budget",
        help="comma list of budgets β the methods are measured at (MInference's pattern search is per β); "
             "plans are proved identical at these and 0.05,0.1,0.2,0.3,0.5"),
    full: Optional[Path] = typer.Option(
        None, "--full", help="keep the full statistics here (.npz; read again when it exists, the missing measured)"),
    out: Path = typer.Option(..., "--out", help="the archive to write (.safetensors)"),
    force: bool = typer.Option(False, "--force", help="replace an existing archive"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress (bars in a terminal, a line per stage otherwise)"),
) -> None:
    """Measure what the calibrated methods need at one length and write it as a compact archive."""
    from attnlab.errors import UserError
    from attnlab.llm.calibration.build import method_of
    from attnlab.llm.eval.eval_inputs import check_input_file
    from attnlab.llm.eval.eval_settings import check_lengths, parse_budgets, parse_methods
    from attnlab.llm.models.loading import check_length, resolve_spec
    from attnlab.outputs import claim_file

    check_lengths([n])
    specs, budgets = parse_methods(method), parse_budgets(budget)
    plain = [s for s in specs if not method_of(s, 1.0).calibrated]
    if plain or not specs:
        raise UserError(f"--method: {plain[0] if plain else method!r} needs no calibration (give calibrated methods, "
                        "e.g. attnlab,minference)")
    from attnlab.llm.calibration.mix import parse_mix

    mix = parse_mix(calibrate_mix)                          # once, here: an unknown task, a count < 1: one line
    if out.suffix != ".safetensors":
        raise UserError(f"--out {out}: a calibration archive is a .safetensors file")
    if full is not None and full.suffix != ".npz":
        raise UserError(f"--full {full}: the full statistics are a .npz file")
    resolve_spec(hf)
    check_input_file("--text", text)
    check_length(hf, n, "--n")
    claim_file(out, kind="calibration", inputs=[("--text", text), ("--full", full)], force=force)
    if full is not None and not full.exists():
        claim_file(full, kind="calibration", inputs=[("--text", text)], option="--full")
    _run(hf, n, text, windows, calibrate_mix, mix, specs, budgets, full, out, quiet)


def _run(hf, n, text, windows, mix_text, mix, specs, budgets, full, out, quiet):
    import time

    from attnlab.llm.calibration.build import build_calibration, calibration_file, method_of
    from attnlab.llm.calibration.proof import write_compact
    from attnlab.llm.models.loading import load_causal_lm
    from attnlab.progress import Progress, duration

    progress = Progress.for_command(quiet)
    t0 = time.time()
    model, tokenizer = load_causal_lm(hf, progress=progress, device="cpu")
    cal = None
    for spec in specs:   # in the order given: each adds what it lacks (as successive evals in one folder)
        need = [method_of(spec, b) for b in budgets]
        if full is not None:
            cal = calibration_file(model, tokenizer, need, n, full, text, windows, mix, progress)
        else:
            cal, _ = build_calibration(model, tokenizer, need, n, text, windows, mix, cal, progress)
    measured = time.time() - t0
    progress.stage(f"calibrate: the tables {', '.join(specs)} read, proved on their plans at each budget")
    meta = {"model": hf, "text": text.name, "text_windows": windows, "mix": mix_text, "methods": specs}
    out.parent.mkdir(parents=True, exist_ok=True)
    done = write_compact(out, cal, model, meta, budgets)
    proved = {}
    for spec, b in done["proved"]:
        proved.setdefault(spec, []).append(f"{b:g}")
    typer.echo(f"{out}: {done['bytes'] / 2**20:.2f} MiB, tables {', '.join(done['tables'])} (per-option tables "
               f"{done['dtype']}); plans identical to the full calibration's: "
               + "; ".join(f"{spec} at β = {', '.join(bs)}" for spec, bs in proved.items())
               + f"; {duration(measured)} measuring, {duration(time.time() - t0)} in all")


@checked("calibrations")
def calibrations_command(
    files: Optional[list[Path]] = typer.Argument(None, help="archives to read (default: the ones attnlab ships)"),
) -> None:
    """The calibration archives attnlab ships (or the files given): model, length, text, tables, size, proved plans."""
    from attnlab.llm.calibration.shipped import catalogue
    from attnlab.llm.methods import is_registered
    from attnlab.schemas.calibration import load

    paths = list(files) if files else [p for _, _, p in catalogue()]
    for path in paths:
        a = load(path, None, is_registered)   # a broken file: one line naming it, the field and the rule
        h = a.header
        kinds = sorted({str(t.dtype) for t in a.tables.values()})
        proved = {}
        for p in h.proved:
            proved.setdefault(p.method, []).append(f"{p.budget:g}")
        windows = f"{h.text_windows} window" + ("s" if h.text_windows != 1 else "")
        typer.echo(f"{path}: {h.model} at n = {h.n}, {windows} of {h.text}"
                   + (f" + {h.mix}" if h.mix else "") + f"; {path.stat().st_size / 2**20:.2f} MiB, tables "
                   + ", ".join(sorted(a.tables)) + f" ({', '.join(kinds)}); plans proved identical to the full "
                   "calibration's: " + "; ".join(f"{m} at β = {', '.join(bs)}" for m, bs in proved.items()))
    if not paths:
        typer.echo("no calibration archive shipped")


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_command)
    app.command("calibrations")(calibrations_command)

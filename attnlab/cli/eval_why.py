"""``attnlab eval-why``: why a method lost the prompts full attention answered, measured on an eval run folder.

    attnlab eval-why --out runs/passkey-2k-filler-test --method attnlab-retrieval [--top 5] \\
        [--row value|first|parted] [--calibration FILE] [--layers] [--heads K]

For each such prompt: the heads that read the needle's value under full attention (their attention mass from the row
that predicts the answer's first value token), each head's role in the method's plan and whether the method let it read
the value's keys at that step (``attnlab.llm.eval.lost_prompts``).  Writes ``OUT/lost-prompts.jsonl`` (this method's
rows replaced) and prints one line per prompt.  ``--layers``: each layer of the method's plan restored to full
attention, one at a time, and the share of the answer token's log-probability gap it closes
(``attnlab.llm.eval.lost_layers``); ``--heads K``: then each planned head of the K layers that close most of it, one
at a time.  As ``eval``: every input checked before the model loads (``--calibration`` read as a calibration), and
the folder's lock taken (``attnlab.lock``): a folder a running ``eval`` holds is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from attnlab.cli.options import checked


@checked("eval-why")
def eval_why_command(
    out: Path = typer.Option(..., "--out", help="an attnlab eval run folder (config.json, results.jsonl, "
                             "calibration-N.npz)"),
    method: str = typer.Option(..., "--method", help="a method of the folder's results, as its rows name it (e.g. "
                               "attnlab-retrieval)"),
    top: int = typer.Option(5, "--top", help="heads shown per prompt: those of largest attention mass on the value "
                            "under full attention"),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="the calibration the method ran on "
                                               "(default: the folder's calibration-N.npz)"),
    row: str = typer.Option("value", "--row", help="the row measured: value (the one that predicts the value's "
                            "first token), first (the prompt's last row, that predicts the answer's first token) or "
                            "parted (the step where the method's answer leaves the value, the value's tokens before it "
                            "forced)"),
    layers: bool = typer.Option(False, "--layers", help="also restore each layer of the method's plan to full "
                                "attention, one at a time, and say which close the gap in the answer token's "
                                "log-probability (one run of the method per layer and prompt)"),
    heads: int = typer.Option(0, "--heads", help="with the layers (implies --layers): also restore each planned "
                              "head of the K layers that close most of the gap, one at a time (one run per head)"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress (bars in a terminal, a line per stage "
                                "otherwise); errors still said"),
) -> None:
    """For each prompt full attention answered and METHOD lost: which heads read the needle, which keys METHOD kept."""
    from attnlab.llm.eval.lost_prompts import FILE, calibration_path, explain, lost_pairs, method_of, read_folder
    from attnlab.progress import Progress

    settings, rows = read_folder(out, method)                              # no folder, no such method, no full rows
    if calibration is not None:
        check_calibration(calibration, method_of(settings, method, 1.0))   # missing, a folder, a FIFO, not one
    pairs = lost_pairs(rows, method)
    for n in sorted({int(lost["n"]) for _, lost in pairs}):
        calibration_path(out, method, n, calibration)                      # a calibrated method without its calibration
    layers = layers or heads > 0
    if layers and pairs:
        from attnlab.llm.eval.lost_layers import check_restorable

        check_restorable(method_of(settings, method, float(pairs[0][1]["budget"])))   # MInference, SnapKV, …
    from attnlab.lock import FolderLock

    progress = Progress.for_command(quiet)
    with FolderLock(out):                                                  # a running eval holds it: refused at once
        model = tokenizer = None
        if pairs:
            from attnlab.llm.models.loading import load_causal_lm

            model, tokenizer = load_causal_lm(settings.model, progress=progress)
        done = explain(model, tokenizer, out, method, top=top, calibration=calibration, row=row, layers=layers,
                       heads=heads, progress=progress)
    for row in done:
        typer.echo(row["summary"])
    typer.echo(f"{out / FILE}: {len(done)} prompts full attention answered and {method} lost")


def check_calibration(path: Path, method) -> None:
    """``--calibration``: a regular file that reads as a calibration (``Calibration.load``), for a method that runs on
    one; one UserError line naming the option otherwise, before any model loads or anything is written."""
    import zipfile

    from attnlab.errors import UserError
    from attnlab.option_paths import input_file

    input_file("--calibration", path, "calibration file")
    if not method.calibrated:
        raise UserError(f"--calibration {path}: {method.name} runs without a calibration (leave --calibration out)")
    from attnlab.llm.calibration.archive import load_calibration
    from attnlab.llm.methods import is_registered

    try:
        load_calibration(path, "--calibration", is_registered)
    except UserError as err:
        said = str(err)
        raise UserError(said if said.startswith("--calibration") else f"--calibration {path}: {said}") from None
    except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise UserError(f"--calibration {path}: not a calibration of attnlab ({type(err).__name__}: "
                        f"{' '.join(str(err).split())[:120]})") from None


def register(app: typer.Typer) -> None:
    app.command("eval-why")(eval_why_command)

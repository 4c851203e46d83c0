"""``attnlab experiment``: the whole thesis experiment and its report, one command."""

from __future__ import annotations

from pathlib import Path

import typer

from attnlab.cli.options import checked


@checked("experiment")
def experiment_command(
    data: str = typer.Option("synthetic", "--data",
                             help="corpus spec: synthetic (default), a TSV/Moses path, hf:opus_books:en-it"),
    out: Path = typer.Option(Path("runs/experiment"), "--out",
                             help="the run folder (report.html, report.md, results.json, ...)"),
    quick: bool = typer.Option(False, "--quick", help="tiny models and few sentences: every stage in about 2 minutes"),
    resume: bool = typer.Option(False, "--resume", help="continue an interrupted run: finished stages are skipped"),
    force: bool = typer.Option(False, "--force", help="replace an existing experiment run folder"),
    deep: bool = typer.Option(False, "--deep", help="also train a 2-layer, 8-head model"),
) -> None:
    """Train the thesis's 1-head and 8-head translation models, look at every head, fit it, and write the report."""
    from attnlab.experiment import run_experiment

    results = run_experiment(data, out, quick=quick, resume=resume, force=force, deep=deep, show_progress=True)
    typer.echo(f"{out / 'report.html'}  ({results['_total_seconds']:.0f} s)")


def register(app: typer.Typer) -> None:
    app.command("experiment")(experiment_command)

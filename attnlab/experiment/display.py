"""The progress display of ``attnlab experiment``: one line per stage (rich, on stderr).

Each stage shows a spinner while it runs, then ✓ with its time and a short
note (its headline number), or "skipped (done earlier)" on ``--resume``.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

__all__ = ["StageDisplay"]


class StageDisplay:
    def __init__(self, stages, out: Path, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.out = out
        self.progress = Progress(
            SpinnerColumn(finished_text="[green]✓[/]"), TextColumn("{task.description}", style="bold"),
            TextColumn("{task.fields[note]}", style="dim"), TimeElapsedColumn(),
            console=self.console, transient=False,
        )
        self.tasks = {}
        self.n = len(stages)

    def __enter__(self) -> "StageDisplay":
        self.console.print(f"[bold]attnlab experiment[/] → {self.out}")
        self.progress.start()
        self.total = self.progress.add_task("[bold]all stages", total=self.n, note="")
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def event(self, kind: str, stage, seconds: float, note: str) -> None:
        if kind == "start":
            self.tasks[stage.name] = self.progress.add_task(f"{stage.name:<12} {stage.title}", total=1, note="")
        elif kind == "skipped":
            self.progress.add_task(f"{stage.name:<12} {stage.title}", total=1, completed=1,
                                   note="skipped (done earlier)")
            self.progress.advance(self.total)
        else:
            task = self.tasks[stage.name]
            self.progress.update(task, completed=1, note=f"{seconds:6.1f} s  {note}")
            self.progress.stop_task(task)
            self.progress.advance(self.total)

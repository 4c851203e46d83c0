"""Progress of a long job: its stages, and its counted steps with an ETA, said on stderr where the user looks.

    progress = Progress.for_command(quiet)            # the CLI: see below
    progress.stage("loading model smollm2-135m")      # one line, before the slow part starts
    with progress.bar("calibration n=2048", total=4, unit="windows") as bar:
        for window in windows:
            ...
            bar.advance()                             # or bar.update(done, total=…, note="snapkv β=0.1")
    bar = progress.start("capture", total=64, unit="blocks"); …; bar.close()   # where a ``with`` does not fit
    SILENT                                            # the library's default: says nothing

Three ways of saying it, chosen once per command (``for_command``):

* a terminal (stderr is a tty): rich progress bars — done/total, elapsed, remaining time — that stay on screen
  when done, each stage a line above them;
* not a terminal (a log file, a pipe, CI): one line per stage and per bar — ``attnlab: calibration n=2048: 4
  windows …`` when it starts, ``… 4/4 windows in 31 s`` when it ends — and, for a bar that lasts, a line every
  ``every`` seconds with the count and the time left;
* ``--quiet``: nothing (errors still say their one line).

The remaining time of a bar comes only from rates measured in this run: t_left = (total − done) · elapsed /
(done − first), where ``first`` counts the steps a resumed job found done.  A bar whose steps differ in cost by kind
(an eval row of the per-row oracle at 16K takes 17 min, a StreamingLLM row one) is told the kind of each step left
(r_k of kind k) and the kind of each step done: t_left = Σ_{k timed} (r_k − d_k) · s̄_k, d_k the steps of kind k
done in this run and s̄_k their mean seconds (each the time since the bar's previous step); the steps of a kind not
timed yet are counted, never guessed (``untimed``: "≥ 3 min 10 s left, 20 rows not timed yet").  The time a bar
spends waiting on a bar opened and closed inside it (the calibration inside the eval grid) is no step's: it is left
out of its elapsed time and of the step under way, so a row that waited 19 minutes for a calibration does not read as
a 19-minute row.
Library functions take ``progress: Progress = SILENT``: tests and library users see no output unless they ask.
This module imports no torch and rich only for a terminal, so the first line comes before any model loads.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from contextlib import contextmanager
from typing import Iterable, Iterator, TextIO

__all__ = ["SILENT", "Bar", "LineProgress", "Progress", "TerminalProgress"]


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Bar:
    """Counted steps of one part of a job: ``advance`` / ``update``; what is shown is the owner's business."""

    def __init__(self, owner: "Progress", description: str, total: int | None, unit: str, done: int = 0,
                 kinds: Iterable | None = None):
        self.owner, self.description, self.total, self.unit = owner, description, total, unit
        self.done, self.note, self.started, self.closed = done, "", time.monotonic(), False
        self.first = done     # steps done before this run (a resumed job): not part of its pace
        self.kinds = Counter(kinds) if kinds is not None else None  # k → r_k, the steps of kind k left when it opened
        self.spent: dict = {}                                       # k → [d_k, seconds of those steps]
        self.last = self.started                                    # when the previous step ended
        self.waited = 0.0                                           # seconds spent inside bars nested in this one
        self.waited_in_step = 0.0                                   # … of them since the previous step

    def advance(self, n: int = 1, note: str | None = None) -> None:
        self.update(self.done + n, note=note)

    def update(self, done: int | None = None, total: int | None = None, note: str | None = None, kind=None) -> None:
        """``kind``: the kind of the step just done (a bar opened with ``kinds``), its seconds since the previous
        one."""
        now = time.monotonic()
        if kind is not None:
            d_k = self.spent.setdefault(kind, [0, 0.0])
            d_k[0], d_k[1] = d_k[0] + 1, d_k[1] + max(now - self.last - self.waited_in_step, 0.0)
        if done is not None and done != self.done:
            self.last = now
            self.waited_in_step = 0.0
        if done is not None:
            self.done = done
        if total is not None:
            self.total = total
        if note is not None:
            self.note = note
        self.owner._updated(self)

    def close(self) -> None:
        """The bar's last word (its count and time); once.  The bars open around it waited for it."""
        if not self.closed:
            self.closed = True
            self.owner._closed(self)
            opened = self.owner.__dict__.setdefault("_open_bars", [])
            if self in opened:
                outer = opened[:opened.index(self)]
                opened.remove(self)
                self.owner._nested_closed(self, [b for b in outer if not b.closed])

    def waited_for(self, inner: "Bar", now: float) -> None:
        """``inner``, opened inside this bar, has closed: its time within this bar's current step is no step's."""
        seconds = max(now - max(inner.started, self.last), 0.0)
        self.waited += seconds
        self.waited_in_step += seconds

    def remaining(self) -> float | None:
        """t_left = (total − done) · elapsed / (done − first), or by kind Σ_{k timed} (r_k − d_k) · s̄_k (module
        docstring: the steps of kinds not timed yet are ``untimed()``, not in it); None before this run's first step or
        without a total."""
        if not self.total or self.done <= self.first:
            return None
        if self.kinds is None:
            elapsed = time.monotonic() - self.started - self.waited
            return (self.total - self.done) * elapsed / (self.done - self.first)
        return sum(max(r - self.spent[k][0], 0) * self.spent[k][1] / self.spent[k][0]
                   for k, r in self.kinds.items() if k in self.spent)

    def untimed(self) -> int:
        """The steps left whose kind no step of this run has timed yet (0 for a bar without kinds)."""
        if self.kinds is None:
            return 0
        return sum(r for k, r in self.kinds.items() if k not in self.spent)

    def left_text(self) -> str:
        """``about 3 min 05 s left``, ``≥ 3 min 05 s left, 20 rows not timed yet``, or "" (nothing measured yet)."""
        left, untimed = self.remaining(), self.untimed()
        if left is None:
            return ""
        if not untimed:
            return f"about {duration(left)} left"
        unit = f" {self.unit}" if self.unit else ""
        return f"≥ {duration(left)} left, {untimed}{unit} not timed yet"


class Progress:
    """Says nothing: the default of every library function (``SILENT``); the base of the two that speak."""

    def stage(self, text: str) -> None:
        """A step of the job without a count (loading, writing): one line where the progress is shown."""

    @contextmanager
    def bar(self, description: str, total: int | None = None, unit: str = "", done: int = 0) -> Iterator[Bar]:
        """Counted steps: ``with progress.bar("eval", total=110, unit="prompts") as bar: … bar.advance()``."""
        bar = self.start(description, total, unit, done)
        try:
            yield bar
        finally:
            bar.close()

    def start(self, description: str, total: int | None = None, unit: str = "", done: int = 0,
              kinds: Iterable | None = None) -> Bar:
        """A bar opened now with ``done`` steps already done, closed by ``Bar.close()`` (``bar``: as a context manager);
        ``kinds``: the kind of each step left, where their costs differ (module docstring)."""
        bar = Bar(self, description, total, unit, done, kinds)
        if self is not SILENT:                                   # the silent default keeps no list of its bars
            opened = self.__dict__.setdefault("_open_bars", [])
            opened[:] = [b for b in opened if not b.closed] + [bar]
        self._opened(bar)
        return bar

    def _opened(self, bar: Bar) -> None:
        pass

    def _updated(self, bar: Bar) -> None:
        pass

    def _closed(self, bar: Bar) -> None:
        pass

    def _nested_closed(self, bar: Bar, open_bars: list[Bar]) -> None:
        """``bar`` closed while ``open_bars`` (opened before it) were open: each waited for it (``Bar.waited_for``)."""
        now = time.monotonic()
        for outer in open_bars:
            outer.waited_for(bar, now)
            self._updated(outer)                                 # its estimate again, from its own steps

    @staticmethod
    def for_command(quiet: bool = False, stream: TextIO | None = None) -> "Progress":
        """The progress a command shows: nothing under ``--quiet``, bars in a terminal, lines otherwise."""
        stream = stream or sys.stderr
        if quiet:
            return SILENT
        return TerminalProgress(stream) if stream.isatty() else LineProgress(stream)


SILENT = Progress()


class LineProgress(Progress):
    """One line per stage and per bar (start, end), and a line every ``every`` seconds while a bar runs."""

    def __init__(self, stream: TextIO | None = None, every: float = 30.0):
        self.stream, self.every = stream or sys.stderr, every
        self._said: dict[int, float] = {}

    def _line(self, text: str) -> None:
        self.stream.write(f"attnlab: {text}\n")
        self.stream.flush()

    def stage(self, text: str) -> None:
        self._line(text)

    def _count(self, bar: Bar) -> str:
        unit = f" {bar.unit}" if bar.unit else ""
        return f"{bar.done}/{bar.total}{unit}" if bar.total is not None else f"{bar.done}{unit}"

    def _opened(self, bar: Bar) -> None:
        unit = f" {bar.unit}" if bar.unit else ""
        before = f", {bar.done} done before" if bar.done else ""
        start = f"{bar.total}{unit}{before}" if bar.total is not None else ""
        self._line(f"{bar.description}: {start} …" if start else f"{bar.description} …")
        self._said[id(bar)] = time.monotonic()

    def _updated(self, bar: Bar) -> None:
        now = time.monotonic()
        if now - self._said.get(id(bar), now) < self.every or (bar.total is not None and bar.done >= bar.total):
            return                                             # the last step: the closing line says it
        self._said[id(bar)] = now
        left = bar.left_text()
        self._line(f"{bar.description}: {self._count(bar)}, {duration(now - bar.started)}"
                   + (f", {left}" if left else "") + (f" ({bar.note})" if bar.note else ""))

    def _closed(self, bar: Bar) -> None:
        self._said.pop(id(bar), None)
        self._line(f"{bar.description}: {self._count(bar)} in {duration(time.monotonic() - bar.started)}")


class TerminalProgress(Progress):
    """rich bars on stderr (done/total, elapsed, time left as ``Bar.left_text`` says), kept on screen when done;
    stages as lines above."""

    def __init__(self, stream: TextIO | None = None):
        from rich.console import Console

        self.console = Console(file=stream or sys.stderr)
        self._rich = None
        self._tasks: dict[int, int] = {}

    def stage(self, text: str) -> None:
        console = self._rich.console if self._rich is not None else self.console
        console.print(f"[dim]attnlab:[/dim] {text}", highlight=False)

    def _opened(self, bar: Bar) -> None:
        if self._rich is None:  # one live display for every bar open at once (a calibration inside the eval grid)
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._rich = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[unit]}"), TimeElapsedColumn(),
                                      TextColumn("{task.fields[left]}"), TextColumn("{task.fields[note]}"),
                                      console=self.console)
            self._rich.start()
        for task in self._tasks.values():  # a bar opened inside others: their estimates wait (no stale time left)
            self._rich.update(task, left="waiting")
        self._tasks[id(bar)] = self._rich.add_task(bar.description, total=bar.total, completed=bar.done,
                                                   unit=bar.unit, note="", left="")

    def _updated(self, bar: Bar) -> None:
        if self._rich is not None and id(bar) in self._tasks:
            left = bar.left_text()         # this module's estimate (by kind where the bar has kinds), not rich's
            self._rich.update(self._tasks[id(bar)], completed=bar.done, total=bar.total, note=bar.note, left=left)

    def _closed(self, bar: Bar) -> None:
        task = self._tasks.pop(id(bar), None)
        if self._rich is None or task is None:
            return
        self._rich.update(task, completed=bar.done, total=bar.total if bar.total is not None else bar.done, left="")
        self._rich.stop_task(task)
        if not self._tasks:
            self._rich.stop()
            self._rich = None

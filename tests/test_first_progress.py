"""Honest estimates: only from rates measured in this run, never a step's cost made of a calibration it waited for."""

from __future__ import annotations

import io

import pytest

import attnlab.progress as progress_module
from attnlab.progress import LineProgress, TerminalProgress


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", c)
    return c


def test_a_row_that_waited_for_a_calibration_is_timed_without_it(clock):
    """The eval's first calibrated row waits 19 minutes for the calibration (a bar inside the eval's): its kind is
    paced by its own 10 s, not by 19 minutes and 10 s."""
    out = io.StringIO()
    p = LineProgress(out)
    rows = p.start("eval", total=4, unit="rows", kinds=["full"] * 2 + ["attnlab"] * 2)
    clock.now += 5
    rows.update(1, kind="full")
    clock.now += 5
    rows.update(2, kind="full")
    with p.bar("calibration n=2048", total=2, unit="windows") as cal:
        for w in range(2):
            clock.now += 570
            cal.advance()
    clock.now += 10
    rows.update(3, kind="attnlab")
    assert rows.remaining() == pytest.approx(10.0)                       # one attnlab row left at 10 s
    assert rows.waited == pytest.approx(1140.0)
    plain = p.start("eval", total=4, unit="rows")
    clock.now += 5
    plain.update(1)
    with p.bar("calibration", total=1) as cal:
        clock.now += 600
        cal.advance()
    clock.now += 5
    plain.update(2)
    assert plain.remaining() == pytest.approx(2 * 5.0)                   # 2 rows at 5 s, the 600 s left out


def test_untimed_steps_are_counted_not_guessed(clock):
    p = LineProgress(io.StringIO(), every=0.0)
    bar = p.start("eval", total=6, unit="rows", kinds=["a"] * 3 + ["b"] * 3)
    assert bar.left_text() == ""                                         # nothing measured: nothing said
    clock.now += 10
    bar.update(1, kind="a")
    assert bar.left_text() == "≥ 20 s left, 3 rows not timed yet"
    for done in (2, 3):
        clock.now += 10
        bar.update(done, kind="a")
    clock.now += 60
    bar.update(4, kind="b")
    assert bar.left_text() == "about 2 min 00 s left"
    assert "about 2 min 00 s left" in p.stream.getvalue()


def test_a_terminal_bar_says_it_waits_while_a_bar_inside_it_runs(clock):
    out = Tty()
    p = TerminalProgress(out)
    rows = p.start("eval", total=4, unit="rows")
    clock.now += 5
    rows.update(1)
    cal = p.start("calibration", total=2, unit="windows")
    task = p._tasks[id(rows)]
    assert p._rich.tasks[task].fields["left"] == "waiting"               # no stale "15 s left" beside a calibration
    clock.now += 300
    cal.advance()
    cal.advance()
    cal.close()
    assert p._rich.tasks[task].fields["left"] == "about 15 s left"        # 3 rows at its own 5 s again
    rows.close()

"""benchmarks/sliding_floor.py, the dev probe of Gemma-3's band floor: bad options are one line, exit 2, before the
model loads (its measurement is the recipe sliding-floor-dev's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_sliding_floor_benchmark_bad_input_is_one_line_exit_2(tmp_path):
    """benchmarks/sliding_floor.py (the floor's dev probe): bad options are refused before the model loads."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "sliding_floor.py"
    text = tmp_path / "t.txt"
    text.write_text("some text\n")
    for args, words in ((["--floors", "128,x"], "--floors '128,x'"), (["--floors", "-1"], "--floors ≥ 0"),
                        (["--ppl", str(tmp_path / "none.txt")], "none.txt: no such file"),
                        (["--ppl", str(text), "--calibrate", str(tmp_path / "no.gz")], "--calibrate"),
                        (["--windows", "0"], "--windows ≥ 1")):
        r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode == 2 and len(lines) == 1 and words in lines[0] and "Traceback" not in r.stderr, (args, r.stderr)

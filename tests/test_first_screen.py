"""The README's first screen, run as a new user runs it: its commands read from the README itself.

The first ```bash block of README.md is what a new user copies.  Each of its commands runs here, at ``--help``
depth, in a fresh shell (an empty environment: only HOME, a scratch folder, and the system PATH), in order, so that
a command that needs an earlier one (``source .venv/bin/activate`` before ``attnlab``) finds only what the README
set up.  ``make TARGET`` runs as ``make -n TARGET`` (what it would do, nothing built), and must end by telling the
user how to run ``attnlab``; ``attnlab CMD --opt …`` runs as ``attnlab CMD --help`` and every option the README
gives must be one the command lists.  Editing the README's first screen changes what this test runs.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def first_screen(readme: str) -> list[list[str]]:
    """The commands of the README's first ```bash block: continuation lines joined, comments dropped, split as a
    shell splits them."""
    match = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert match, "README.md has no ```bash block"
    text = match.group(1).replace("\\\n", " ")
    commands = [shlex.split(line, comments=True) for line in text.splitlines()]
    return [c for c in commands if c]


def fresh_shell(script: str, home: Path) -> subprocess.CompletedProcess:
    """``script`` in bash with an empty environment (a new user's login: HOME and the system PATH only)."""
    env = {"HOME": str(home), "PATH": SYSTEM_PATH, "COLUMNS": "200", "TERM": "dumb", "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", "--noprofile", "--norc", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def help_depth(command: list[str]) -> str:
    """The shell line that runs ``command`` at ``--help`` depth (``make`` dry-runs; ``attnlab CMD`` shows its help)."""
    if command[0] == "make":
        return shlex.join(["make", "-n", *command[1:]])
    if command[0] == "attnlab":
        words = [w for w in command[1:] if not w.startswith("-")][:1]   # the sub-command
        return shlex.join(["attnlab", *words, "--help"])
    return shlex.join(command)                                           # source, export, cd: as written


def unknown_options(command: list[str], help_text: str) -> list[str]:
    """The ``--options`` of ``command`` that its ``--help`` does not list."""
    return [o for o in (w.split("=")[0] for w in command if w.startswith("--")) if o not in help_text]


def test_the_readme_has_a_first_screen():
    commands = first_screen(README.read_text(encoding="utf-8"))
    assert commands[0][:2] == ["make", "demo"], commands[0]
    assert any(c[0] == "attnlab" for c in commands), "the first screen runs no attnlab command"


def test_a_first_screen_with_a_wrong_option_is_caught(tmp_path):
    """The check can fail: an option the command does not have is reported."""
    if not (ROOT / ".venv" / "bin" / "activate").is_file():
        pytest.skip(".venv is made by `make demo`/`make env`; this checkout has none")
    readme = "```bash\nsource .venv/bin/activate\nattnlab eval --hf smollm2-135m --no-such-option 3\n```\n"
    commands = first_screen(readme)
    r = fresh_shell(" && ".join(help_depth(c) for c in commands), tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert unknown_options(commands[-1], r.stdout) == ["--no-such-option"]


def test_the_first_screen_runs_in_a_fresh_shell(tmp_path):
    if not (ROOT / ".venv" / "bin" / "activate").is_file():
        pytest.skip(".venv is made by `make demo`/`make env`; this checkout has none")
    commands = first_screen(README.read_text(encoding="utf-8"))
    done: list[str] = []
    for command in commands:
        line = help_depth(command)
        r = fresh_shell("set -e\n" + "\n".join(done + [line]), tmp_path)
        assert r.returncode == 0, f"README's first screen: `{line}` failed in a fresh shell:\n{r.stderr[-2000:]}"
        if command[0] == "make":
            # the last thing `make demo` prints tells a new user how to reach attnlab
            last = r.stdout.strip().splitlines()[-1]
            assert ".venv/bin/attnlab" in last and "source .venv/bin/activate" in last, r.stdout
        elif command[0] == "attnlab":
            missing = unknown_options(command, r.stdout)
            assert not missing, f"README's `{' '.join(command[:2])}` gives options its --help lacks: {missing}"
        else:
            done.append(line)                                        # its effect (PATH, a variable) carries on

"""The bad-input fuzz of option values and path options, rerun by the test suite.

Every case runs a real entry point — ``attnlab ARGS`` in this process, or a benchmark script, a recipe or a
refusal that must come before the model loads in a fresh process — and must be refused with exit 2, one line
(``attnlab: error: …``, ``results.py: error: …`` or a recipe's ``NAME.sh: error: …``) holding the case's needles,
no traceback, and no file under the work folder written, changed or removed (SHA-256 of every file before and
after).  A refusal in a fresh process that must come before the model loads also proves it: ``torch`` is not
imported when the process exits (the model cannot have loaded), and its time is printed.  The table prints each
case's exit, message and seconds.

The cases: a chat template that fails to compile, calls ``raise_exception`` or renders nothing (``--template chat``
and ``auto``); a list option with an empty or a repeated item (methods, tasks, lengths, budgets, mixes,
``kv_budget.py --methods``); a number that is not canonical (full-width digits, ``_``, spaces); a FIFO, a
device, a folder where a file is read, or a file where a folder is written; ``eval-why --calibration`` and its
lock; ``results.py --collect`` outside ``--runs`` and its ``--out``; ``kv_budget.py``'s arguments; a recipe's
unknown ``ONLY=`` part.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_llm_bad_input_fuzz import hashes, run

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
N = "512"  # the prompt length of the cases: the tiny model's one-character tokens hold a NIAH prompt there

# A fresh process that runs an entry point and says on its last stderr line whether torch was imported and how long
# it took: a refusal "before the model loads" must leave torch out.
TORCHLESS = """
import runpy, sys, time
t0 = time.perf_counter()
script, *argv = sys.argv[1:]
sys.argv = [script, *argv]
try:
    if script == "attnlab":
        from attnlab.cli import main
        main()
    else:
        runpy.run_path(script, run_name="__main__")
finally:
    print(f"@torch={'torch' in sys.modules} {time.perf_counter() - t0:.2f}", file=sys.stderr)
"""

TEMPLATES = {  # a model's chat template (its own Jinja code) that cannot make a prompt
    "syntax": "{% for m in messages %}{{ m['content'] }",  # does not compile
    "raise": "{{ raise_exception('this model takes no user messages') }}",  # the template refuses
    "empty": "{% for m in messages %}{% endfor %}",  # renders nothing
    "drop": "<start>{% if add_generation_prompt %}<answer>{% endif %}",  # leaves the message out
}


def _tiny_with_template(w: Path, name: str, template: str) -> Path:
    folder = w / f"tiny-{name}"
    shutil.copytree(w / "tiny", folder)
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = template
    cfg_path.write_text(json.dumps(cfg))
    return folder


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The work folder: tiny models (one per broken chat template), texts, an eval run, a results tree."""
    from char_model_folder import tiny_llama_folder

    from attnlab.cli import main  # noqa: F401 - the CLI imported once, before the cases are timed

    w = tmp_path_factory.mktemp("options")
    tiny_llama_folder(w / "tiny")
    for name, template in TEMPLATES.items():
        _tiny_with_template(w, name, template)
    line = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. "
    (w / "text.txt").write_text(line * 40)
    (w / "one.txt").write_text("One sentence, and no more.\n")
    (w / "latin1.txt").write_bytes(("Le caf\u00e9 est chaud. " * 600).encode("latin-1"))
    (w / "notes.txt").write_text("my notes\n")
    (w / "random.npz").write_bytes(bytes(range(256)) * 4)
    (w / "folder").mkdir()
    (w / "folder" / "readme.md").write_text("a user's folder\n")
    os.mkfifo(w / "fifo")
    env = {"OMP_NUM_THREADS": "1", "ATTNLAB_CACHE": str(w / "cache")}
    code, out, err = run(
        [
            "eval",
            "--hf",
            w / "tiny",
            "--lengths",
            N,
            "--depths",
            "1",
            "--samples",
            "1",
            "--haystack",
            "noise",
            "--method",
            "streaming-llm",
            "--out",
            w / "ev",
            "--quiet",
        ],
        env,
    )
    assert code == 0, err
    shutil.copytree(w / "ev", w / "evb")  # the same rows, as a calibrated method's (eval-why --calibration)
    for name in ("config.json", "results.jsonl"):
        path = w / "evb" / name
        path.write_text(path.read_text().replace("streaming-llm", "attnlab-band"))
    recipes, src = w / "recipes", w / "src" / "niah-2k"
    recipes.mkdir()
    (recipes / "niah-2k.sh").write_text("#!/bin/bash\n# A recipe of the tests.\necho run\n")
    src.mkdir(parents=True)
    for name in ("config.json", "results.jsonl", "wall.jsonl"):
        shutil.copy(w / "ev" / name, src / name)
    (w / "records").mkdir()
    (w / "records-orphan" / "orphan").mkdir(parents=True)   # a run folder no recipe made: the document is refused
    (w / "records-orphan" / "orphan" / "rows.jsonl").write_text('{"a": 1}\n')
    return w


def cases(w: Path) -> list[tuple[str, str, list, tuple]]:
    """(label, how: "cli" | "fresh" | "script" | "bash", argv, needles of the one error line)."""
    C = []

    def case(label, how, args, *needles):
        C.append((label, how, [str(a) for a in args], needles))

    tiny = w / "tiny"
    E = ["eval", "--hf", tiny, "--lengths", N, "--depths", "1", "--samples", "1", "--haystack", "noise", "--quiet"]
    EO = [*E, "--out", w / "new-eval"]
    CAL = ["--calibrate", w / "text.txt", "--method", "attnlab-band"]
    KV = [
        ROOT / "benchmarks" / "kv_budget.py",
        "--hf",
        tiny,
        "--n",
        "256",
        "--steps",
        "8",
        "--methods",
        "streaming-llm",
        "--text",
        w / "text.txt",
        "--out",
        w / "new-kv",
    ]
    RES = [
        ROOT / "benchmarks" / "results.py",
        "--runs",
        w / "records",
        "--recipes",
        w / "recipes",
        "--out",
        w / "results.md",
        "--readme",
        w / "no-readme.md",
    ]
    WHY = ["eval-why", "--out", w / "evb", "--method", "attnlab-band", "--quiet"]

    # ---- the cases of the issue
    for name, says in (
        ("syntax", "fails to render"),
        ("raise", "no user messages"),
        ("empty", "empty text"),
        ("drop", "leaves out the user's message"),
    ):
        for template in ("chat", "auto"):
            case(
                f"issue: eval --template {template}, a chat template: {name}",
                "cli",
                ["eval", "--hf", w / f"tiny-{name}", *E[3:], "--template", template, "--out", w / "new-eval"],
                f"--template {template}",
                f"tiny-{name}",
                says,
            )
    case(
        "issue: eval --method streaming-llm,streaming-llm",
        "cli",
        [*EO, "--method", "streaming-llm,streaming-llm"],
        "--method",
        "given twice",
    )
    case("issue: eval --method , (full attention alone)", "cli", [*EO, "--method", ","], "--method", "empty item")
    case(
        "issue: eval --calibrate-mix passkey:2,passkey:2",
        "cli",
        [*EO, *CAL, "--calibrate-mix", "passkey:2,passkey:2"],
        "--calibrate-mix",
        "given twice",
    )
    case(
        "issue: eval --calibrate-mix passkey:2,passkey:3",
        "cli",
        [*EO, *CAL, "--calibrate-mix", "passkey:2,passkey:3"],
        "--calibrate-mix",
        "passkey given twice",
    )
    for value in ("\uff18", "1_000", " 8", "0x8"):
        case(
            f"issue: eval --method attnlab:decode_band={value!r}",
            "cli",
            [*EO, "--method", f"attnlab:decode_band={value}"],
            "decode_band",
            "ASCII digits",
        )
    case(
        "issue: eval-why --calibration missing",
        "cli",
        [*WHY, "--calibration", w / "missing.npz"],
        "--calibration",
        "no such",
    )
    case(
        "issue: eval-why --calibration a random file", "cli", [*WHY, "--calibration", w / "random.npz"], "--calibration"
    )
    case(
        "issue: eval-why on a folder a running eval holds", "locked", WHY, "--out", "in use by another attnlab process"
    )
    case(
        "issue: results.py --collect SRC=RECIPE/../.. (outside --runs)",
        "script",
        [*RES, "--collect", f"{w / 'src' / 'niah-2k'}=niah-2k/../.."],
        "--collect",
        "'..'",
    )
    case(
        "issue: results.py --collect SRC=RECIPE/x through a link outside",
        "script",
        [*RES, "--collect", f"{w / 'src' / 'niah-2k'}=niah-2k/link/x"],
        "--collect",
        "leads outside",
    )
    case(
        "results.py --collect a run into --runs holding a run of no recipe (the copy undone)",
        "script",
        [*RES[:1], "--runs", w / "records-orphan", *RES[3:], "--collect", f"{w / 'src' / 'niah-2k'}=niah-2k"],
        "orphan",
        "no recipe",
    )
    case(
        "issue: results.py --out a folder (no raw [Errno])",
        "script",
        [*RES[:5], "--out", w / "folder", *RES[7:]],
        "--out",
        "is a folder",
    )
    case(
        "issue: results.py --out below a file (no raw [Errno])",
        "script",
        [*RES[:5], "--out", w / "notes.txt" / "r.md", *RES[7:]],
        "--out",
        "notes.txt",
    )
    case(
        "issue: eval --haystack of one sentence, before the model",
        "fresh",
        ["attnlab", *E[:-3], "--haystack", w / "one.txt", "--out", w / "new-eval"],
        "--haystack",
        "too short",
    )
    case(   # the model names the gate file attnlab ships for it: a model without one is refused once loaded
        "issue: eval --method duo-attention without its gate file, a model attnlab ships no gates for",
        "cli",
        [*EO, "--method", "duo-attention"],
        "--option gates",
        "gate file",
    )
    case(
        "issue: eval --method duo-attention:gates=MISSING, before the model",
        "fresh",
        ["attnlab", *EO, "--method", f"duo-attention:gates={w / 'gates.safetensors'}"],
        "--option gates",
        "no such",
    )
    case(
        "issue: eval --haystack a FIFO",
        "cli",
        [*E[:-3], "--haystack", w / "fifo", "--out", w / "new-eval"],
        "--haystack",
        "FIFO",
    )
    case(
        "issue: eval --haystack /dev/null",
        "cli",
        [*E[:-3], "--haystack", "/dev/null", "--out", w / "new-eval"],
        "--haystack",
        "character device",
    )
    case(
        "issue: kv_budget.py --methods streaming-llm,streaming-llm",
        "script",
        [*KV, "--methods", "streaming-llm,streaming-llm"],
        "--methods",
        "given twice",
    )
    case(
        "issue: kv_budget.py --out FILE, before the model",
        "fresh",
        [*KV, "--out", w / "notes.txt"],
        "--out",
        "not a folder",
    )
    case(
        "issue: kv_budget.py --text Latin-1, before the model",
        "fresh",
        [*KV, "--text", w / "latin1.txt"],
        "--text",
        "not UTF-8",
    )
    case(
        "issue: a recipe given an unknown ONLY= part",
        "bash",
        [ROOT / "benchmarks" / "recipes" / "kv-budget-dev.sh", "ONLY=nosuch"],
        "ONLY=nosuch",
        "frontier",
    )

    # ---- option values: numbers as typed, lists
    for option, value in (
        ("--depths", "1_000"),
        ("--depths", "\uff13"),
        ("--samples", " 3"),
        ("--seed", "0x10"),
        ("--seed", "1e3"),
        ("--depths=", "+1_0"),
        ("--max-new", "\u0664"),
        ("--ppl-windows", "1.0"),
        ("--calibrate-windows", "2 "),
    ):
        args = [*EO, f"{option}{value}"] if option.endswith("=") else [*EO, option, value]
        case(f"eval {option}{'' if option.endswith('=') else ' '}{value!r}", "cli", args, option.rstrip("="))
    for option, value, says in (
        ("--lengths", f"{N},0{N}", "given twice"),
        ("--lengths", f"{N},,{N}", "empty item"),
        ("--lengths", f"{N}_0", "ASCII"),
        ("--lengths", f"{N},", "empty item"),
        ("--budget", "0.1,0.10", "given twice"),
        ("--budget", "0.1,1e-1", "given twice"),
        ("--budget", "0.1,,0.2", "empty item"),
        ("--budget", "0.1_0", "ASCII"),
        ("--budget", "inf", "finite"),
        ("--budget", "-nan", "finite"),
        ("--task", "niah,,vt", "empty item"),
        ("--task", "niah,niah", "given twice"),
        ("--task", ",", "empty item"),
        ("--task", " niah , niah", "given twice"),
        ("--method", "snapkv:window=4,snapkv:window=04", "given twice"),
        ("--method", "snapkv:window=4,snapkv:window=+4", "given twice"),
        ("--method", "snapkv:window=\u0664", "ASCII"),
        ("--method", "snapkv,,quest", "empty item"),
        ("--method", "streaming-llm:compression=0.5e", "ASCII"),
        ("--method", "streaming-llm:compression=nan", "finite"),
        ("--method", "streaming-llm:compression=.5,streaming-llm:compression=0.50", "given twice"),
        ("--method", "snapkv:window-size=4:window_size=4", "given twice"),
    ):
        case(f"eval {option} {value!r}", "cli", [*EO, option, value], option, says)
    for value, says in (
        ("niah:1_0", "ASCII"),
        ("niah:2,,vt:1", "empty item"),
        ("niah:2,", "empty item"),
        ("niah:\uff12", "ASCII"),
        ("niah: 2", "ASCII"),
        ("niah:2,vt,niah", "niah given twice"),
    ):
        case(f"eval --calibrate-mix {value!r}", "cli", [*EO, *CAL, "--calibrate-mix", value], "--calibrate-mix", says)

    AT = ["attention", "--hf", tiny, "--file", w / "text.txt", "--out", w / "new-att"]
    for option, value, says in (
        ("--layers", "0,,1", "empty item"),
        ("--layers", "0,0", "given twice"),
        ("--layers", "\uff11", "ASCII"),
        ("--layers", "0-1_0", "ASCII"),
        ("--rows", "1_0:20", "--rows"),
        ("--rows", "10:\uff12\uff10", "--rows"),
    ):
        case(f"attention {option} {value!r}", "cli", [*AT, option, value], option, says)
    for value, says in (("induction,,sink", "empty item"), ("induction,induction", "given twice")):
        case(f"heads --detectors {value!r}", "cli", ["heads", "--hf", tiny, "--detectors", value, "--out",
                                                     w / "new-heads"], "--detectors", says)

    for spec in ("synthetic:n=1_000", "synthetic:n=\uff15\uff10", "synthetic:n=50,,seed=1", "synthetic:zipf_s=nan"):
        case(f"train --data {spec!r}", "cli", ["train", "--data", spec, "--max-steps", "1", "--out", w / "new-run"],
             "corpus spec", spec.partition(":")[2].split("=")[0])

    # ---- path options: what the option needs, named
    for option, path, says in (
        ("--calibrate", w / "folder", "is a folder"),
        ("--calibrate", w / "fifo", "FIFO"),
        ("--calibrate", "/dev/null", "character device"),
        ("--ppl", w / "fifo", "FIFO"),
        ("--ppl", "/dev/null", "character device"),
        ("--ppl", w / "folder", "is a folder"),
        ("--plan", w / "fifo", "FIFO"),
        ("--plan", "/dev/null", "character device"),
        ("--plan", w / "folder", "is a folder"),
        ("--plan", w / "missing.json", "no such"),
    ):
        extra = ["--method", "attnlab-band"] if option == "--calibrate" else []
        case(f"eval {option} {Path(path).name}", "cli", [*EO, *extra, option, path], option, says)
    case("eval --out a FIFO", "cli", [*E, "--out", w / "fifo"], "--out", "FIFO")
    case("eval --out /dev/null", "cli", [*E, "--out", "/dev/null"], "--out", "character device")
    case("eval --out below a file", "cli", [*E, "--out", w / "notes.txt" / "run"], "--out", "notes.txt")
    case(
        "eval --ppl of one sentence, before the model",
        "fresh",
        ["attnlab", *EO, "--ppl", w / "one.txt"],
        "--ppl",
        "shorter than the window",
    )
    case(
        "eval --calibrate of one sentence, before the model",
        "fresh",
        ["attnlab", *EO, *CAL[2:], "--calibrate", w / "one.txt"],
        "--calibrate",
        "shorter",
    )
    P = ["plan", "--hf", tiny, "--calibrate", w / "text.txt", "--n", "128"]
    case("plan --out a FIFO", "cli", [*P, "--out", w / "fifo"], "--out", "FIFO")
    case("plan --out a folder", "cli", [*P, "--out", w / "folder"], "--out", "folder")
    case(
        "plan --calibrate /dev/null",
        "cli",
        [*P[:3], "--calibrate", "/dev/null", "--out", w / "p.json"],
        "--calibrate",
        "character device",
    )
    case(
        "plan-run --plan /dev/null",
        "cli",
        ["plan-run", "--hf", tiny, "--plan", "/dev/null", "--file", w / "text.txt"],
        "--plan",
        "character device",
    )
    case(
        "plan-run --plan a FIFO",
        "cli",
        ["plan-run", "--hf", tiny, "--plan", w / "fifo", "--file", w / "text.txt"],
        "--plan",
        "FIFO",
    )
    case(
        "attention --maps a FIFO", "cli", ["attention", "--maps", w / "fifo", "--out", w / "new-att"], "--maps", "FIFO"
    )
    case(
        "attention --maps /dev/null",
        "cli",
        ["attention", "--maps", "/dev/null", "--out", w / "new-att"],
        "--maps",
        "character device",
    )
    case(
        "eval-why --calibration a folder", "cli", [*WHY, "--calibration", w / "folder"], "--calibration", "is a folder"
    )
    case("eval-why --calibration /dev/null", "cli", [*WHY, "--calibration", "/dev/null"], "--calibration", "device")
    case("eval-why --calibration a FIFO", "cli", [*WHY, "--calibration", w / "fifo"], "--calibration", "FIFO")
    case(
        "eval-why --calibration for a method without one",
        "cli",
        ["eval-why", "--out", w / "ev", "--method", "streaming-llm", "--calibration", w / "text.txt"],
        "--calibration",
        "runs without a calibration",
    )

    # ---- the scripts
    for args, needles in (
        ([*KV, "--n", "1_000"], ("--n", "ASCII")),
        ([*KV, "--n", "\uff18"], ("--n", "ASCII")),
        ([*KV, "--budget", "inf"], ("--budget", "finite")),
        ([*KV, "--methods", ","], ("--methods",)),
        ([*KV, "--methods", "snapkv:window=8,snapkv:window=08"], ("--methods", "given twice")),
        ([*KV, "--text", w / "fifo"], ("--text", "FIFO")),
        ([*KV, "--text", w / "one.txt"], ("--text", "shorter than the window")),
        ([*KV, "--methods", "attnlab", "--calibrate", "/dev/null"], ("--calibrate", "device")),
        ([*KV, "--out", w / "fifo"], ("--out", "FIFO")),
        ([*KV, "--steps", "256"], ("--steps",)),
        ([*KV, "--methods", "duo-attention"], ("--option gates",)),
    ):
        case(
            f"kv_budget.py {' '.join(str(a) for a in args[len(KV) :]).replace(str(w) + '/', '')}",
            "script",
            args,
            *needles,
        )
    for what, args, needles in (
        (
            "--collect SRC=niah-2k/./x",
            [*RES, "--collect", f"{w / 'src' / 'niah-2k'}=niah-2k/./x"],
            ("--collect", "'.'"),
        ),
        ("--collect SRC=niah-2k//x", [*RES, "--collect", f"{w / 'src' / 'niah-2k'}=niah-2k//x"], ("--collect",)),
        ("--runs a file", [*RES[:1], "--runs", w / "notes.txt", *RES[3:]], ("--runs", "not a folder")),
        ("--recipes missing", [*RES[:3], "--recipes", w / "missing", *RES[5:]], ("--recipes", "no such folder")),
        ("--out a FIFO", [*RES[:5], "--out", w / "fifo", *RES[7:]], ("--out", "FIFO")),
        ("--readme a FIFO", [*RES[:7], "--readme", w / "fifo"], ("--readme", "FIFO")),
    ):
        case(f"results.py {what}", "script", args, *needles)
    for recipe, part in (
        ("band-floor-dev", "c"),
        ("retrieval-formats-2k", "shakespeare-instructed-x"),
        ("multikey-default-8k", "gemma3"),
    ):
        case(
            f"recipe {recipe}.sh ONLY={part}",
            "bash",
            [ROOT / "benchmarks" / "recipes" / f"{recipe}.sh", f"ONLY={part}"],
            f"ONLY={part}",
            "not a part",
        )
    return C


def refuse(w: Path, how: str, args: list[str], env: dict) -> tuple[object, str, float | None]:
    """Run one case: (exit code, stderr, seconds; for a fresh process the time its own clock measured)."""
    if how in ("cli", "locked"):
        if how == "locked":
            from attnlab.lock import FolderLock

            with FolderLock(args[2]):  # an eval running in the folder: its lock held
                code, _, err = run(args, env)
        else:
            code, _, err = run(args, env)
        return code, err, None
    if how == "bash":
        script, only = args
        r = subprocess.run(
            ["bash", script],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, only.split("=")[0]: only.split("=", 1)[1], "RUNS": str(w / "recipe-runs")},
        )
        return r.returncode, r.stderr, None
    command = [sys.executable, "-c", TORCHLESS, *args] if how == "fresh" else [sys.executable, *args]
    r = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=w, env={**os.environ, **env})
    err = r.stderr
    seconds = None
    if how == "fresh":
        *rest, last = err.strip().splitlines() or [""]
        if last.startswith("@torch=False "):
            seconds = float(last.split()[1])
        err = "\n".join(rest) + "\n" + ("" if seconds is not None else f"[{last}: the model's libraries were loaded]")
    return r.returncode, err, seconds


def test_every_bad_option_is_one_line_exit_2_and_changes_nothing(world, monkeypatch):
    monkeypatch.chdir(world)
    env = {"ATTNLAB_CACHE": str(world / "cache"), "OMP_NUM_THREADS": "1"}
    monkeypatch.setenv("ATTNLAB_CACHE", env["ATTNLAB_CACHE"])
    (world / "records").mkdir(exist_ok=True)
    link = world / "records" / "niah-2k"
    link.mkdir(exist_ok=True)
    if not (link / "link").exists():
        (link / "link").symlink_to(world / "folder")  # --collect …=niah-2k/link/x would land in a user's folder
    table, bad = [], []
    start = time.perf_counter()
    for label, how, args, needles in cases(world):
        before = hashes(world)
        t0 = time.perf_counter()
        code, err, seconds = refuse(world, how, args, env)
        took = seconds if seconds is not None else time.perf_counter() - t0
        lines = [line for line in err.splitlines() if line.strip()]
        message = lines[-1] if lines else ""
        problems = []
        if code != 2:
            problems.append(f"exit {code}")
        if len(lines) != 1 or ": error: " not in message:
            problems.append(f"{len(lines)} stderr lines")
        if "Traceback" in err or "[Errno" in err:
            problems.append("traceback or raw [Errno]")
        problems += [f"no {n!r}" for n in needles if n not in message]
        if how == "fresh" and seconds is None:
            problems.append("not refused before the model loads")
        if hashes(world) != before:
            problems.append("files changed")
        table.append((label, code, message.split(": error: ", 1)[-1], took, problems))
        if problems:
            bad.append(f"{label}: {', '.join(problems)} | {err.strip()[-300:]}")
    width = max(len(t[0]) for t in table)
    print(f"\n{'case':<{width}}  exit  seconds  message")
    for label, code, message, took, problems in table:
        print(
            f"{label:<{width}}  {code!s:>4}  {took:7.2f}  {message[:100]}"
            + ("  <-- " + ", ".join(problems) if problems else "")
        )
    fresh = [t[3] for t, c in zip(table, cases(world)) if c[1] == "fresh"]
    issue = sum(t[0].startswith("issue:") for t in table)
    print(
        f"{len(table) - len(bad)} of {len(table)} refused cleanly ({issue} from the issue) in "
        f"{time.perf_counter() - start:.1f} s; before the model loads (torch never imported): {len(fresh)} refusals, "
        f"at most {max(fresh):.2f} s each in a fresh process"
    )
    assert not bad, "\n".join(bad)


def test_a_setting_written_two_ways_gets_one_label():
    """The row's label is made from the parsed value: the same setting, however written, is one row."""
    from attnlab.llm.methods.method_specs import method_spec
    from attnlab.option_values import numbers
    from attnlab.llm.eval.eval_settings import parse_budgets, parse_lengths, parse_methods

    assert parse_methods("attnlab:decode_band=08,snapkv:window=+32") == ["attnlab:decode_band=8", "snapkv:window=32"]
    assert method_spec("attnlab:decode-band=8") == method_spec("attnlab:decode_band=008") == "attnlab:decode_band=8"
    assert method_spec("streaming-llm:compression=.50") == "streaming-llm:compression=0.5"
    assert parse_methods("") == [] and parse_lengths("2048, 4096") == [2048, 4096] and parse_budgets("1e-1") == [0.1]
    assert numbers("+3,04", int, "--x") == [3, 4]


def test_only_rank_0_says_an_error_under_torchrun():
    """Every rank runs the same checks before torch.distributed starts; rank 0 alone prints the line."""
    from attnlab.llm.eval.ranks import says_errors

    assert says_errors({}) and says_errors({"RANK": "0"}) and not says_errors({"RANK": "1"})
    assert says_errors({"RANK": "x"})  # a RANK that is no number: each process says why (Ranks.from_env's line)


def test_torchrun_prints_an_option_error_once(world):
    """A real torchrun of two ranks on an option error: the line once, from no rank a traceback, exit 2 (rank 0).
    torchrun itself then reports the failed ranks in its own block (torch's elastic launcher raises ChildFailedError
    for any rank that exits non-zero: no option of it keeps that quiet); its exit status is 1."""
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.is_file():
        pytest.skip("no torchrun beside this Python")
    r = subprocess.run(
        [
            str(torchrun),
            "--standalone",   # a free port of its own: another torchrun on this machine does not collide
            "--nproc_per_node",
            "2",
            "-m",
            "attnlab",
            "eval",
            "--hf",
            str(world / "tiny"),
            "--lengths",
            N,
            "--haystack",
            "noise",
            "--method",
            "streaming-llm,streaming-llm",
            "--out",
            str(world / "new-eval"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=world,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    said = [line for line in r.stderr.splitlines() if line.startswith("attnlab: error: ")]
    assert said == ["attnlab: error: --method: 'streaming-llm' given twice, got 'streaming-llm,streaming-llm'"], (
        r.stderr
    )
    frames = [line for line in r.stderr.splitlines() if line.strip().startswith('File "')]
    ranks = [f for f in frames if "site-packages/torch/" not in f and not f.split('"')[1].endswith("/torchrun")]
    assert "exitcode  : 2" in r.stderr and not ranks, r.stderr  # the frames are torchrun's own, none a rank's
    assert not (world / "new-eval").exists()

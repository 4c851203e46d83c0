"""The bad-input fuzz of the LLM and language-model commands, rerun by the test suite.

Every case runs ``attnlab ARGS`` through the real entry point (``attnlab.cli.main``) in this
process, on tiny local models (a 2-layer Llama folder with a 512-token context and a
one-character tokenizer, a 1-step attnlab LM run), and must be refused cleanly:

    exit 2 · one line ``attnlab: error: ...`` on stderr (holding the case's needles) · no traceback ·
    no file under the work folder written, changed or removed (SHA-256 of every file before and after)

A few positive controls (the same commands with good values) must succeed, so that the refusals
are not blanket ones.  ``pytest -s`` prints the table (case, exit code, message) and the count.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

CONTEXT = 512  # the tiny Llama's max_position_embeddings


def hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def run(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """``attnlab ARGS`` in this process with ``env`` set: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from attnlab.cli import main

    old_argv, old_env = sys.argv, {k: os.environ.get(k) for k in env}
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["attnlab", *map(str, args)]
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            except BaseException as exc:  # noqa: BLE001 - an escaped exception is a failed case, recorded as such
                import traceback

                traceback.print_exc(file=err)
                code = f"raised {type(exc).__name__}"
    finally:
        sys.argv = old_argv
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The work folder: tiny models, texts, plans (good and broken), a user's notes."""
    import torch

    from attnlab.config import ModelConfig, TrainConfig
    from attnlab.llm.plans.plan import Plan
    from attnlab.train.loop import train
    from char_model_folder import save_with_char_tokenizer

    w = tmp_path_factory.mktemp("fuzz")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT)
    save_with_char_tokenizer(transformers.LlamaForCausalLM(cfg).eval(), w / "tiny")
    text = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. "
    (w / "text.txt").write_text((text * 30).strip())  # 2,700 characters: longer than the context
    (w / "short.txt").write_text(text * 2)
    (w / "empty.txt").write_text("")
    (w / "binary.txt").write_bytes(b"\x00\x01\xff\xfe" * 50)
    (w / "notes.txt").write_text("my notes, years of work\n")
    (w / "notes.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"a photo, not attnlab's" * 10)
    (w / "corpus.tsv").write_text("".join(f"the cat {i}\til gatto {i}\n" for i in range(60)))
    (w / "cachefile").write_text("not a folder\n")
    (w / "nomodel").mkdir()
    (w / "nomodel" / "readme.md").write_text("no config here\n")
    (w / "fake.gguf").write_bytes(b"hello, not a model")
    shape = {"num_layers": 2, "num_heads": 4, "num_kv_heads": 2}
    good = Plan.full(shape, 128).to_dict()
    (w / "plan.json").write_text(json.dumps(good))
    Plan.full({"num_layers": 30, "num_heads": 9, "num_kv_heads": 3}, 9000).save(w / "smollm-9000.json")
    Plan.full({"num_layers": 3, "num_heads": 4, "num_kv_heads": 2}, 128).save(w / "other-model.json")

    def broken(name, change):
        d = json.loads(json.dumps(good))
        change(d)
        (w / f"plan-{name}.json").write_text(json.dumps(d))

    def head(**kw):
        return lambda d: d["heads"][0][0].update(kw)

    broken("cols", head(w=8, columns=[-3, 99999]))          # the issue's plan
    broken("cols-big", head(w=8, columns=[0, 300]))         # beyond its n = 128
    broken("cols-dup", head(w=8, columns=[1, 1]))
    broken("cols-text", head(w=8, columns=["a"]))
    broken("w-text", head(w="wide"))
    broken("w-neg", head(w=-5))
    broken("dyn-neg", head(w=8, dynamic=-1))
    broken("dyn-big", head(w=8, dynamic=10**6))
    broken("offset", head(w=8, offset=3))
    broken("field", head(w=8, colour="red"))
    broken("n-neg", lambda d: d.update(n=-1))
    broken("n-float", lambda d: d.update(n=128.5))
    broken("n-text", lambda d: d.update(n="many"))
    broken("budget-nan", lambda d: d.update(budget=float("nan")))
    broken("budget-2", lambda d: d.update(budget=2))
    broken("layers", lambda d: d.update(num_layers=5))
    broken("row", lambda d: d["heads"][1].pop())
    broken("windows", lambda d: d.update(windows=[1, 2, 3]))
    broken("format", lambda d: d.update(format="other/2"))
    broken("no-heads", lambda d: d.pop("heads"))
    (w / "plan-list.json").write_text("[1, 2, 3]\n")
    (w / "plan-truncated.json").write_text(json.dumps(good)[:200])
    (w / "plan-binary.json").write_bytes(b"\xff\xfe\x00" * 20)
    (w / "plan-empty.json").write_text("")
    model = ModelConfig(model="lm", d_model=16, ff=32, layers=1, heads=2, max_len=32, norm="pre", dropout=0.0)
    train(model, TrainConfig(data=str(w / "text.txt"), tokenizer="char", context=32, batch_size=4, max_steps=1,
                             warmup=1, checkpoint_every=1, label_smoothing=0.0), w / "lmrun", quiet=True)
    (w / "plan-128.json").write_text(json.dumps(good))
    return w


def cases(w: Path) -> list[tuple[str, list, dict, tuple]]:
    """(label, argv, environment, needles of the one error line)."""
    tiny, text, short = str(w / "tiny"), str(w / "text.txt"), str(w / "short.txt")
    out = ["--out", str(w / "new-out")]
    C = []

    def case(label, args, *needles, env=None):
        C.append((label, [str(a) for a in args], env or {}, needles))

    # ---- the cases of the issue
    case("issue: plan --n 10000 on SmolLM2 (8,192)", ["plan", "--hf", "smollm2-135m", "--calibrate", text, "--n", "10000"], "--n 10000", "8192")
    case("issue: plan-run --n 9000 on SmolLM2", ["plan-run", "--hf", "smollm2-135m", "--plan", w / "smollm-9000.json", "--file", text, "--n", "9000"], "--n 9000", "8192")
    case("issue: plan columns [-3, 99999]", ["plan-run", "--hf", tiny, "--plan", w / "plan-cols.json", "--file", text, "--n", "128"], "columns", "[-3, 99999]")
    case("issue: plan n=128 run at 256", ["plan-run", "--hf", tiny, "--plan", w / "plan-128.json", "--file", text, "--n", "256"], "n = 128", "--n 256")
    case("issue: plan --force over a user's notes", ["plan", "--hf", tiny, "--calibrate", text, "--out", w / "notes.txt", "--force"], "--force", "not an attnlab plan")
    case("issue: embeddings --force over a user's notes", ["embeddings", "--data", w / "corpus.tsv", "--out", w / "notes.txt", "--force"], "--force", "not an attnlab embeddings")
    case("issue: models fetch --cache FILE", ["models", "fetch", "smollm2-135m", "--cache", w / "cachefile"], "--cache", "not a folder")
    case("issue: ATTNLAB_CACHE is a file (list)", ["models", "list"], "ATTNLAB_CACHE", "not a folder", env={"ATTNLAB_CACHE": str(w / "cachefile")})
    case("issue: evaluate --split test on the training text", ["evaluate", w / "lmrun", "--data", text, "--split", "test"], "--split test", "training text")
    case("issue: --layers beyond the model", ["attention", "--hf", tiny, "--file", short, "--layers", "0-3", *out], "--layers", "0..1")

    # ---- attention --hf --file
    A = ["attention", "--hf", tiny, "--file", short, *out]
    for v in ("5", "-1", "1-0", "a", "", "0-", "2-9", "0,,x"):
        case(f"attention --layers {v!r}", [*A, "--layers", v], "--layers")
    for v, needle in (("0", "--tokens"), ("-5", "--tokens"), ("600", "--tokens 600"), ("100000", "--tokens 100000"), ("1e3", "--tokens"), ("x", "--tokens")):
        case(f"attention --tokens {v}", [*A, "--tokens", v], needle)
    case("attention --tokens beyond the text", [*A, "--tokens", "400"], "--tokens 400", "fewer")
    for v in ("0", "-1", "abc"):
        case(f"attention --block-rows {v}", [*A, "--block-rows", v], "--block-rows")
    for v in ("5:2", "a:b", "3", "-1:4", "1:2:3"):
        case(f"attention --rows {v}", [*A, "--rows", v], "--rows")
    for v in ("0", "-2", "x"):
        case(f"attention --pool {v}", [*A, "--pool", v], "--pool")
    for v in ("0", "-1", "nan", "inf"):
        case(f"attention --memory-limit {v}", [*A, "--memory-limit", v], "--memory-limit")
    case("attention --tokens without --file", ["attention", "--hf", tiny, "the cat", "--tokens", "5", *out], "--tokens", "--file")
    case("attention --layers without --file", ["attention", "--hf", tiny, "the cat", "--layers", "0", *out], "--layers", "--file")
    case("attention --file missing", ["attention", "--hf", tiny, "--file", w / "missing.txt", *out], "missing.txt")
    case("attention --file empty", ["attention", "--hf", tiny, "--file", w / "empty.txt", *out], "empty.txt")
    case("attention --file binary", ["attention", "--hf", tiny, "--file", w / "binary.txt", *out], "binary.txt")
    case("attention --tokens beyond the context (a longer file alone reads its first 512 tokens)",
         ["attention", "--hf", tiny, "--file", text, "--tokens", "600", *out], "--tokens 600", "512 tokens")
    case("attention --hf missing folder", ["attention", "--hf", w / "nothere", "--file", short, *out], "nothere")
    case("attention --hf a notes file", ["attention", "--hf", w / "notes.txt", "--file", short, *out], "notes.txt")
    case("attention --hf folder without config", ["attention", "--hf", w / "nomodel", "--file", short, *out], "no config.json")
    case("attention --hf fake .gguf", ["attention", "--hf", w / "fake.gguf", "--file", short, *out], "not a GGUF")
    case("attention --out a notes file", ["attention", "--hf", tiny, "--file", short, "--out", w / "notes.txt"], "--out", "not a folder")
    case("attention --out a user's folder --force", ["attention", "--hf", tiny, "--file", short, "--out", w / "nomodel", "--force"], "--force", "not an attnlab attention folder")
    case("attention --out the model folder", ["attention", "--hf", tiny, "--file", short, "--out", tiny, "--force"], "--hf")
    case("attention RUN_DIR and --hf", ["attention", w / "lmrun", "--hf", tiny, "--file", short, *out], "not both")

    # ---- roles
    R = ["roles", "--hf", tiny, "--file", short]
    for v in ("9", "x", "3-1"):
        case(f"roles --layers {v}", [*R, "--layers", v], "--layers")
    for v in ("0", "600", "-3"):
        case(f"roles --tokens {v}", [*R, "--tokens", v], "--tokens")
    case("roles --memory-limit 0", [*R, "--memory-limit", "0"], "--memory-limit")
    case("roles --block-rows 0", [*R, "--block-rows", "0"], "--block-rows")
    case("roles --limit 0", ["roles", "--hf", tiny, "--data", "synthetic", "--limit", "0"], "--limit")
    case("roles --split valid", ["roles", "--hf", tiny, "--data", "synthetic", "--split", "valid"], "--split")
    case("roles --kind foo", ["roles", "--hf", tiny, "--data", "synthetic", "--kind", "foo"], "--kind")
    case("roles --file with --data", [*R, "--data", "synthetic"], "--file", "--data")
    case("roles --file missing", ["roles", "--hf", tiny, "--file", w / "missing.txt"], "missing.txt")
    case("roles --tokens without --file", ["roles", "--hf", tiny, "--data", "synthetic", "--tokens", "5"], "--tokens", "--file")

    # ---- approximate --hf
    P = ["approximate", "--hf", tiny, "--file", short]
    for flag, v in (("--w", "-1"), ("--num-pos", "-1"), ("--target", "0"), ("--target", "1.5"), ("--target", "nan"),
                    ("--layers", "7"), ("--layers", "zero"), ("--tokens", "100000"), ("--tokens", "0"), ("--attempts", "0"),
                    ("--block-rows", "-4"), ("--memory-limit", "-1"), ("--seed", "-1"), ("--sparse", "-1")):
        case(f"approximate {flag} {v}", [*P, flag, v], flag)
    case("approximate --hf without --file", ["approximate", "--hf", tiny], "--file")
    case("approximate INPUT and --hf", ["approximate", w / "lmrun", "--hf", tiny, "--file", short], "not both")
    case("approximate --layers without --file", ["approximate", w / "notes.txt", "--layers", "0"], "--layers", "--file")

    # ---- plan
    PL = ["plan", "--hf", tiny, "--calibrate", text, "--out", w / "new-plan.json"]
    for v in ("0", "1.5", "nan", "-0.1", "abc", "inf"):
        case(f"plan --budget {v}", [*PL, "--budget", v], "--budget")
    for v, needle in (("1", "--n"), ("0", "--n"), ("-5", "--n"), ("10000", "512 tokens"), ("2097153", "--n"), ("513", "--n 513")):
        case(f"plan --n {v}", [*PL, "--n", v], needle)
    for v in ("0", "-1"):
        case(f"plan --windows {v}", [*PL, "--windows", v], "--windows")
    for v in ("foo", "", "ATTNLAB"):
        case(f"plan --method {v!r}", [*PL, "--method", v], "--method")
    case("plan --calibrate missing", ["plan", "--hf", tiny, "--calibrate", w / "missing.txt", "--out", w / "new-plan.json"], "missing.txt")
    case("plan --calibrate empty", ["plan", "--hf", tiny, "--calibrate", w / "empty.txt", "--n", "64", "--out", w / "new-plan.json"], "empty.txt")
    case("plan --calibrate too short for --n", ["plan", "--hf", tiny, "--calibrate", short, "--n", "500", "--out", w / "new-plan.json"], "shorter than the window")
    case("plan --out notes (no --force)", ["plan", "--hf", tiny, "--calibrate", text, "--out", w / "notes.txt"], "exists", "--force")
    case("plan --out an existing plan", ["plan", "--hf", tiny, "--calibrate", text, "--out", w / "plan.json"], "exists", "--force")
    case("plan --out a folder", ["plan", "--hf", tiny, "--calibrate", text, "--out", w / "nomodel"], "is a folder")
    case("plan --out in a missing folder", ["plan", "--hf", tiny, "--calibrate", text, "--out", w / "no" / "x.json"], "does not exist")
    case("plan --out = --calibrate", ["plan", "--hf", tiny, "--calibrate", text, "--out", text, "--force"], "--calibrate")
    case("plan --hf missing", ["plan", "--hf", w / "nothere", "--calibrate", text, "--out", w / "new-plan.json"], "nothere")
    case("plan --hf a notes file", ["plan", "--hf", w / "notes.txt", "--calibrate", text, "--out", w / "new-plan.json"], "notes.txt")
    case("plan without --hf", ["plan", "--calibrate", text], "--hf")
    case("plan --bogus", [*PL, "--bogus", "1"], "--bogus")

    # ---- plan-run
    PR = ["plan-run", "--hf", tiny, "--file", text]
    for name, needle in (("cols-big", "column 300"), ("cols-dup", "distinct"),
                         ("cols-text", "field heads.0.0.columns.0"), ("w-text", "field heads.0.0.w"),
                         ("w-neg", "field heads.0.0.w"), ("dyn-neg", "field heads.0.0.dynamic"),
                         ("dyn-big", "dynamic"), ("offset", "offset"), ("field", "field heads.0.0.colour: unknown key"),
                         ("n-neg", "field n:"), ("n-float", "field n:"), ("n-text", "field n:"),
                         ("budget-nan", "budget"), ("budget-2", "budget"), ("layers", "num_layers"),
                         ("row", "field heads.1:"), ("windows", "windows"), ("format", "field format"),
                         ("no-heads", "field heads: required"), ("list", "JSON object expected"), ("truncated", "JSON"),
                         ("binary", "not UTF-8"), ("empty", "empty")):
        case(f"plan-run plan {name}", [*PR, "--plan", w / f"plan-{name}.json", "--n", "128"], needle)
    case("plan-run plan of another model", [*PR, "--plan", w / "other-model.json", "--n", "128"], "another model", "num_layers 3 vs 2")
    case("plan-run --plan missing", [*PR, "--plan", w / "missing.json", "--n", "128"], "missing.json")
    case("plan-run --plan a notes file", [*PR, "--plan", w / "notes.txt", "--n", "128"], "notes.txt")
    case("plan-run --plan a folder", [*PR, "--plan", w / "nomodel", "--n", "128"], "nomodel", "a folder")
    for v, needle in (("1", "--n"), ("10000", "--n"), ("64", "n = 128"), ("abc", "--n")):
        case(f"plan-run --n {v}", [*PR, "--plan", w / "plan.json", "--n", v], needle)
    case("plan-run --windows 0", [*PR, "--plan", w / "plan.json", "--n", "128", "--windows", "0"], "--windows")
    case("plan-run --file missing", ["plan-run", "--hf", tiny, "--plan", w / "plan.json", "--file", w / "missing.txt", "--n", "128"], "missing.txt")
    case("plan-run --file empty", ["plan-run", "--hf", tiny, "--plan", w / "plan.json", "--file", w / "empty.txt", "--n", "128"], "empty.txt")
    case("plan-run --hf missing", ["plan-run", "--hf", w / "nothere", "--plan", w / "plan.json", "--file", text, "--n", "128"], "nothere")

    # ---- models
    case("models fetch unknown", ["models", "fetch", "gpt-17"], "gpt-17", "smollm2-135m")
    case("models fetch --cache FILE/sub", ["models", "fetch", "smollm2-135m", "--cache", w / "cachefile" / "sub"], "--cache", "not a folder")
    case("models fetch with ATTNLAB_CACHE a file", ["models", "fetch", "smollm2-135m"], "ATTNLAB_CACHE", env={"ATTNLAB_CACHE": str(w / "cachefile")})
    case("ATTNLAB_CACHE below a file", ["models", "list"], "ATTNLAB_CACHE", env={"ATTNLAB_CACHE": str(w / "cachefile" / "x")})
    case("models fetch without NAME", ["models", "fetch"], "name")
    case("models nosuch", ["models", "nosuch"], "nosuch")
    case("attention --hf known model, ATTNLAB_CACHE a file", ["attention", "--hf", "smollm2-135m", "--file", short, *out], "ATTNLAB_CACHE", env={"ATTNLAB_CACHE": str(w / "cachefile")})

    # ---- LM train
    T = ["train", "--model", "lm", "--data", text, "--tokenizer", "char", "--d-model", "16", "--heads", "2", "--layers", "1",
         "--ff", "32", "--max-len", "32", "--max-steps", "1", "--quiet", "--out", w / "new-run"]
    for flag, v in (("--context", "-1"), ("--context", "100"), ("--batch-size", "-1"), ("--eval-every", "-1"), ("--eval-tokens", "-1"),
                    ("--layers", "0-3"), ("--layers", "0"), ("--heads", "3"), ("--dec-layers", "2"), ("--lr", "nan"),
                    ("--label-smoothing", "1"), ("--max-len", "1"), ("--warmup", "-1"), ("--seed", "-1")):
        case(f"train lm {flag} {v}", [*T, flag, v], flag if flag != "--heads" else "divisible")
    case("train lm --tokenizer word on text", [*T, "--tokenizer", "word"], "--tokenizer")
    case("train lm --data missing.txt", [*T, "--data", w / "missing.txt"], "missing.txt")
    case("train lm --data empty.txt", [*T, "--data", w / "empty.txt"], "empty.txt")
    case("train lm --data binary.txt", [*T, "--data", w / "binary.txt"], "binary.txt")
    case("train lm --out a notes file", [*T, "--out", w / "notes.txt"], "--out", "not a folder")
    case("train lm --out an existing run", [*T, "--out", w / "lmrun"], "--out", "--force")
    case("train lm --out a user's folder --force", [*T, "--out", w / "nomodel", "--force"], "--force", "not an attnlab run")
    case("train --context on a TSV corpus", ["train", "--data", w / "corpus.tsv", "--context", "16", "--max-steps", "1", "--out", w / "new-run"], "--context")

    # ---- LM generate
    G = ["generate", w / "lmrun", "To be"]
    for flag, v in (("--tokens", "0"), ("--tokens", "-1"), ("--tokens", "abc"), ("--temperature", "-1"), ("--temperature", "nan"),
                    ("--temperature", "inf"), ("--top-k", "-1"), ("--seed", "-1"), ("--seed", "99999999999")):
        case(f"generate {flag} {v}", [*G, flag, v], flag)
    case("generate missing run", ["generate", w / "norun", "x"], "norun")
    case("generate a folder that is not a run", ["generate", w / "nomodel", "x"], "nomodel")
    case("generate a notes file as run", ["generate", w / "notes.txt", "x"], "notes.txt")

    # ---- LM evaluate
    E = ["evaluate", w / "lmrun"]
    case("evaluate --split dev on the training text", [*E, "--data", text, "--split", "dev"], "--split dev", "training text")
    case("evaluate --split valid", [*E, "--data", text, "--split", "valid"], "--split")
    case("evaluate --context -1", [*E, "--data", short, "--context", "-1"], "--context")
    case("evaluate --context 100 > max_len", [*E, "--data", short, "--context", "100"], "--context 100")
    case("evaluate --limit -1", [*E, "--data", short, "--limit", "-1"], "--limit")
    case("evaluate --data missing.txt", [*E, "--data", w / "missing.txt"], "missing.txt")
    case("evaluate --data empty.txt", [*E, "--data", w / "empty.txt"], "empty.txt")
    case("evaluate --data a TSV corpus (LM)", [*E, "--data", w / "corpus.tsv"], "plain text")
    case("evaluate --beam 0", [*E, "--data", short, "--beam", "0"], "--beam")
    case("evaluate missing run", ["evaluate", w / "norun", "--data", short], "norun")
    return C


def error_lines(err: str) -> list[str]:
    """stderr without the progress lines said before a refusal that comes after the model has loaded
    (``attnlab: loading model …``: a line per stage when stderr is not a terminal, ``attnlab.progress``)."""
    return [line for line in err.strip().splitlines()
            if line.strip() and not (line.startswith("attnlab: ") and not line.startswith("attnlab: error: ") and "Traceback" not in err)]


def refuse_all(world: Path, table_cases: list) -> tuple[list, list, float]:
    """Run every case: (table rows (label, exit, message, problems), the failed cases, seconds)."""
    table, bad = [], []
    start = time.perf_counter()
    for label, args, env, needles in table_cases:
        before = hashes(world)
        code, out, err = run(args, env)
        lines = error_lines(err)
        message = lines[-1] if lines else ""
        problems = []
        if code != 2:
            problems.append(f"exit {code}")
        if len(lines) != 1 or not message.startswith("attnlab: error: "):
            problems.append(f"{len(lines)} stderr lines")
        if "Traceback" in err:
            problems.append("traceback")
        problems += [f"no {n!r}" for n in needles if n not in message]
        if hashes(world) != before:
            problems.append("files changed")
        table.append((label, code, message.removeprefix("attnlab: error: "), problems))
        if problems:
            bad.append(f"{label}: {', '.join(problems)} | {err.strip()[-300:]}")
    return table, bad, time.perf_counter() - start


def print_table(table: list) -> None:
    width = max(len(t[0]) for t in table)
    print(f"\n{'case':<{width}}  exit  message")
    for label, code, message, problems in table:
        print(f"{label:<{width}}  {code!s:>4}  {message[:110]}{'  <-- ' + ', '.join(problems) if problems else ''}")


def test_every_bad_input_is_one_line_exit_2_and_changes_nothing(world, monkeypatch):
    monkeypatch.chdir(world)  # default outputs (plan next to the model, ./attention-MODEL) land in the work folder
    monkeypatch.setenv("ATTNLAB_CACHE", str(world / "cache"))  # never the user's cache
    table, bad, seconds = refuse_all(world, cases(world))
    print_table(table)
    issue = sum(t[0].startswith("issue:") for t in table)
    clean = len(table) - len(bad)
    print(f"{clean} of {len(table)} bad inputs refused cleanly ({issue} from the issue, {len(table) - issue} more) in {seconds:.1f} s: "
          f"exit 2, one line, no traceback, no file changed")
    assert not bad, "\n".join(bad)
    assert len(table) - issue >= 100


def test_the_same_commands_with_good_values_succeed(world, monkeypatch, tmp_path):
    """Positive controls: the refusals above are not blanket ones."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    tiny, text, short = str(world / "tiny"), str(world / "text.txt"), str(world / "short.txt")
    plan = tmp_path / "p.json"
    for args in (["attention", "--hf", tiny, "--file", short, "--layers", "0-1", "--tokens", "64", "--out", tmp_path / "att"],
                 ["roles", "--hf", tiny, "--file", short, "--layers", "0,1", "--json"],
                 ["approximate", "--hf", tiny, "--file", short, "--layers", "0", "--json"],
                 ["plan", "--hf", tiny, "--calibrate", text, "--n", "128", "--windows", "1", "--method", "streaming-llm", "--out", plan],
                 ["plan", "--hf", tiny, "--calibrate", text, "--n", "128", "--windows", "1", "--out", plan, "--force"],
                 ["plan-run", "--hf", tiny, "--plan", plan, "--file", text, "--n", "128"],
                 ["evaluate", world / "lmrun", "--data", short, "--split", "test"],
                 ["generate", world / "lmrun", "To", "--tokens", "5"]):
        code, out, err = run([str(a) for a in args], {})
        assert code == 0, (args, err)
    code, out, err = run(["evaluate", str(world / "lmrun"), "--data", short, "--split", "test"], {})
    assert "whole file" in out, out  # a file that is not a split is said to be scored whole

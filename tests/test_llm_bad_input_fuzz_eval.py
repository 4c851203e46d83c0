"""The bad-input fuzz of ``attnlab eval`` and of the options that came with it, rerun by the test suite.

The same rules as ``test_llm_bad_input_fuzz.py`` (whose tiny models, texts and runner it uses): every case
runs ``attnlab ARGS`` through the real entry point and must be refused with exit 2, one line
``attnlab: error: ...`` holding the case's needles, no traceback, and no file under the work folder written,
changed or removed (SHA-256 of every file before and after) — an eval refused for a bad --calibrate or --ppl
leaves no ``config.json`` behind.  The method options given twice, a plan for a method without a plan file,
a plan file's fields, an unknown model (one line, at once: no download tried), a folder where a file is
expected, ``--out`` that is not new, empty or an eval of the same model; then the options of the prompt
formats (``--template``, ``--question``, the pass-key tasks), the presets, ``--device`` and ``--quiet``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_llm_bad_input_fuzz import CONTEXT, print_table, refuse_all, run, world  # noqa: F401 - world: the shared fixture

pytest.importorskip("transformers")


def broken_plans(w: Path) -> None:
    """Plan files whose fields are wrong against the model (2 layers × 4 heads, 2 KV heads) or the run's n = 128."""
    good = json.loads((w / "plan.json").read_text())

    def broken(name, change):
        d = json.loads(json.dumps(good))
        change(d)
        (w / f"plan4-{name}.json").write_text(json.dumps(d))

    def head(**kw):
        return lambda d: d["heads"][0][0].update(kw)

    broken("n-0", lambda d: d.update(n=0))
    broken("n-none", lambda d: d.pop("n"))
    broken("heads-0", lambda d: d.update(num_heads=0))
    broken("kv-3", lambda d: d.update(num_kv_heads=3))
    broken("kv-text", lambda d: d.update(num_kv_heads="two"))
    broken("layers-neg", lambda d: d.update(num_layers=-2))
    broken("tail-big", head(w=8, tail=500))
    broken("kept-big", head(w=8, tail=16, kept=600))
    broken("kept-no-tail", head(w=8, kept=8))
    broken("slashes-big", head(w=8, slashes=300))
    broken("w-big", head(w=200))
    broken("blocks-neg", head(w=8, blocks=-1))
    broken("pages-neg", lambda d: d.update(pages=-3))
    broken("page-0", lambda d: d.update(pages=2, page=0))


def cases(w: Path) -> list[tuple[str, list, dict, tuple]]:
    """(label, argv, environment, needles of the one error line)."""
    tiny, text, short = str(w / "tiny"), str(w / "text.txt"), str(w / "short.txt")
    C = []

    def case(label, args, *needles, env=None):
        C.append((label, [str(a) for a in args], env or {}, needles))

    E = ["eval", "--hf", tiny, "--lengths", str(CONTEXT), "--depths", "1", "--samples", "1", "--haystack", "noise"]
    EO = [*E, "--out", w / "new-eval"]
    CAL = ["--method", "streaming-llm,attnlab-band", "--calibrate"]
    PR = ["plan-run", "--hf", tiny, "--file", text, "--n", "128", "--plan"]

    # ---- the cases of the issue
    case("issue: eval --method snapkv:window=4:window=8", [*EO, "--method", "snapkv:window=4:window=8"], "window given twice")
    case("issue: plan --method snapkv --budget 0.3 (no plan file)", ["plan", "--hf", tiny, "--calibrate", text, "--method", "snapkv",
         "--budget", "0.3", "--n", "128", "--out", w / "new-plan.json"], "--method", "got 'snapkv'")
    case("issue: plan-run a plan whose n is 0", [*PR, w / "plan4-n-0.json"],
         "field n: Input should be greater than or equal to 1")
    case("issue: eval --calibrate empty (no config.json)", [*EO, *CAL, w / "empty.txt"], "--calibrate", "empty")
    case("issue: eval --ppl empty (no config.json)", [*EO, "--ppl", w / "empty.txt"], "--ppl", "empty")
    case("issue: eval --ppl binary (no config.json)", [*EO, "--ppl", w / "binary.txt"], "--ppl", "binary")
    case("issue: eval --ppl too short (no config.json)", [*EO, "--quiet", "--ppl", short], "--ppl", "shorter than the window")
    case("issue: eval --hf unknown name (no download)", ["eval", "--hf", "nosuch-model", "--haystack", "noise", "--out", w / "new-eval"],
         "nosuch-model", "smollm2-135m")
    case("issue: heads --hf unknown name", ["heads", "--hf", "nosuch-model", "--out", w / "new-heads"], "nosuch-model", "gemma3-270m")
    case("issue: eval --out below a file", [*E, "--out", w / "notes.txt" / "run"], "--out", "a file, not a folder")
    case("issue: eval --out another model's eval", [*E, "--out", w / "eval-other-model"], "--out", "'smollm2-135m'")
    case("issue: eval --haystack a folder", [*E, "--haystack", w / "nomodel", "--out", w / "new-eval"], "--haystack", "is a folder")
    case("issue: eval --calibrate a folder", [*EO, *CAL, w / "nomodel"], "--calibrate", "is a folder")
    case("issue: eval --ppl a folder", [*EO, "--ppl", w / "nomodel"], "--ppl", "is a folder")
    case("issue: eval --out a folder of a user's files", [*E, "--out", w / "nomodel"], "--out", "not an attnlab eval run")

    # ---- eval: files and folders
    case("eval --calibrate too short", [*EO, "--quiet", *CAL, short], "--calibrate", "shorter than the window")
    case("eval --calibrate binary", [*EO, *CAL, w / "binary.txt"], "--calibrate", "binary")
    case("eval --calibrate missing", [*EO, *CAL, w / "missing.txt"], "--calibrate", "no such file")
    case("eval --haystack missing", [*E, "--haystack", w / "missing.txt", "--out", w / "new-eval"], "--haystack", "no such file")
    case("eval --haystack empty", [*E, "--haystack", w / "empty.txt", "--out", w / "new-eval"], "--haystack", "empty")
    case("eval --haystack binary", [*E, "--haystack", w / "binary.txt", "--out", w / "new-eval"], "--haystack", "binary")
    case("eval --ppl missing", [*EO, "--ppl", w / "missing.txt"], "--ppl", "no such file")
    case("eval --out a notes file", [*E, "--out", w / "notes.txt"], "--out", "is a file")
    case("eval --out the model folder", [*E, "--out", tiny], "--out", "not an attnlab eval run")
    case("eval --out an eval with other settings", [*E, "--seed", "3", "--out", w / "eval-same-model"], "--out", "other settings", "seed")
    case("eval --out a folder with a broken config.json", [*E, "--out", w / "eval-broken"], "--out", "not an attnlab eval run")
    case("eval --hf a notes file", ["eval", "--hf", w / "notes.txt", "--haystack", "noise", "--out", w / "new-eval"], "notes.txt")
    case("eval --hf a folder without config", ["eval", "--hf", w / "nomodel", "--haystack", "noise", "--out", w / "new-eval"], "no config.json")
    case("eval --hf owner/name not in the cache", ["eval", "--hf", "nobody/nothing-7b", "--haystack", "noise", "--out", w / "new-eval"],
         "nobody/nothing-7b", "hf download")
    case("eval --lengths beyond the context", [*E[:4], "1024", *E[5:], "--out", w / "new-eval"], "--lengths 1024", "512")
    case("eval --plan a folder", [*EO, "--plan", w / "nomodel"], "a folder")
    case("eval --plan n = 0", [*EO, "--plan", w / "plan4-n-0.json"], "field n:")
    case("eval --plan made for another length", [*EO, "--plan", w / "other-model.json"], "--plan", "made for n = 128", "--n 512")
    case("eval --plan of another model", [*EO, "--quiet", "--plan", w / "other-model-512.json"], "another model", "num_layers 3 vs 2")

    # ---- method options
    for spec, needle in (("snapkv:window=4:window=8", "given twice"), ("snapkv:window=4:kernel=3:window=4", "given twice"),
                         ("quest:page=16:page=16", "given twice"), ("snapkv:window", "key=value"), ("snapkv:=4", "key=value"),
                         ("snapkv:colour=red", "colour"), ("snapkv:window=0", "window"), ("snapkv:window=abc", "window"),
                         ("snapkv:kernel=4", "odd"), ("nosuch", "nosuch"), ("attnlab:retrieval_heads=3:retrieval_heads=4", "given twice"),
                         ("attnlab-retrieval:pages=4:mean_pages=5", "mean_pages=5 needs pages >= 5"),
                         ("attnlab:mean_pages=8", "page_score=calibrated chooses mean_pages itself")):
        case(f"eval --method {spec}", [*EO, "--method", spec], needle)

    # ---- plan: methods and the plan fields
    for m in ("snapkv", "quest", "oracle-topk", "snapkv:window=8"):
        case(f"plan --method {m} (no plan file)", ["plan", "--hf", tiny, "--calibrate", text, "--n", "128", "--method", m,
                                                    "--out", w / "new-plan.json"], "--method")
    case("plan --method option given twice", ["plan", "--hf", tiny, "--calibrate", text, "--n", "128", "--method",
                                              "streaming-llm:sinks=4:sinks=8", "--out", w / "new-plan.json"], "given twice")
    case("plan --hf unknown name", ["plan", "--hf", "nosuch-model", "--calibrate", text, "--out", w / "new-plan.json"], "nosuch-model")
    case("plan --calibrate a folder", ["plan", "--hf", tiny, "--calibrate", w / "nomodel", "--out", w / "new-plan.json"], "--calibrate", "is a folder")
    case("plan --calibrate binary", ["plan", "--hf", tiny, "--calibrate", w / "binary.txt", "--out", w / "new-plan.json"], "--calibrate", "binary")
    for name, needle in (("n-none", "field n: required field missing"),
                         ("heads-0", "num_heads"), ("kv-3", "num_kv_heads"), ("kv-text", "num_kv_heads"),
                         ("layers-neg", "num_layers"), ("tail-big", "tail 500"), ("kept-big", "kept 600"), ("kept-no-tail", "kept"),
                         ("slashes-big", "slashes 300"), ("w-big", "w 200 beyond"), ("blocks-neg", "blocks"), ("pages-neg", "pages"), ("page-0", "page")):
        case(f"plan-run plan {name}", [*PR, w / f"plan4-{name}.json"], needle)
    case("plan-run --file a folder", ["plan-run", "--hf", tiny, "--plan", w / "plan.json", "--file", w / "nomodel", "--n", "128"], "--file", "is a folder")
    case("plan-run --file binary", ["plan-run", "--hf", tiny, "--plan", w / "plan.json", "--file", w / "binary.txt", "--n", "128"], "--file", "binary")
    case("plan-run --hf unknown name", ["plan-run", "--hf", "nosuch-model", "--plan", w / "plan.json", "--file", text, "--n", "128"], "nosuch-model")

    # ---- attention --file, heads
    A = ["attention", "--hf", tiny, "--out", w / "new-att"]
    case("attention --file a folder", [*A, "--file", w / "nomodel"], "--file", "is a folder")
    case("attention --hf unknown name --file", ["attention", "--hf", "nosuch-model", "--file", short, "--out", w / "new-att"], "nosuch-model")
    case("attention --hf unknown name, a sentence", ["attention", "--hf", "nosuch-model", "the cat", "--out", w / "new-att"], "nosuch-model", "local")
    case("roles --hf unknown name", ["roles", "--hf", "nosuch-model", "--data", "synthetic"], "nosuch-model")
    case("approximate --hf unknown name", ["approximate", "--hf", "nosuch-model", "--file", short], "nosuch-model")
    case("attention --heads a folder", [*A, "--file", short, "--heads", w / "nomodel"], "--heads", "is a folder")
    case("heads --length beyond the context", ["heads", "--hf", tiny, "--length", "1000", "--out", w / "new-heads"], "--length 1000", "512")
    case("heads --hf owner/name not in the cache", ["heads", "--hf", "nobody/nothing-7b", "--out", w / "new-heads"], "nobody/nothing-7b")
    # ---- the prompt formats (--template, --question, the pass-key tasks), the presets, --quiet
    for flag, v, needle in (("--template", "foo", "--template"), ("--template", "", "--template"), ("--template", "CHAT", "--template"),
                            ("--question", "middle", "--question"), ("--question", "", "--question"),
                            ("--task", "passkey-nope", "--task"), ("--task", "passkey,nosuch", "nosuch"), ("--task", "", "--task"),
                            ("--task", "passkey,passkey", "given twice"), ("--lengths", "512,512", "given twice"),
                            ("--budget", "0.1,0.1", "given twice"), ("--lengths", "32", "--lengths"), ("--lengths", "abc", "--lengths"),
                            ("--budget", "0", "--budget"), ("--budget", "nan", "--budget"), ("--budget", "1.5", "--budget"),
                            ("--depths", "0", "--depths"), ("--samples", "0", "--samples"), ("--max-new", "0", "--max-new"),
                            ("--seed", "-1", "--seed"), ("--calibrate-windows", "0", "--calibrate-windows"), ("--ppl-windows", "0", "--ppl-windows")):
        case(f"eval {flag} {v!r}", [*EO, flag, v], needle)
    for mix, needle in (("passkey:0", "--calibrate-mix"), ("passkey-nope:2", "passkey-nope"), ("passkey:x", "--calibrate-mix"),
                        ("passkey-varied:-1", "--calibrate-mix")):
        case(f"eval --calibrate-mix {mix}", [*EO, *CAL, text, "--calibrate-mix", mix], needle)
    case("eval --calibrate-mix without --calibrate", [*EO, "--calibrate-mix", "passkey:2"], "--calibrate-mix", "--calibrate")
    case("eval --task passkey at a length that cannot hold it", [*E[:4], "64", *E[5:], "--task", "passkey-varied", "--quiet",
                                                                "--out", w / "new-eval"], "--lengths")
    for spec, needle in (("attnlab", "--calibrate"), ("attnlab-key-blocks:blocks=4", "contradicts the preset"),
                         ("attnlab:retrieval_heads=0", "contradicts the preset"), ("attnlab:nosuch=1", "nosuch"),
                         ("attnlab-other-blocks:other_blocks=4:other_blocks=4", "given twice"), ("attnlab:pages=abc", "pages")):
        case(f"eval --method {spec} (a preset)", [*EO, "--method", spec], needle)
    case("plan --method a preset against its value", ["plan", "--hf", tiny, "--calibrate", text, "--n", "128", "--method",
                                                      "attnlab-key-blocks:blocks=2", "--out", w / "new-plan.json"], "contradicts the preset")
    for command in (["eval", *EO[1:]], ["plan", "--hf", tiny, "--calibrate", text, "--out", w / "new-plan.json"],
                    ["plan-run", "--hf", tiny, "--plan", w / "plan.json", "--file", text, "--n", "128"], ["heads", "--hf", tiny, "--out", w / "new-heads"],
                    ["attention", "--hf", tiny, "--file", short, "--out", w / "new-att"]):
        case(f"{command[0]} --quiet=yes", [*command, "--quiet=yes"], "--quiet")
    import torch

    no_cuda = ("cuda",) if not torch.cuda.is_available() else ()   # --device cuda is bad input only where there is none
    for v in ("gpu", "cuda:99", "", "CUDA", "cpu,cuda", "cuda:-1", "tpu", *no_cuda):
        case(f"eval --device {v!r}", [*EO, "--device", v], "--device")
    for command in (["plan", "--hf", tiny, "--calibrate", text, "--n", "128", "--out", w / "new-plan.json"],
                    ["plan-run", "--hf", tiny, "--plan", w / "plan.json", "--file", text, "--n", "128"], ["heads", "--hf", tiny, "--out", w / "new-heads"],
                    ["attention", "--hf", tiny, "--file", short, "--out", w / "new-att"]):
        for v in ("tpu", *no_cuda):
            case(f"{command[0]} --device {v}", [*command, "--device", v], "--device")
    case("eval --quiet with an unknown model", ["eval", "--hf", "nosuch-model", "--quiet", "--haystack", "noise", "--out", w / "new-eval"], "nosuch-model")
    case("eval --quiet with --out a user's folder", [*E, "--quiet", "--out", w / "nomodel"], "--out")
    case("plan --quiet --budget 0", ["plan", "--hf", tiny, "--calibrate", text, "--quiet", "--budget", "0", "--out", w / "new-plan.json"], "--budget")
    case("heads --quiet --length 1000", ["heads", "--hf", tiny, "--quiet", "--length", "1000", "--out", w / "new-heads"], "--length")
    return C


@pytest.fixture(scope="module")
def folders(world):
    """Besides the shared world: broken plans, an eval of another model, one of this model, one with a broken config."""
    from attnlab.llm.plans.plan import Plan

    broken_plans(world)
    Plan.full({"num_layers": 3, "num_heads": 4, "num_kv_heads": 2}, CONTEXT).save(world / "other-model-512.json")
    from dataclasses import asdict

    from attnlab.llm.eval.eval_grid import FORMAT

    from attnlab.llm.eval.eval_settings import EvalSettings

    settings = {"format": FORMAT, **asdict(EvalSettings(model=str(world / "tiny"), lengths=[CONTEXT], depths=1, samples=1, haystack="noise"))}
    for name, cfg in (("eval-other-model", {**settings, "model": "smollm2-135m"}), ("eval-same-model", settings)):
        (world / name).mkdir()
        (world / name / "config.json").write_text(json.dumps(cfg))
        (world / name / "results.jsonl").write_text("")
    (world / "eval-broken").mkdir()
    (world / "eval-broken" / "config.json").write_text("{ not json")
    return world


def test_every_bad_eval_input_is_one_line_exit_2_and_changes_nothing(folders, monkeypatch):
    monkeypatch.chdir(folders)
    monkeypatch.setenv("ATTNLAB_CACHE", str(folders / "cache"))
    table, bad, seconds = refuse_all(folders, cases(folders))
    print_table(table)
    issue = sum(t[0].startswith("issue:") for t in table)
    print(f"{len(table) - len(bad)} of {len(table)} bad inputs refused cleanly ({issue} from the issue, {len(table) - issue} more) "
          f"in {seconds:.1f} s: exit 2, one line, no traceback, no file changed")
    assert not bad, "\n".join(bad)
    assert issue >= 15 and len(table) - issue >= 50


def test_the_eval_with_good_values_succeeds(world, monkeypatch, tmp_path):
    """Positive control: the same eval with good values runs, and continues its own folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    args = ["eval", "--hf", str(world / "tiny"), "--lengths", str(CONTEXT), "--depths", "1", "--samples", "1", "--haystack", "noise",
            "--method", "snapkv:window=8", "--out", str(tmp_path / "ev")]
    for _ in range(2):   # the second run: the folder is its own eval, nothing left to measure
        code, out, err = run(args, {})
        assert code == 0, err
    assert (tmp_path / "ev" / "config.json").is_file()


def test_a_second_eval_on_a_folder_in_use_is_refused_in_one_line_writing_nothing(world, monkeypatch, tmp_path):
    """Two evals on one --out would interleave their rows and overwrite each other's report: while one holds the
    folder (its lock, as a running eval does), another is one line, exit 2, and the folder is left as it was."""
    from attnlab.lock import LOCK_NAME, FolderLock

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "ev"
    args = ["eval", "--hf", str(world / "tiny"), "--lengths", str(CONTEXT), "--depths", "1", "--samples", "1", "--haystack", "noise",
            "--method", "snapkv:window=8", "--out", str(out)]
    with FolderLock(out):                                                            # the first eval, still running
        before = sorted(p.name for p in out.iterdir())
        code, stdout, err = run(args, {})
        assert code == 2 and "in use by another attnlab process" in err and "--out" in err, (code, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert sorted(p.name for p in out.iterdir()) == before == [LOCK_NAME]
    code, _, err = run(args, {})                                                      # the first one done: it runs
    assert code == 0, err
    assert (out / "results.jsonl").is_file() and not (out / LOCK_NAME).exists()

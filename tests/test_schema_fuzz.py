"""The bad-file fuzz of the file schemas: hand-edited plan files, ``heads.json``, an eval folder's ``config.json`` and
``results.jsonl``, each through the real command that reads it.

    attnlab plan-run --plan FILE · attnlab eval --plan FILE · attnlab attention --file TEXT --heads FILE ·
    attnlab eval --out FOLDER (a config.json that cannot continue) · attnlab eval-why --out FOLDER (config, rows)

The rules of ``test_llm_bad_input_fuzz.py`` (whose runner and table it uses): every case must be refused with exit 2,
one line ``attnlab: error: ...`` naming the file and the field (the case's needles), no traceback, and no file under
the work folder written, changed or removed (SHA-256 of every file before and after).  Each is refused before a model
loads.  Positive controls: the same commands on the valid files succeed.  ``pytest -s`` prints the table.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from test_llm_bad_input_fuzz import print_table, refuse_all, run

transformers = pytest.importorskip("transformers")

CONTEXT = 512
TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. "


def plan_doc() -> dict:
    """A valid plan of the tiny model at n = 128: full heads, a band with columns, a retrieval head."""
    import numpy as np

    from attnlab.llm.plans.plan import HeadPlan, Plan
    from attnlab.support import Support

    band = HeadPlan(support=Support(w=8, columns=np.array([0, 1])), dynamic=2)
    voted = HeadPlan(support=Support(w=8, columns=np.array([0])), tail=16, kept=8)
    return Plan([[band, voted, band, HeadPlan.full()]] * 2, 2, "attnlab", 0.5, 128).to_dict()


def heads_doc() -> dict:
    """A valid detectors file of the tiny model (2 layers × 4 heads)."""
    from attnlab.llm.heads.heads_report import heads_document

    scores = {"induction": [[0.1, 0.9, 0.0, 0.2]] * 2, "sink": [[0.6, 0.0, 0.3, 0.1]] * 2}
    return heads_document("tiny", 128, scores, {"induction": 0.4, "sink": 0.5}, {"command": "a test"})


LOST = {"method": "streaming-llm", "budget": 0.5, "task": "niah", "n": CONTEXT, "depth": 0.5, "sample": 0,
        "key": f"streaming-llm|0.5|niah|{CONTEXT}|0.5000|0", "expected": ["1234567"], "answer": " 12",
        "full_answer": " 1234567", "needle": [10, 11], "needle_text": "1234567", "row": "value",
        "query_row": CONTEXT - 1, "predicts": "1", "full_next": "1", "method_next": "2", "first": " ",
        "full_first": " ", "method_first": " ", "heads": [], "plan_differs": [], "summary": "a lost prompt"}


def eval_folder(folder: Path, model: str, config=None, rows=None, lost=None) -> Path:
    """An eval folder of the tiny model (streaming-llm beside full, one prompt, both answered): config.json and
    results.jsonl, each changed by ``config`` / ``rows`` (functions of the valid document); ``lost``: a change of a
    row of lost-prompts.jsonl (an earlier eval-why's), written beside them."""
    from attnlab.llm.eval.eval_grid import answer_key
    from attnlab.llm.eval.eval_settings import EvalSettings
    from attnlab.llm.eval.results_file import FORMAT

    settings = EvalSettings(model=model, lengths=[CONTEXT], depths=1, samples=1, methods=["streaming-llm"],
                            budgets=[0.5], haystack="noise")
    cfg = {"format": FORMAT, **dataclasses.asdict(settings)}
    lines = [{"key": answer_key(m, b, "niah", CONTEXT, 0.5, 0), "kind": "answer", "method": m, "budget": b,
              "task": "niah", "n": CONTEXT, "depth": 0.5, "sample": 0, "score": 1.0, "answer": " 1234567",
              "expected": ["1234567"], "prompt_tokens": CONTEXT} for m, b in (("full", 1.0), ("streaming-llm", 0.5))]
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(edited(cfg, config) if config else cfg))
    text = "".join(json.dumps(r) + "\n" for r in lines)
    (folder / "results.jsonl").write_text(rows(text, lines) if rows else text)
    if lost is not None:
        (folder / "lost-prompts.jsonl").write_text(json.dumps(LOST) + "\n" + json.dumps(edited(LOST, lost)) + "\n")
    return folder


def edited(doc: dict, change) -> dict:
    d = json.loads(json.dumps(doc))
    change(d)
    return d


def at(path: str, value=...):
    """A change of the document: the key at the dotted ``path`` set to ``value`` (deleted without one)."""
    *holder, key = path.split(".")

    def change(d):
        for k in holder:
            d = d[int(k)] if isinstance(d, list) else d[k]
        key_ = int(key) if isinstance(d, list) else key
        if value is ...:
            del d[key_]
        else:
            d[key_] = value
    return change


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The work folder: the tiny model, a text, the valid files and every bad one."""
    import torch

    from char_model_folder import save_with_char_tokenizer

    w = tmp_path_factory.mktemp("schema-fuzz")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT)
    save_with_char_tokenizer(transformers.LlamaForCausalLM(cfg).eval(), w / "tiny")
    (w / "text.txt").write_text((TEXT * 30).strip())
    (w / "plans").mkdir()
    (w / "heads").mkdir()
    (w / "plans" / "good.json").write_text(json.dumps(plan_doc()))
    (w / "heads" / "good.json").write_text(json.dumps(heads_doc()))
    eval_folder(w / "eval-good", str(w / "tiny"))
    return w


def cases(w: Path) -> list[tuple[str, list, dict, tuple]]:
    """(label, argv, environment, needles of the one error line); writes the bad files into ``w``."""
    tiny, text = str(w / "tiny"), str(w / "text.txt")
    C = []

    def case(label, args, *needles):
        C.append((label, [str(a) for a in args], {}, needles))

    # ---- plan files: plan-run and eval --plan
    P = plan_doc()
    plan_cases = [
        ("a head's w deleted (the issue)", at("heads.0.0.w"), "field heads.0.0.w: required field missing"),
        ("a head's columns deleted (the issue)", at("heads.0.0.columns"), "field heads.0.0.columns: required"),
        ("an unknown top-level key (the issue)", at("colour", "red"), "field colour: unknown key"),
        ("method nosuch-method (the issue)", at("method", "nosuch-method"), "field method", "nosuch-method"),
        ("group_vote 1.0 (the issue)", at("group_vote", 1.0), "field group_vote"),
        ("decode_band 8.0 (the issue)", at("decode_band", 8.0), "field decode_band"),
        ("a head's tail deleted", at("heads.0.1.tail"), "field heads.0.1.tail: required"),
        ("a head's dynamic deleted", at("heads.1.0.dynamic"), "field heads.1.0.dynamic: required"),
        ("a head's offset deleted", at("heads.0.0.offset"), "field heads.0.0.offset: required"),
        ("residual 3", at("heads.0.0.residual", 3), "field heads.0.0.residual", "0"),
        ("num_kv_heads deleted", at("num_kv_heads"), "field num_kv_heads: required"),
        ("heads a table, not a list", at("heads", {"0": []}), "field heads"),
        ("a layer of heads a string", at("heads.1", "band"), "field heads.1"),
        ("a head a number", at("heads.0.2", 8), "field heads.0.2", "JSON object"),
        ("budget a string", at("budget", "0.5"), "field budget"),
        ("budget true", at("budget", True), "field budget"),
        ("n a float", at("n", 128.0), "field n"),
        ("n beyond every model", at("n", 10**9), "field n"),
        ("a sliding window 0", at("windows", [0, None]), "field windows"),
        ("a sliding layer's head with columns", at("windows", [16, None]), "field heads.0.0", "sliding layer"),
        ("mean_pages above pages", lambda d: d.update(pages=2, mean_pages=3), "field mean_pages"),
        ("page 2048", at("page", 2048), "field page"),
        ("group_vote 2", at("group_vote", 2), "field group_vote"),
        ("kept without a tail", at("heads.0.1.tail", 0), "field heads.0.1", "kept 8 > 0 only with a tail"),
        ("vote_next without kept", at("heads.0.0.vote_next", 1), "field heads.0.0", "vote_next 1 > 0 only with kept"),
        ("fraction a string", at("fraction", "half"), "field fraction"),
        ("full_heads -1", at("full_heads", -1), "field full_heads"),
        ("meta a list", at("meta", []), "field meta"),
        ("format attnlab-plan/3", at("format", "attnlab-plan/3"), "field format"),
        ("format deleted", at("format"), "field format: required"),
        ("a column 1.0", at("heads.0.0.columns", [0, 1.0]), "field heads.0.0.columns.1"),
        ("a column true", at("heads.0.0.columns", [True]), "field heads.0.0.columns.0"),
        ("blocks beyond their bound", at("heads.0.0.blocks", 5000), "field heads.0.0.blocks"),
        ("slashes beyond their bound", at("heads.0.0.slashes", 20000), "field heads.0.0.slashes"),
        ("a layer with 3 heads", lambda d: d["heads"][1].pop(), "field heads.1", "num_heads is 4"),
        ("the method an empty name", at("method", ""), "field method"),
        ("a dynamic column beyond n", at("heads.0.0.dynamic", 127), "field heads.0.0.dynamic", "n = 128"),
    ]
    for k, (label, change, *needles) in enumerate(plan_cases):
        path = w / "plans" / f"bad-{k}.json"
        path.write_text(json.dumps(edited(P, change)))
        case(f"plan-run: {label}", ["plan-run", "--hf", tiny, "--plan", path, "--file", text, "--n", "128"],
             "--plan", path.name, *needles)
    v1 = edited(P, lambda d: d.update(format="attnlab-plan/1"))
    for name in ("pages", "page", "mean_pages", "decode_band", "group_vote"):
        del v1[name]
    del v1["heads"][0][0]["w"]
    (w / "plans" / "v1-no-w.json").write_text(json.dumps(v1))
    case("plan-run: a version-1 file with a head's w deleted", ["plan-run", "--hf", tiny, "--plan",
         w / "plans" / "v1-no-w.json", "--file", text, "--n", "128"], "field heads.0.0.w: required")
    (w / "plans" / "nan.json").write_text(json.dumps(P).replace('"budget": 0.5', '"budget": NaN'))
    case("plan-run: budget NaN", ["plan-run", "--hf", tiny, "--plan", w / "plans" / "nan.json", "--file", text,
                                  "--n", "128"], "field budget")
    (w / "plans" / "array.json").write_text(json.dumps([P]))
    case("plan-run: a list of plans", ["plan-run", "--hf", tiny, "--plan", w / "plans" / "array.json", "--file", text,
                                       "--n", "128"], "JSON object expected")
    E = ["eval", "--hf", tiny, "--lengths", "128", "--depths", "1", "--samples", "1", "--haystack", "noise",
         "--out", w / "new-eval"]
    for k in (0, 1, 3, 4, 19):
        case(f"eval --plan: {plan_cases[k][0]}", [*E, "--plan", w / "plans" / f"bad-{k}.json"], "--plan",
             *plan_cases[k][2:])

    # ---- heads.json: attention --file --heads (read before the model loads)
    H = heads_doc()
    heads_cases = [
        ("no detectors (a capture's own table)", at("detectors"), "not a head detectors file"),
        ("a detector nosuch", lambda d: d["detectors"].update(nosuch=[[0.1] * 4] * 2), "field detectors.nosuch"),
        ("a score 1.5", at("detectors.sink.0.1", 1.5), "field detectors.sink.0.1"),
        ("a score a string", at("detectors.sink.0.1", "high"), "field detectors.sink.0.1"),
        ("a ragged table", lambda d: d["detectors"]["sink"][1].pop(), "field detectors.sink"),
        ("two detectors of other shapes", at("detectors.sink", [[0.1] * 4]), "field detectors.sink"),
        ("a threshold 0", at("thresholds.sink", 0), "field thresholds.sink"),
        ("a threshold of no detector", lambda d: d["thresholds"].update(retrieval=0.1), "field thresholds.retrieval"),
        ("a named head's layer 99", at("named.0.layer", 99), "field named.0.layer"),
        ("a head reaching its threshold not named", lambda d: d["named"].pop(), "field named", "not named"),
        ("a named head's score not the table's", at("named.0.score", 0.95), "field named.0.score"),
        ("an unknown top-level key", at("colour", "red"), "field colour: unknown key"),
        ("model deleted", at("model"), "field model: required"),
        ("n 0", at("n", 0), "field n"),
        ("format attnlab-heads/2", at("format", "attnlab-heads/2"), "field format"),
        ("thresholds deleted", at("thresholds"), "field thresholds: required"),
        ("named a table", at("named", {}), "field named"),
    ]
    A = ["attention", "--hf", tiny, "--file", text, "--tokens", "128", "--out", w / "new-att"]
    for k, (label, change, *needles) in enumerate(heads_cases):
        path = w / "heads" / f"bad-{k}.json"
        path.write_text(json.dumps(edited(H, change)))
        case(f"attention --heads: {label}", [*A, "--heads", path], "--heads", path.name, *needles)
    capture = {"layer": 0, "head": 1, "layer_type": "full_attention", "role": "positional", "label": "induction",
               "named_by": [{"detector": "induction", "score": 0.9, "threshold": 0.4}], "entropy": 1.2, "far>64": 0.1,
               "reach": 100, "columns": [[0, "T", 0.3]], "w": 8, "num_pos": 1, "entries": 0.1, "positional": 0.5,
               "offset": -1, "sink": 0.3, "sink_token": "T"}
    capture_cases = [   # a capture's heads.json carrying the detectors (attention --file --heads writes one)
        ("a head row without its far>D", at("heads.0.far>64"), "field heads.0", "far>D"),
        ("a head row's column beyond n", at("heads.0.columns", [[999, "T", 0.3]]), "field heads.0.columns"),
        ("a head row's w -2", at("heads.0.w", -2), "field heads.0.w"),
        ("a head row's role deleted", at("heads.0.role"), "field heads.0.role: required"),
    ]
    for k, (label, change, *needles) in enumerate(capture_cases):
        path = w / "heads" / f"capture-{k}.json"
        path.write_text(json.dumps(edited({**H, "heads": [capture], "summary": {}}, change)))
        case(f"attention --heads: a capture's file, {label}", [*A, "--heads", path], "--heads", *needles)
    (w / "heads" / "nan.json").write_text(json.dumps(H).replace("0.6", "NaN", 1))
    case("attention --heads: a score NaN", [*A, "--heads", w / "heads" / "nan.json"], "field detectors.sink.0.0")

    # ---- an eval folder: eval --out (continuing) and eval-why --out
    config_cases = [
        ("seed a string", at("seed", "0"), "field seed"),
        ("a task nosuch", at("tasks", ["nosuch"]), "field tasks"),
        ("a length twice", at("lengths", [CONTEXT, CONTEXT]), "field lengths", "given twice"),
        ("a method nosuch", at("methods", ["nosuch"]), "field methods"),
        ("an unknown key", at("colour", "red"), "field colour: unknown key"),
        ("model deleted", at("model"), "field model: required"),
        ("a budget 2", at("budgets", [2]), "field budgets"),
        ("format another", at("format", "attnlab-eval/9"), "field format"),
        ("depths 0", at("depths", 0), "field depths"),
        ("template CHAT", at("template", "CHAT"), "field template"),
        ("format deleted", at("format"), "field format: required"),
    ]
    why = ["eval-why", "--method", "streaming-llm", "--out"]
    for k, (label, change, *needles) in enumerate(config_cases):
        folder = eval_folder(w / f"eval-config-{k}", tiny, config=change)
        command = why if k % 2 else ["eval", "--hf", tiny, "--lengths", str(CONTEXT), "--depths", "1", "--samples",
                                     "1", "--haystack", "noise", "--method", "streaming-llm", "--budget", "0.5",
                                     "--out"]
        case(f"{command[0]}: config.json {label}", [*command, folder], "config.json", *needles)

    def row(change):
        return lambda text, lines: "".join(json.dumps(edited(r, change) if k == 1 else r) + "\n"
                                           for k, r in enumerate(lines))

    row_cases = [
        ("a score 2", row(at("score", 2.0)), "line 2", "field answer.score"),
        ("a key not its fields'", row(at("sample", 3)), "line 2", "field answer.key"),
        ("a kind nosuch", row(at("kind", "nosuch")), "line 2", "nosuch"),
        ("a depth a string", row(at("depth", "0.5")), "line 2", "field answer.depth"),
        ("an unknown key", row(at("colour", "red")), "line 2", "field answer.colour: unknown key"),
        ("budget deleted", row(at("budget")), "line 2", "field answer.budget: required"),
        ("expected empty", row(at("expected", [])), "line 2", "field answer.expected"),
        ("a row not JSON before the last", lambda text, lines: "{oops\n" + text, "line 1", "not a JSON row"),
        ("a row a list", lambda text, lines: "[1, 2]\n" + text, "line 1", "JSON object"),
    ]
    for k, (label, change, *needles) in enumerate(row_cases):
        folder = eval_folder(w / f"eval-rows-{k}", tiny, rows=change)
        case(f"eval-why: results.jsonl {label}", [*why, folder], "results.jsonl", *needles)
    E2 = ["eval", "--hf", tiny, "--lengths", str(CONTEXT), "--depths", "1", "--samples", "1", "--haystack", "noise",
          "--method", "streaming-llm", "--budget", "0.5", "--out"]
    folder = eval_folder(w / "eval-continue-row", tiny, rows=row(at("score", 2.0)))
    case("eval: continuing a results.jsonl with a score 2", [*E2, folder], "results.jsonl line 2", "field answer.score")
    for k, wall in enumerate(({"started": "yesterday", "seconds": 1.0, "rows": 2, "reuse": True},
                              {"started": "2026-01-05T10:00:00Z", "seconds": -1.0, "rows": 2, "reuse": True},
                              {"started": "2026-01-05T10:00:00Z", "seconds": 1.0, "rows": 2, "reuse": "yes"})):
        folder = eval_folder(w / f"eval-continue-wall-{k}", tiny)
        (folder / "wall.jsonl").write_text(json.dumps(wall) + "\n")
        field = ("started", "seconds", "reuse")[k]
        case(f"eval: continuing a wall.jsonl with a bad {field}", [*E2, folder], "wall.jsonl line 1", f"field {field}")
    lost_cases = [
        ("a key not its fields'", at("sample", 2), "field key"),
        ("a row nosuch", at("row", "middle"), "field row"),
        ("summary deleted", at("summary"), "field summary: required"),
        ("a needle position -1", at("needle", [-1]), "field needle.0"),
    ]
    for k, (label, change, *needles) in enumerate(lost_cases):
        folder = eval_folder(w / f"eval-lost-{k}", tiny, lost=change)
        case(f"eval-why: lost-prompts.jsonl {label}", [*why, folder], "lost-prompts.jsonl line 2", *needles)
    return C


def test_every_bad_file_is_one_line_exit_2_and_changes_nothing(world, monkeypatch):
    monkeypatch.chdir(world)
    monkeypatch.setenv("ATTNLAB_CACHE", str(world / "cache"))
    table, bad, seconds = refuse_all(world, cases(world))
    print_table(table)
    print(f"{len(table) - len(bad)} of {len(table)} bad files refused cleanly in {seconds:.1f} s: exit 2, one line "
          "naming the file and the field, no traceback, no file changed")
    assert not bad, "\n".join(bad)
    assert len(table) >= 50


def test_the_valid_files_pass_the_same_commands(world, monkeypatch, tmp_path):
    """Positive controls: the refusals above are not blanket ones."""
    import shutil

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    tiny, text = str(world / "tiny"), str(world / "text.txt")
    folder = shutil.copytree(world / "eval-good", tmp_path / "ev")
    (folder / "lost-prompts.jsonl").write_text(json.dumps(LOST) + "\n")        # an earlier eval-why's: replaced
    for args in (["plan-run", "--hf", tiny, "--plan", world / "plans" / "good.json", "--file", text, "--n", "128"],
                 ["attention", "--hf", tiny, "--file", text, "--tokens", "128", "--out", tmp_path / "att",
                  "--heads", world / "heads" / "good.json", "--quiet"],
                 ["eval-why", "--method", "streaming-llm", "--out", folder]):
        code, out, err = run([str(a) for a in args], {})
        assert code == 0, (args, err)
    assert (folder / "lost-prompts.jsonl").read_text() == ""        # both answered: no prompt lost

"""What attnlab writes, its schema reads: each format written by its real writer and loaded through its schema.

    plan files      Plan.save of every maker (full, sliding, StreamingLLM, the knapsack, MInference, DuoAttention,
                    every part a head may hold) → attnlab.schemas.plan, and Plan.load gives the plan back
    heads.json      ``attnlab heads`` and ``attnlab attention --file`` (with and without --heads) → schemas.heads_file
    eval folder     ``attnlab eval`` (answer, perplexity and skipped rows) → schemas.eval_config, schemas.result_row

and the one migration of each format (a file older than a field) reads as the writer meant it.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")

TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. " * 40


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random 2-layer Llama (4 query / 2 KV heads) with a one-character tokenizer, and a text."""
    from char_model_folder import tiny_llama_folder

    w = tmp_path_factory.mktemp("writers")
    (w / "text.txt").write_text(TEXT)
    return tiny_llama_folder(w / "tiny"), w / "text.txt"


def test_every_plan_maker_writes_what_the_schema_reads(tmp_path):
    import torch

    from attnlab.llm.plans import baselines
    from attnlab.llm.calibration.statistics import calibrate
    from attnlab.llm.plans.plan import HeadPlan, Plan, model_shape
    from attnlab.llm.plans.selection import choose_plan
    from attnlab.schemas import plan as schema
    from attnlab.support import Support
    from attnlab.llm import methods
    from test_llm_plan import tiny_model
    from test_llm_retrieval_plan import scored_calibration

    model = tiny_model()
    shape = model_shape(model)
    n = 128
    ids = [torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(0))]
    cal = calibrate(model, ids, sorted(set(baselines.minference_candidates(0.2, n))))
    band = HeadPlan(support=Support(w=8, columns=np.array([0, 1])), dynamic=2)
    voted = HeadPlan(support=Support(w=8, columns=np.array([0])), dynamic=1, tail=16, blocks=2, kept=8, vote_next=1)
    lined = HeadPlan(support=Support(w=4, columns=np.array([0])), slashes=3)
    row = [band, voted, lined, HeadPlan.full()]
    plans = {
        "full": Plan.full(shape, n),
        "full, sliding layers": Plan.full({**shape, "windows": [16, None]}, n),
        "streaming-llm": baselines.streaming_llm(shape, 0.3, n),
        "attnlab (the knapsack)": choose_plan(cal, 0.2, table="fit"),
        "minference-mass": baselines.minference(cal, 0.2, "mass"),
        "duo-attention": baselines.duo_attention(cal, 0.2),
        "every part": Plan([row, row], 2, "attnlab-retrieval", 0.4, n, {"made": "by a test"}, pages=4, page=16,
                           mean_pages=2, decode_band=64, group_vote=1),
        "capped to a window": Plan([row, row], 2, "attnlab", 0.4, n, windows=[16, None]),
    }
    scored = scored_calibration()        # retrieval scores: the retrieval method and the parts it composes
    opts = {"retrieval_heads": 2, "tail": 8, "blocks": 2, "tail_keep": 32, "pages": 4}
    for name in ("attnlab-retrieval", "retrieval-tails+key-blocks+voted-cache+read-back"):
        plans[name] = methods.get(name, 0.5, **opts).make_plan(None, scored.n, scored)
    for name, p in plans.items():
        path = p.save(tmp_path / "plan.json")
        assert schema.load(path).format == schema.FORMAT, name
        written = json.loads(path.read_text())                     # the file as JSON has it (tuples as lists)
        assert Plan.load(path).to_dict() == json.loads(json.dumps(p.to_dict())) == written, name


def test_the_heads_files_of_both_writers_are_what_the_schema_reads(tmp_path, tiny, capsys):
    from attnlab.analysis.detector_names import thresholds
    from attnlab.llm.heads.heads_file import read_detector_scores
    from attnlab.llm.heads.heads_report import heads_document, write_heads
    from attnlab.schemas import heads_file as schema
    from attnlab_cli import run_main

    folder, text = tiny
    scores = {"induction": np.array([[0.1, 0.9, np.nan, 0.2]] * 2), "sink": np.array([[0.6, 0.0, 0.3, 1.0]] * 2)}
    write_heads(heads_document("tiny", 160, scores, thresholds(2), {"command": "a test"}), tmp_path / "doc")
    back = read_detector_scores(tmp_path / "doc" / "heads.json", 2, 4)      # a head not scored: null, read as NaN
    written = json.loads((tmp_path / "doc" / "heads.json").read_text())
    assert np.isnan(back.scores["induction"][0, 2]) and written["detectors"]["induction"][0][2] is None
    assert back.named == written["named"] and {x["detector"] for x in back.named} == {"induction", "sink"}
    code, _, err = run_main(["heads", "--hf", str(folder), "--length", "160", "--out", str(tmp_path / "hd"),
                             "--quiet"], capsys)
    assert code in (0, None), err
    det = schema.load(tmp_path / "hd" / "heads.json", detectors=True)
    assert det.format == schema.FORMAT and set(det.detectors) == {"previous-token", "duplicate-token", "induction",
                                                                   "sink", "retrieval"}
    for heads in ([], ["--heads", str(tmp_path / "hd" / "heads.json")]):          # the capture's, bare and with them
        out = tmp_path / f"att{len(heads)}"
        code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text), "--tokens", "256",
                                 "--out", str(out), "--quiet", *heads], capsys)
        assert code in (0, None), err
        cap = schema.load(out / "heads.json")
        assert len(cap.heads) == 2 * 4 and (cap.detectors is not None) == bool(heads)
        assert all(r.far_distance >= 0 and len(r.columns) for r in cap.heads)


def test_an_eval_folder_is_what_its_schemas_read(tmp_path, tiny, capsys):
    from attnlab.llm.eval.eval_settings import EvalSettings
    from attnlab.schemas import eval_config
    from attnlab.schemas.result_row import ROW, WALL, read_rows
    from attnlab_cli import run_main

    folder, text = tiny
    out = tmp_path / "ev"
    code, _, err = run_main(["eval", "--hf", str(folder), "--lengths", "512", "--depths", "2", "--samples", "1",
                             "--haystack", "noise", "--method", "streaming-llm", "--budget", "0.001,0.5",
                             "--ppl", str(text), "--out", str(out), "--quiet"], capsys)
    assert code in (0, None), err
    cfg = eval_config.load(out / "config.json")
    assert cfg.methods == ["streaming-llm"] and cfg.budgets == [0.001, 0.5]
    rows = read_rows(out / "results.jsonl", ROW)
    assert sorted({r["kind"] for r in rows}) == ["answer", "ppl", "skipped"]     # β = 0.001: below its cheapest plan
    assert len(read_rows(out / "wall.jsonl", WALL)) == 1
    # one field of the schema per setting, no more, no fewer: a setting added to the grid is added to its file
    assert set(eval_config.EvalConfig.model_fields) - {"format"} == {f.name for f in dataclasses.fields(EvalSettings)}


def test_a_config_older_than_template_and_question_reads_with_their_defaults(tmp_path):
    from attnlab.llm.eval.eval_settings import EvalSettings
    from attnlab.schemas import eval_config

    cfg = {"format": eval_config.FORMAT, **dataclasses.asdict(EvalSettings(model="m"))}
    for k in eval_config.LATER:
        cfg.pop(k)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    old = eval_config.load(tmp_path / "config.json")
    assert (old.template, old.question) == ("auto", "after")


def test_a_heads_file_older_than_its_format_tag_reads_as_version_1(tmp_path):
    from attnlab.schemas import heads_file as schema

    named = [{"layer": 0, "head": 0, "detector": "sink", "score": 0.5}]
    (tmp_path / "h.json").write_text(json.dumps({"model": "m", "n": 64, "detectors": {"sink": [[0.5, 0.1]]},
                                                 "thresholds": {"sink": 0.5}, "named": named}))
    assert schema.load(tmp_path / "h.json").format == schema.FORMAT


def test_every_committed_record_of_these_formats_loads():
    """docs/records/ (the runs the results document is made from) holds eval folders of every earlier version of the
    writer: each config.json, results.jsonl, wall.jsonl and lost-prompts.jsonl reads through its schema."""
    from pathlib import Path

    from attnlab.schemas import eval_config
    from attnlab.schemas.result_row import LOST, ROW, WALL, read_rows

    records = Path(__file__).resolve().parents[1] / "docs" / "records"
    counts = {}
    for name, read in (("config.json", eval_config.load), ("results.jsonl", lambda p: read_rows(p, ROW)),
                       ("wall.jsonl", lambda p: read_rows(p, WALL)),
                       ("lost-prompts.jsonl", lambda p: read_rows(p, LOST))):
        files = sorted(records.rglob(name))
        for path in files:
            read(path)
        counts[name] = len(files)
    assert counts["config.json"] >= 30 and counts["results.jsonl"] == counts["config.json"], counts

"""The head detectors attnlab ships (``attnlab/heads_shipped/MODEL.json``, ``attnlab.llm.heads.shipped_heads``): each
known model's file loads through the heads schema and covers every (layer, head) of the shape its header states (no
model load); ``ship`` keeps only what the explorer reads; ``attnlab attention --hf M --file T`` draws the shipped file
without ``--heads``, a user's ``--heads`` wins, and the explorer, heads.json and summary.md name the file used (on the
tiny saved Llama of the long-explorer tests, the shipped lookup pointed at a file made for it)."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pytest

from attnlab_cli import run_main

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ the shipped files
@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_the_shipped_file_loads_and_covers_every_head_of_the_model(model):
    from attnlab.analysis.detector_names import DETECTORS
    from attnlab.llm.heads.heads_file import read_detector_scores
    from attnlab.llm.heads.shipped_heads import catalogue, shipped
    from attnlab.llm.models.loading import MODELS
    from attnlab.schemas import heads_file as schema

    path = shipped(model)
    assert path is not None and (model, path) in catalogue()
    assert path.stat().st_size < 300_000                                   # compact: the tables, no maps
    d = schema.load(path, detectors=True)
    L, H = d.meta["num_layers"], d.meta["num_heads"]                       # the header: the model's configuration
    described = re.search(r"(\d+) layers, (\d+) query", MODELS[model].description)
    assert (L, H) == (int(described[1]), int(described[2]))              # the shape attnlab states for the model
    assert list(d.detectors) == list(DETECTORS) and d.model == model
    for name, table in d.detectors.items():                               # every (layer, head) scored
        assert len(table) == L and all(len(row) == H and None not in row for row in table), name
    det = read_detector_scores(path, L, H)
    assert {(x["layer"], x["head"]) for x in det.named} <= {(l, h) for l in range(L) for h in range(H)}
    assert det.named and "induction" in {x["detector"] for x in det.named}
    assert "/" not in d.meta["command"].split("--hf")[0] and "--out" not in d.meta["command"]


def test_the_shipped_files_are_package_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["attnlab"]
    assert "heads_shipped/*.json" in data


def test_no_file_ships_for_a_folder_or_an_unknown_name(tmp_path):
    from attnlab.llm.heads.shipped_heads import shipped

    assert shipped(tmp_path) is None and shipped("gpt2") is None


# ------------------------------------------------------------------------------------------ ship, the CLI
from tests.test_long_explorer_cli import folder, text_file  # noqa: E402,F401  (the tiny model and its long text)


def _ship_for_tiny(tmp_path, folder, capsys, monkeypatch) -> Path:
    """`attnlab heads --hf TINY`, its file shipped as if the tiny model were smollm2-135m (its configuration in a
    model cache of its own)."""
    from attnlab.llm.heads.shipped_heads import ship

    out = tmp_path / "h"
    code, _, err = run_main(["heads", "--hf", str(folder), "--length", "64", "--samples", "1",
                             "--detectors", "previous-token,induction,sink", "--out", str(out), "--quiet"], capsys)
    assert code in (0, None), err
    doc = json.loads((out / "heads.json").read_text())
    doc["model"] = "smollm2-135m"
    doc["thresholds"]["previous-token"] = 0.01                            # some head named, whatever the weights
    from attnlab.analysis.head_detectors import named_heads

    doc["named"] = named_heads({k: np.array(v, float) for k, v in doc["detectors"].items()}, doc["thresholds"])
    (out / "heads.json").write_text(json.dumps(doc))
    cache = tmp_path / "cache"
    (cache / "models" / "smollm2-135m").mkdir(parents=True)
    shutil.copy(folder / "config.json", cache / "models" / "smollm2-135m" / "config.json")
    monkeypatch.setenv("ATTNLAB_CACHE", str(cache))
    return ship(out / "heads.json", "smollm2-135m", folder=tmp_path / "shipped")


def test_ship_keeps_what_the_explorer_reads(tmp_path, folder, capsys, monkeypatch):
    from attnlab.errors import UserError
    from attnlab.llm.heads.shipped_heads import ship
    from attnlab.schemas import heads_file as schema

    path = _ship_for_tiny(tmp_path, folder, capsys, monkeypatch)
    doc = json.loads(path.read_text())
    assert set(doc) == {"format", "model", "n", "detectors", "thresholds", "named", "meta"}
    assert doc["meta"]["num_layers"] == 1 and doc["meta"]["num_heads"] == 2 and doc["named"]
    assert "--out" not in doc["meta"]["command"] and "--quiet" not in doc["meta"]["command"]
    assert "--length 64" in doc["meta"]["command"]
    schema.load(path, detectors=True)
    with pytest.raises(UserError, match="made for 'smollm2-135m', not 'gemma3-270m'"):
        ship(path, "gemma3-270m", folder=tmp_path / "x")
    with pytest.raises(UserError, match="not a known model"):
        ship(path, "tiny", folder=tmp_path / "x")


def _payload(html_path) -> dict:
    from tests.test_long_explorer_cli import payload

    return payload(html_path)


def test_attention_draws_the_shipped_detectors_and_names_the_file(tmp_path, folder, text_file, capsys, monkeypatch):
    from attnlab.llm.heads import shipped_heads

    path = _ship_for_tiny(tmp_path, folder, capsys, monkeypatch)
    monkeypatch.setattr(shipped_heads, "shipped", lambda model: path if str(model) == str(folder) else None)
    out = tmp_path / "out"
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text_file), "--out", str(out),
                             "--quiet"], capsys)
    assert code in (0, None), err
    assert "the detectors attnlab ships" in err and "--heads FILE" in err
    p = _payload(out / "explorer.html")
    shipped_doc = json.loads(path.read_text())
    assert p["detectors"] == sorted(shipped_doc["detectors"])
    assert p["detectors_file"] == f"{path.name} (shipped with attnlab)"
    assert p["scores"]["det:previous-token"]["values"] == shipped_doc["detectors"]["previous-token"]
    named = {(x["layer"], x["head"]) for x in shipped_doc["named"] if x["detector"] == "previous-token"}
    for l, h in named:                           # a head previous-token names and no earlier detector: its label
        if not any(x["detector"] == "induction" and (x["layer"], x["head"]) == (l, h) for x in shipped_doc["named"]):
            assert p["heads"][l][h]["label"] == "previous-token"
    heads = json.loads((out / "heads.json").read_text())
    assert heads["meta"]["detectors_file"] == p["detectors_file"] and heads["detectors"] == shipped_doc["detectors"]
    assert f"head detectors: {path.name} (shipped with attnlab)" in (out / "summary.md").read_text()
    # redrawn from the saved capture: the file named again (heads.json beside it)
    again = tmp_path / "again"
    maps = out / "long-attention.safetensors"
    code, _, err = run_main(["attention", "--maps", str(maps), "--out", str(again)], capsys)
    assert code in (0, None), err
    assert _payload(again / "explorer.html")["detectors_file"] == p["detectors_file"]
    # the user's --heads wins, and is the file named
    from tests.test_long_explorer_cli import heads_file

    mine = heads_file(tmp_path / "mine.json")
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text_file), "--out", str(tmp_path / "o2"),
                             "--heads", str(mine), "--quiet"], capsys)
    assert code in (0, None), err
    assert "ships" not in err
    q = _payload(tmp_path / "o2" / "explorer.html")
    assert q["detectors_file"] == str(mine) and q["scores"]["det:induction"]["values"] == [[0.1, 0.9]]
    assert "det:sink" not in q["scores"]


def test_no_shipped_file_no_detectors(tmp_path, folder, text_file, capsys):
    out = tmp_path / "out"
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text_file), "--out", str(out),
                             "--quiet"], capsys)
    assert code in (0, None), err
    p = _payload(out / "explorer.html")
    assert p["detectors"] == [] and p["detectors_file"] is None and "ships" not in err


def test_a_capture_row_of_a_head_no_grid_point_fits_reads(tmp_path):
    """``choose`` gives w = num_pos = −1 to a head no (w, num_pos) of the grid fits; the capture's heads.json writes it
    and ``attention --maps`` reads that file beside the capture (SmolLM2 at 8K has 20 such heads)."""
    from attnlab.schemas import heads_file as schema

    row = {"layer": 0, "head": 0, "layer_type": "full_attention", "role": "other", "label": "other", "named_by": [],
           "entropy": 1.2, "far>64": 0.1, "reach": 100, "columns": [[0, "T", 0.3]], "w": -1, "num_pos": -1,
           "entries": None, "positional": 0.5, "offset": -1, "sink": 0.3, "sink_token": "T"}
    path = tmp_path / "heads.json"
    path.write_text(json.dumps({"format": "attnlab-heads/1", "model": "m", "n": 128, "heads": [row], "summary": {}}))
    assert schema.load(path).heads[0].num_pos == -1
    path.write_text(json.dumps({"model": "m", "n": 128, "heads": [{**row, "num_pos": -2}], "summary": {}}))
    from attnlab.errors import UserError

    with pytest.raises(UserError, match="num_pos"):
        schema.load(path)

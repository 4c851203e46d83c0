"""`attnlab attention|roles|approximate --hf MODEL --file TEXT` and `attnlab models` on a tiny saved Llama."""

from __future__ import annotations

import json

import pytest

from attnlab_cli import run_main
from tests.test_llm_bad_input import tiny_folder

pytest.importorskip("transformers")


@pytest.fixture
def text_file(tmp_path):
    from tests.test_llm_stream import random_text

    p = tmp_path / "long.txt"
    p.write_text(random_text(600, seed=3))
    return p


def test_attention_long_writes_statistics_overview_and_window(tmp_path, text_file, capsys):
    folder = tiny_folder(tmp_path, tokenizer=True)
    out = tmp_path / "out"
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text_file), "--rows", "100:140", "--out", str(out)], capsys)
    assert code in (0, None), err
    for name in ("long-attention.safetensors", "summary.md", "heads.json", "band-profiles.png", "pooled/grid.png",
                 "explorer.html", "window/grid.png"):
        assert (out / name).is_file(), name
    heads = json.loads((out / "heads.json").read_text())
    assert heads["summary"]["tokens"] == 601 and len(heads["heads"]) == 2
    from attnlab.llm.heads.long_capture import LongAttention

    res = LongAttention.load(out / "long-attention.safetensors")
    assert res.window == (100, 140) and res.window_maps.shape == (1, 2, 40, 40)
    assert res.pooled.shape == (1, 2, 201, 201)  # auto pool: ⌈601 / 256⌉ = 3 tokens per group
    assert "peak memory" in err


def test_roles_and_approximate_long(tmp_path, text_file, capsys):
    folder = tiny_folder(tmp_path, tokenizer=True)
    from typer.testing import CliRunner

    from attnlab.cli import app

    r = CliRunner().invoke(app, ["roles", "--hf", str(folder), "--file", str(text_file), "--json"])
    assert r.exit_code == 0, r.output
    roles = json.loads(r.stdout)
    assert [(x["layer"], x["head"]) for x in roles] == [(0, 0), (0, 1)]
    r = CliRunner().invoke(app, ["approximate", "--hf", str(folder), "--file", str(text_file), "--w", "8", "--num-pos", "4", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["w"] == 8 and all(0 <= h["mass_captured"] <= 1 for h in data["heads"])
    assert "share needing more than band + 4 columns" in data["summary"]


def test_models_list(capsys):
    from typer.testing import CliRunner

    from attnlab.cli import app

    r = CliRunner().invoke(app, ["models", "list"])
    assert r.exit_code == 0 and "smollm2-135m" in r.stdout and "gemma3-270m" in r.stdout

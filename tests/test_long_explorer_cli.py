"""`attnlab attention --file ... --heads/--plan/--rows` and `--maps OUT/long-attention.safetensors`: the explorer's inputs
and their bad forms (one line, exit 2, nothing written), on a tiny saved Llama (1 layer, 2 heads, 1 KV head)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnlab_cli import run_main
from tests.test_llm_bad_input import check_one_line, tiny_folder

pytest.importorskip("transformers")

N = 601  # tokens of the text below: <s> + 600 words


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_folder(tmp_path_factory.mktemp("tiny"), tokenizer=True)


@pytest.fixture
def text_file(tmp_path):
    from tests.test_llm_stream import random_text

    p = tmp_path / "long.txt"
    p.write_text(random_text(600, seed=3))
    return p


def plan_file(path, num_layers=1, num_heads=2, n=N):
    from attnlab.llm.plans.plan import HeadPlan, Plan
    from attnlab.support import Support

    shape = {"num_layers": num_layers, "num_heads": num_heads, "num_kv_heads": 1}
    head = HeadPlan(support=Support(w=8, columns=np.array([0, 3])), dynamic=1)
    Plan.uniform(shape, head, "attnlab", 0.5, n).save(path)
    return path


def heads_file(path, L=1, H=2, extra=None):
    d = {"model": "tiny", "n": 256, "detectors": {"induction": [[0.1, 0.9]] * L if H == 2 else [[0.1] * H] * L,
                                                  "previous-token": [[0.8, 0.0]] * L if H == 2 else [[0.5] * H] * L},
         "thresholds": {"induction": 0.4},   # named: every head whose score reaches its detector's threshold
         "named": [{"layer": l, "head": 1, "detector": "induction", "score": 0.9} for l in range(L)] if H == 2 else []}
    d.update(extra or {})
    path.write_text(json.dumps(d))
    return path


def payload(html_path) -> dict:
    text = html_path.read_text()
    start = text.index('<script id="attnlab-data" type="application/json">') + len('<script id="attnlab-data" type="application/json">')
    return json.loads(text[start : text.index("</script>", start)].replace("<\\/", "</"))


def test_capture_with_heads_and_plan_then_redraw_from_maps(tmp_path, folder, text_file, capsys):
    out = tmp_path / "out"
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text_file), "--out", str(out),
                             "--heads", str(heads_file(tmp_path / "det.json")), "--plan", str(plan_file(tmp_path / "plan.json"))], capsys)
    assert code in (0, None), err
    p = payload(out / "explorer.html")
    assert p["n"] == N and p["window"] == [236, 364]  # the middle 128 rows by default
    assert p["scores"]["det:induction"]["values"] == [[0.1, 0.9]] and p["named"][0]["head"] == 1
    assert p["heads"][0][1]["plan"] == {"w": 8, "columns": [0, 3], "dynamic": 1, "full": False}
    assert p["heads"][0][0]["role"] and len(p["tile_pos"][0][0]) == 4
    assert (out / "explorer.html").stat().st_size < 2_000_000
    # the saved capture drawn again, the detectors file found beside it (DIR/heads.json with 'detectors')
    heads_file(out / "heads.json", extra={"detectors": {"sink": [[0.3, 0.2]]}, "thresholds": {"sink": 0.5},
                                          "named": []})
    again = tmp_path / "again"
    code, _, err = run_main(["attention", "--maps", str(out / "long-attention.safetensors"), "--out", str(again)], capsys)
    assert code in (0, None), err
    q = payload(again / "explorer.html")
    assert q["scores"]["det:sink"]["values"] == [[0.3, 0.2]] and q["plan"] is None
    assert q["blobs"]["pooled"] == p["blobs"]["pooled"]
    code, _, err = run_main(["attention", "--maps", str(out / "long-attention.safetensors"), "--rows", "0:10", "--out", str(tmp_path / "x")], capsys)
    check_one_line(code, err, "--maps draws a saved capture", "--rows")
    assert not (tmp_path / "x").exists()


def test_without_detectors_the_grid_has_the_capture_statistics(tmp_path, folder, text_file, capsys):
    out = tmp_path / "out"
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text_file), "--out", str(out)], capsys)
    assert code in (0, None), err
    p = payload(out / "explorer.html")
    assert {"sink", "band", "w", "far", "entropy", "positional"} <= set(p["scores"]) and not any(k.startswith("det:") for k in p["scores"])
    assert all(v is not None for row in p["scores"]["sink"]["values"] for v in row)
    assert all(h["role"] for row in p["heads"] for h in row)


@pytest.mark.parametrize("case, needles", [
    ("rows-outside", ["--rows 500:700", "outside the input", "601 tokens"]),
    ("plan-model", ["--plan", "made for another model", "num_layers 2 vs 1"]),
    ("plan-length", ["--plan", "made for 1000 tokens", "601"]),
    ("plan-tokens", ["--plan", "made for 601 tokens", "--tokens 300"]),
    ("heads-shape", ["--heads", "detector 'induction' has 1 layers × 3 heads", "1 × 2"]),
    ("heads-not-detectors", ["--heads", "not a head detectors file"]),
    ("heads-missing", ["--heads", "no such file"]),
    ("heads-without-file", ["--heads and --plan draw on a long input's explorer"]),
])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, folder, text_file, capsys, case, needles):
    out = tmp_path / "out"
    base = ["attention", "--hf", str(folder), "--file", str(text_file), "--out", str(out)]
    args = {
        "rows-outside": lambda: base + ["--rows", "500:700"],
        "plan-model": lambda: base + ["--plan", str(plan_file(tmp_path / "p.json", num_layers=2))],
        "plan-length": lambda: base + ["--plan", str(plan_file(tmp_path / "p.json", n=1000))],
        "plan-tokens": lambda: base + ["--tokens", "300", "--plan", str(plan_file(tmp_path / "p.json"))],
        "heads-shape": lambda: base + ["--heads", str(heads_file(tmp_path / "h.json", H=3))],
        "heads-not-detectors": lambda: base + ["--heads", str(tmp_path / "h.json")],
        "heads-missing": lambda: base + ["--heads", str(tmp_path / "none.json")],
        "heads-without-file": lambda: ["attention", "--hf", str(folder), "the king", "--out", str(out), "--heads", str(heads_file(tmp_path / "h.json"))],
    }[case]()
    if case == "heads-not-detectors":
        (tmp_path / "h.json").write_text(json.dumps({"summary": {}, "heads": []}))
    code, _, err = run_main(args, capsys)
    check_one_line(code, err, *needles)
    assert not out.exists()


def test_log_bytes_round_trip():
    from attnlab.viz.log_bytes import decode_log_bytes, encode_log_bytes

    x = np.array([[0.0, 1e-9, 1e-8, 3.3e-5], [0.5, 1.0, 0.25, 0.0123]])
    y = decode_log_bytes(encode_log_bytes(x))
    assert y[0, 0] == 0 and y[0, 1] == 0  # zero, and below the floor 1e-8
    nz = x >= 1e-8
    assert np.all(np.abs(y[nz] / x[nz] - 1) <= 10 ** (8 / 508) - 1 + 1e-12)


def test_the_file_stays_under_its_limit_by_pooling_the_overview(tmp_path):
    from attnlab.llm.heads.long_capture import capture_long
    from attnlab.viz.long_explorer import write_long_explorer
    from tests.test_llm_stream import random_text, tiny, word_tokenizer

    res = capture_long(tiny("llama"), random_text(1023, seed=2), tokenizer=word_tokenizer(), pool=4)  # 256 × 256 groups
    full = write_long_explorer(res, tmp_path / "full.html")
    limit = full.stat().st_size - 1
    small = write_long_explorer(res, tmp_path / "small.html", max_bytes=limit)
    assert small.stat().st_size <= limit
    p, q = payload(full), payload(small)
    assert p["pool"] == 4 and q["pool"] == 8 and q["blobs"]["pooled"]["shape"] == [2, 4, 128, 128]
    assert q["blobs"]["tiles"] == p["blobs"]["tiles"]  # the zoom stays exact


def test_the_capture_heads_json_is_the_detectors_format(tmp_path, folder, text_file, capsys):
    """One heads.json format: the capture's carries the detectors given with --heads and each head's label, so that
    `attnlab attention --maps` draws them again without --heads."""
    from attnlab.llm.heads.heads_file import read_detector_scores

    out = tmp_path / "out"
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text_file), "--out", str(out),
                             "--heads", str(heads_file(tmp_path / "det.json"))], capsys)
    assert code in (0, None), err
    doc = json.loads((out / "heads.json").read_text())
    assert doc["model"] and doc["n"] == N and doc["detectors_n"] == 256
    assert doc["detectors"]["induction"] == [[0.1, 0.9]] and doc["thresholds"] == {"induction": 0.4}
    rows = {(r["layer"], r["head"]): r for r in doc["heads"]}
    assert rows[0, 1]["label"] == "induction" and rows[0, 1]["named_by"] == [{"detector": "induction", "score": 0.9, "threshold": 0.4}]
    assert rows[0, 0]["label"] == rows[0, 0]["role"] and rows[0, 0]["named_by"] == []  # previous-token has no threshold here
    det = read_detector_scores(out / "heads.json", 1, 2)
    assert det.scores["induction"].tolist() == [[0.1, 0.9]]
    p = payload(out / "explorer.html")
    assert p["heads"][0][1]["label"] == "induction" and p["detectors"] == ["induction", "previous-token"]
    again = tmp_path / "again"
    code, _, err = run_main(["attention", "--maps", str(out / "long-attention.safetensors"), "--out", str(again)], capsys)
    assert code in (0, None), err
    q = payload(again / "explorer.html")
    assert q["scores"]["det:induction"]["values"] == [[0.1, 0.9]] and q["heads"][0][1]["label"] == "induction"
    # without --heads: the capture's own table only, which is no detectors file
    bare = tmp_path / "bare"
    code, _, err = run_main(["attention", "--hf", str(folder), "--file", str(text_file), "--out", str(bare)], capsys)
    assert code in (0, None), err
    assert "detectors" not in json.loads((bare / "heads.json").read_text())
    code, _, err = run_main(["attention", "--maps", str(bare / "long-attention.safetensors"), "--out", str(tmp_path / "b2"),
                             "--heads", str(bare / "heads.json")], capsys)
    check_one_line(code, err, "--heads", "not a head detectors file")


def test_the_capture_file_keeps_statistics_float32_and_maps_as_the_page_shows_them(tmp_path):
    """The statistics at token resolution in float32 (the profile's causal half), the maps as log bytes (±3.7 %);
    and a file of the earlier layout (float64 profile, float32 maps) still loads."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    from attnlab.llm.heads.long_capture import LongAttention, capture_long
    from tests.test_llm_stream import random_text, tiny, word_tokenizer

    res = capture_long(tiny("llama"), random_text(1023, seed=2), tokenizer=word_tokenizer(), pool=4, rows=(500, 564))
    L, H, n = res.column.shape
    path = res.save(tmp_path / "long.safetensors")
    with safe_open(str(path), framework="numpy") as f:
        kinds = {k: (f.get_tensor(k).dtype.name, f.get_tensor(k).shape) for k in f.keys()}
    assert kinds["profile.causal"] == ("float32", (L, H, n)) and kinds["column"] == ("float32", (L, H, n))
    assert {"pooled.log8", "window_maps.log8", "tiles.log8"} <= set(kinds) and "pooled" not in kinds
    old = 8 * L * H * (3 * n - 1) + 4 * (res.pooled.size + res.window_maps.size + res.tiles.size)  # float64 stats, float32 maps
    print(f"capture file: {path.stat().st_size} bytes, the earlier layout {old} (+ fit)")
    assert path.stat().st_size < 0.5 * old
    back = LongAttention.load(path)
    np.testing.assert_allclose(back.profile, res.profile, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(back.column, res.column, rtol=1e-6)
    for name in ("pooled", "window_maps", "tiles"):
        x, y = getattr(res, name), getattr(back, name)
        big = x >= 1e-8
        assert np.all(np.abs(y[big] / x[big] - 1) <= 10 ** (8 / 508) - 1 + 1e-6) and np.all(y[~big] == 0), name
    assert back.roles == res.roles and np.array_equal(back.tile_pos, res.tile_pos)
    # the earlier layout
    with safe_open(str(path), framework="numpy") as f:
        meta = json.loads(f.metadata()["json"])
        arrays = {k: f.get_tensor(k) for k in f.keys() if not k.endswith(".log8") and k != "profile.causal"}
    meta.pop("maps")
    arrays.update(profile=res.profile, column=res.column, pooled=res.pooled.astype(np.float32),
                  window_maps=res.window_maps.astype(np.float32), tiles=res.tiles.astype(np.float32))
    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(tmp_path / "old.safetensors"),
              metadata={"format": "attnlab.long_attention", "json": json.dumps(meta)})
    was = LongAttention.load(tmp_path / "old.safetensors")
    np.testing.assert_array_equal(was.profile, res.profile)
    np.testing.assert_array_equal(was.pooled, res.pooled.astype(np.float32))

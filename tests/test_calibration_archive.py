"""Compact calibration archives: the plan made from one is the plan made from the full calibration; the shipped ones
load, are small, and are read by ``attnlab eval`` without ``--calibrate``; a hand-edited one is refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnlab.errors import UserError
from attnlab.llm import methods

ROOT = Path(__file__).resolve().parents[1]
# the default's configuration, its retrieval heads cut to fit the tiny model's 8 heads (attnlab asks for 32)
DEFAULT_TINY = ("attnlab-retrieval:retrieval_heads=2:tail=8:blocks=2:other_blocks=1:tail_keep=16:pages=4"
                ":page_score=calibrated")
SPECS = [DEFAULT_TINY, "minference"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(model, full calibration, archive path, what write_compact did) of the tiny Llama at n = 256."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    from attnlab.llm.calibration.build import build_calibration
    from attnlab.llm.calibration.proof import write_compact
    from tests.char_model_folder import tiny_llama_folder

    tmp = tmp_path_factory.mktemp("archive")
    folder = tiny_llama_folder(tmp / "m")
    model, tok = LlamaForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    text = tmp / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 80 + "\n")
    cal = None
    for spec in SPECS:   # in order, each adding what it lacks (attnlab calibrate)
        base, _, rest = spec.partition(":")
        opts = dict(kv.split("=") for kv in rest.split(":")) if rest else {}
        cal, _ = build_calibration(model, tok, [methods.get(base, 0.1, **opts)], 256, text, 1, cal=cal)
    path = tmp / "tiny-256.safetensors"
    done = write_compact(path, cal, model, {"model": "tiny", "text": "t.txt", "text_windows": 1, "mix": None,
                                            "methods": SPECS})
    return model, cal, path, done


def _prepared(spec, budget, model, cal):
    from attnlab.llm.calibration.build import method_of

    m = method_of(spec, budget)
    m.prepare(model, cal.n, cal)
    return m


def test_the_plan_from_the_compact_archive_is_the_plan_from_the_full_calibration(made):
    from attnlab.llm.calibration.archive import load_calibration
    from attnlab.llm.calibration.proof import plan_of

    model, full, path, done = made
    compact = load_calibration(path)
    assert done["dtype"] in ("float16", "float32")               # smaller than the full form's float64
    kept = {"err", "resid", "out_scale", "retrieval", "page_ranking", "pattern_recall", "windows"}
    assert set(done["tables"]) <= kept
    proved = {spec: [b for s, b in done["proved"] if s == spec] for spec in SPECS}
    assert len(proved[DEFAULT_TINY]) >= 3 and proved["minference"] == [0.1], done["proved"]
    for spec, budget in done["proved"]:   # made again here, from both forms: every head's support the same
        a, b = _prepared(spec, budget, model, full), _prepared(spec, budget, model, compact)
        assert plan_of(a) == plan_of(b), (spec, budget)
        if spec == DEFAULT_TINY:
            heads = [[[h.to_dict() for h in row] for row in m.plan.heads] for m in (a, b)]
            assert heads[0] == heads[1]
            assert a.plan.fraction(256) == b.plan.fraction(256) <= budget
    for name in ("retrieval", "page_ranking", "resid", "out_scale"):   # the small tables: float64, exact
        assert np.array_equal(getattr(compact, name), getattr(full, name)), name


def test_a_table_the_archive_does_not_keep_is_refused_naming_it(made):
    from attnlab.llm.calibration.archive import read_compact
    from attnlab.llm.plans.selection import choose_plan

    _, _, path, _ = made
    compact = read_compact(path)
    with pytest.raises(UserError, match="holds no table 'fit'") as e:
        choose_plan(compact, 0.3, table="fit")
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def _rewrite(path, out, header=None, tables=None, drop=()):
    """A copy of the archive ``path`` at ``out`` with its header (a dict) or tables changed, as a hand would."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(path), "np") as f:
        meta = json.loads(f.metadata()["attnlab"])
        arrays = {k: f.get_tensor(k) for k in f.keys() if k not in drop}
    if header is not None:
        meta = header(meta)
    arrays.update(tables(arrays) if tables else {})
    save_file(arrays, str(out), metadata={"attnlab": meta if isinstance(meta, str) else json.dumps(meta)})
    return out


def _set(key, value):
    return lambda h: {**h, key: value}


def _without(key):
    return lambda h: {k: v for k, v in h.items() if k != key}


MUTATIONS = [   # (id, header change, table change, tables dropped, the field the message names, a word of the rule)
    ("n-too-short", _set("n", 100), None, (), "w_grid", "n - 1"),
    ("n-text", _set("n", "256"), None, (), "field n", "integer"),
    ("extra-key", _set("note", "x"), None, (), "field note", "unknown key"),
    ("missing-format", _without("format"), None, (), "field format", "required"),
    ("other-format", _set("format", "attnlab-calibration/0"), None, (), "field format", "attnlab-calibration/1"),
    ("unknown-method", _set("methods", ["nosuch"]), None, (), "field methods", "not a registered"),
    ("proved-not-made", _set("proved", [{"method": "full", "budget": 0.1}]), None, (), "proved", "not one of methods"),
    ("budget-out", _set("proved", [{"method": "minference", "budget": 1.5}]), None, (), "budget", "less than or equal"),
    ("heads-kv", _set("num_kv_heads", 3), None, (), "num_kv_heads", "multiple"),
    ("grid-order", _set("w_grid", [8, 0]), None, (), "field w_grid", "increasing"),
    ("layers", _set("num_layers", 3), None, (), "field", "shape"),
    ("not-json", lambda h: "{not json", None, (), "header", "not JSON"),
    ("err-shape", None, lambda t: {"err": t["err"][:, :, :1]}, (), "field err", "shape"),
    ("err-nan", None, lambda t: {"err": np.where(t["err"] == t["err"].max(), np.nan, t["err"]).astype(t["err"].dtype)},
     (), "field err", "non-finite"),
    ("err-negative", None, lambda t: {"err": -t["err"]}, (), "field err", "negative"),
    ("windows-half", None, lambda t: {"windows": t["windows"] / 2 + 0.25}, (), "field windows", "whole counts"),
    ("extra-table", None, lambda t: {"weights": np.zeros(3)}, (), "field weights", "unknown table"),
    ("int-table", None, lambda t: {"resid": t["resid"].astype(np.int64)}, (), "field resid", "dtype"),
    ("no-windows", None, None, ("windows",), "field windows", "required"),
]


@pytest.mark.parametrize("case", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_hand_edited_archive_is_refused_naming_the_file_the_field_and_the_rule(made, tmp_path, case):
    from attnlab.llm.methods import is_registered
    from attnlab.llm.calibration.archive import load_calibration

    _, _, path, _ = made
    _, header, tables, drop, field, rule = case
    bad = _rewrite(path, tmp_path / "bad.safetensors", header, tables, drop)
    with pytest.raises(UserError) as e:
        load_calibration(bad, known_method=is_registered)   # as eval and eval-why read it
    msg = str(e.value)
    assert str(bad) in msg and field in msg and rule in msg and "\n" not in msg, msg


@pytest.mark.parametrize("content", [b"", b"not a safetensors file", b"\xff" * 64])
def test_a_file_that_is_no_archive_is_one_line(tmp_path, content):
    from attnlab.llm.calibration.archive import load_calibration

    bad = tmp_path / "c.safetensors"
    bad.write_bytes(content)
    with pytest.raises(UserError, match="not a calibration archive") as e:
        load_calibration(bad)
    assert str(bad) in str(e.value)
    with pytest.raises(UserError, match="no such calibration archive"):
        load_calibration(tmp_path / "missing.safetensors")
    with pytest.raises(UserError, match="a folder"):
        load_calibration(tmp_path)


def test_the_cli_refuses_a_broken_archive_in_one_line_exit_2(made, tmp_path):
    _, _, path, _ = made
    bad = _rewrite(path, tmp_path / "bad.safetensors", tables=lambda t: {"err": -t["err"]})
    before = bad.read_bytes()
    r = subprocess.run([sys.executable, "-m", "attnlab", "calibrations", str(bad)], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("attnlab: error: ") and "field err" in r.stderr and str(bad) in r.stderr
    assert bad.read_bytes() == before
    ok = subprocess.run([sys.executable, "-m", "attnlab", "calibrations", str(path)], capture_output=True, text=True,
                        cwd=ROOT)
    assert ok.returncode == 0 and "tiny at n = 256" in ok.stdout, ok.stderr


def test_the_shipped_archives_load_and_are_small():
    from attnlab.llm.models.loading import MODELS
    from attnlab.llm.calibration.archive import load_calibration
    from attnlab.llm.calibration.shipped import catalogue

    shipped = catalogue()
    assert ("smollm2-135m", 2048) in [(m, n) for m, n, _ in shipped]       # the README's first LLM command's
    for model, n, path in shipped:
        assert path.stat().st_size <= 2 * 2**20, path                       # no file over 2 MB
        cal = load_calibration(path)
        assert model in MODELS and cal.header.model == model and cal.n == n, path
        assert "attnlab" in cal.header.methods and any(p.method == "attnlab" for p in cal.header.proved), path
    assert sum(p.stat().st_size for _, _, p in shipped) <= 8 * 2**20        # a few MB for all of them


def test_eval_reads_the_shipped_calibration_when_not_given_one(tmp_path):
    from attnlab.llm.eval.eval_grid import _calibration
    from attnlab.llm.eval.eval_settings import EvalSettings, check_settings
    from attnlab.llm.calibration.shipped import shipped

    path = shipped("smollm2-135m", 2048)
    settings = EvalSettings(model="smollm2-135m", lengths=[2048], methods=["attnlab"], budgets=[0.1], haystack="noise")
    checked = check_settings(settings, None)                                 # no --calibrate: the shipped one serves
    m = methods.get("attnlab", 0.1)
    cal = _calibration(None, None, checked, tmp_path, 2048, [m])             # read before: no model, no file read
    assert cal.source == str(path) and not list(tmp_path.iterdir())         # read, nothing written
    plan = m.make_plan(None, 2048, cal)
    assert 0.09 < plan.fraction(2048) <= 0.1 and plan.pages == 16
    for other, needle in ((EvalSettings(model="smollm2-135m", lengths=[3000], methods=["attnlab"], haystack="noise"),
                           "ships no calibration of smollm2-135m at that length"),
                          (EvalSettings(model="smollm2-135m", lengths=[2048], methods=["minference"], budgets=[0.25],
                                        haystack="noise"), "pattern search"),
                          (EvalSettings(model=str(tmp_path), lengths=[2048], methods=["attnlab"], haystack="noise"),
                           "ships no calibration")):
        with pytest.raises(UserError, match=needle) as e:
            check_settings(other, None)
        assert "--calibrate" in str(e.value)
    text = tmp_path / "cal.txt"
    text.write_text("a text of the user's own\n")
    own = EvalSettings(model="smollm2-135m", lengths=[3000], methods=["attnlab"], haystack="noise", calibrate=str(text))
    check_settings(own, None)                                          # a user's own calibration text still serves


def _seen():
    """A progress display that records the bars it opens and each update (done, time left)."""
    from attnlab.progress import Progress

    class Seen(Progress):
        def __init__(self):
            self.updates, self.bars = [], []

        def _opened(self, bar):
            self.bars.append(bar)

        def _updated(self, bar):
            self.updates.append((bar.done, bar.remaining()))

    return Seen()


def test_the_calibration_bar_moves_a_step_per_block_of_rows(made):
    """The bar counts blocks of ROW_BLOCK rows (and each layer's option errors), of the kinds ``Calibration.steps``
    says."""
    import torch

    from attnlab.llm.calibration.statistics import ROW_BLOCK, calibrate

    model = made[0]
    seen = _seen()
    n, windows = 2 * ROW_BLOCK + 8, 2
    calibrate(model, [torch.randint(0, 90, (1, n)) for _ in range(windows)], progress=seen)
    bar = seen.bars[0]
    L = model.config.num_hidden_layers
    assert bar.total == windows * L * (3 + 1) == len(seen.updates) and bar.unit == "row blocks"
    assert [d for d, _ in seen.updates] == list(range(1, bar.total + 1))
    assert all(left is not None and left >= 0 for _, left in seen.updates)   # from the steps measured so far


def test_a_calibration_with_gradients_reports_progress_at_every_layer_of_its_gradient_pass(made):
    """With ``grads`` each window first runs a forward and a backward pass (minutes at 8K): the bar moves as each
    layer's forward and each layer's backward ends, not once per window, and the time left comes from steps
    measured."""
    import torch

    from attnlab.llm.calibration.statistics import ROW_BLOCK, calibrate

    model = made[0]
    seen = _seen()
    n, windows = ROW_BLOCK + 8, 2
    calibrate(model, [torch.randint(0, 90, (1, n)) for _ in range(windows)], progress=seen, grads=True)
    bar, L = seen.bars[0], model.config.num_hidden_layers
    per_window = 2 * L + 2 + L * (2 + 1)   # the gradient pass's layers and head (forward, backward), rows, errors
    assert bar.total == windows * per_window == len(seen.updates) and bar.unit == "steps"
    assert [d for d, _ in seen.updates] == list(range(1, bar.total + 1))
    assert len(seen.updates) / windows > 2 * L > 1                    # more than once per window, before its rows
    assert all(left is not None and left >= 0 for _, left in seen.updates)
    assert {k for k in bar.spent} >= {("gradient", "forward"), ("gradient", "head"), ("gradient", "backward")}


HEADER_KEYS = ("format", "model", "n", "num_layers", "num_heads", "num_kv_heads", "windows", "w_grid", "g_grid",
               "err_rows", "candidates", "pattern_keys", "text", "text_windows", "mix", "methods", "proved")


def test_every_header_field_deleted_retyped_or_joined_by_another_is_refused_naming_it(made, tmp_path):
    """Property: each field of the header, deleted, given a value of another type, or an unknown key added beside it:
    refused in one line that names that field (every field is required, none is coerced)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from attnlab.llm.calibration.archive import load_calibration

    _, _, path, _ = made

    @settings(max_examples=60, deadline=None)
    @given(key=st.sampled_from(HEADER_KEYS), how=st.sampled_from(("delete", "retype", "extra")))
    def check(key, how):
        def edit(h):
            if how == "delete":
                return {k: v for k, v in h.items() if k != key}
            if how == "extra":
                return {**h, f"{key}_copy": h[key]}
            return {**h, key: {"a": 1}}            # an object where a number, a text or a list is declared
        bad = _rewrite(path, tmp_path / f"{key}-{how}.safetensors", edit)
        with pytest.raises(UserError) as e:
            load_calibration(bad)
        named = f"{key}_copy" if how == "extra" else key
        assert f"field {named}" in str(e.value) and "\n" not in str(e.value), str(e.value)

    check()


@pytest.mark.parametrize("args,needle", [
    (["--n", "10"], "--n"),
    (["--method", "snapkv"], "needs no calibration"),
    (["--method", "nosuch"], "--method"),
    (["--out", "x.txt"], "a .safetensors file"),
    (["--text", "missing.txt"], "--text"),
    (["--budget", "0"], "--budget"),
    (["--calibrate-mix", "niah:0"], "--calibrate-mix"),
])
def test_calibrate_refuses_bad_options_before_the_model_loads(tmp_path, args, needle):
    base = {"--hf": "smollm2-135m", "--n": "2048", "--out": str(tmp_path / "c.safetensors")}
    opts = dict(zip(args[::2], args[1::2]))
    if opts.get("--out") == "x.txt":
        opts["--out"] = str(tmp_path / "x.txt")
    argv = [x for k, v in {**base, **opts}.items() for x in (k, v)]
    r = subprocess.run([sys.executable, "-m", "attnlab", "calibrate", *argv], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr
    assert "loading model" not in r.stderr and not list(tmp_path.iterdir())


def test_a_table_beyond_float16_is_kept_at_a_wider_precision(made, tmp_path):
    """Errors above float16's range (65504; Gemma-3's reach 1e5) would be inf: that precision is not tried."""
    import copy

    from attnlab.llm.calibration.archive import load_calibration
    from attnlab.llm.calibration.proof import write_compact

    model, full, _, _ = made
    big = copy.copy(full)
    big.err = full.err * 1e9
    done = write_compact(tmp_path / "big.safetensors", big, model, {"model": "tiny", "text": "t.txt",
                                                                     "text_windows": 1, "mix": None, "methods": SPECS})
    assert done["dtype"] in ("float32", "float64")
    assert np.isfinite(load_calibration(tmp_path / "big.safetensors").err).all()

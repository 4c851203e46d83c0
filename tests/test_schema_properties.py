"""Property tests of the file schemas: a valid file mutated field by field is refused naming the field, or reads as
the valid file.

For a valid plan file and a valid ``heads.json`` (drawn by hypothesis), one field (top-level or a head's) is
mutated: deleted, retyped (a value of another JSON type), put out of range, or given an extra key beside it.  Then
either the reader refuses it with one ``UserError`` line that names the field (its key, as a word), or — where the
mutation is harmless: a derived field (a plan's ``fraction``, ``full_heads``) or free-form ``meta`` given another
value of its type — it gives exactly the valid file's result (the plan it runs, the detector scores it draws).  An
eval folder's config.json mutated the same way is not continued by ``attnlab eval --out``, the field named.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.errors import UserError

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = ("delete", "retype", "range", "extra")
HARMLESS = {"fraction", "full_heads", "meta"}   # derived or free form: another value of the type changes nothing


# ---- drawing valid files ---------------------------------------------------------------------------------------------
@st.composite
def heads_of_plans(draw, n: int):
    """One head of a plan at length n (full, or a band with the parts a head may hold, each within its rules)."""
    from attnlab.llm.plans.plan import HeadPlan
    from attnlab.support import Support

    if draw(st.booleans()):
        return HeadPlan.full()
    w = draw(st.integers(0, n - 1))
    cols = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=3))
    dynamic = draw(st.integers(0, min(3, n - len(cols))))
    tail = draw(st.integers(0, min(8, n)))
    kept = draw(st.integers(0, min(4, n))) if tail else 0
    return HeadPlan(support=Support(w=w, columns=np.array(cols, dtype=np.int64)), dynamic=dynamic, tail=tail,
                    kept=kept, vote_next=draw(st.integers(0, 2)) if kept else 0, slashes=draw(st.integers(0, 3)),
                    blocks=draw(st.integers(0, 2)))


@st.composite
def plans(draw):
    """A valid plan (every field drawn within its rules), as the writer writes it."""
    from attnlab.llm.plans.plan import Plan

    L, kv, group = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    n = draw(st.integers(16, 48))
    heads = [[draw(heads_of_plans(n)) for _ in range(kv * group)] for _ in range(L)]
    pages = draw(st.sampled_from([0, 2]))
    method = draw(st.sampled_from(["attnlab", "attnlab-retrieval", "streaming-llm", "duo-attention"]))
    return Plan(heads, kv, method, draw(st.sampled_from([0.1, 0.5, 1.0])), n, {"made": "by hypothesis"},
                pages=pages, page=draw(st.sampled_from([8, 16])), mean_pages=draw(st.integers(0, pages)),
                decode_band=draw(st.sampled_from([0, 8])), group_vote=draw(st.sampled_from([0, 1])))


@st.composite
def heads_docs(draw):
    """A valid detectors ``heads.json`` of an L × H model (``heads_report.heads_document``)."""
    from attnlab.analysis.detector_names import DETECTORS
    from attnlab.llm.heads.heads_report import heads_document

    L, H = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    names = draw(st.lists(st.sampled_from(DETECTORS), unique=True, min_size=1, max_size=3))
    score = st.floats(0, 1, allow_nan=False).map(lambda x: round(x, 6))
    table = st.lists(st.lists(score, min_size=H, max_size=H), min_size=L, max_size=L)
    scores = {d: np.array(draw(table)) for d in names}
    thresholds = {d: draw(st.sampled_from([0.2, 0.4, 0.5])) for d in names}
    return heads_document("tiny", draw(st.integers(16, 512)), scores, thresholds, {"seconds": 1.5}), L, H


# ---- mutating one field ----------------------------------------------------------------------------------------------
def fields_of(doc: dict, nested: str) -> list[tuple]:
    """Every mutable place: (path of keys to the object holding it, its key); ``nested``: the key of the heads table
    whose objects are also fields' holders (a plan's heads[l][h])."""
    places = [((), k) for k in doc]
    if nested == "plan":
        places += [(("heads", l, h), k) for l, row in enumerate(doc["heads"]) for h, hd in enumerate(row) for k in hd]
    else:
        places += [(("named", i), k) for i, x in enumerate(doc.get("named", [])) for k in x]
        places += [(("detectors",), d) for d in doc.get("detectors", {})]
        places += [(("thresholds",), d) for d in doc.get("thresholds", {})]
    return places


def other_type(value):
    """Values of every JSON type but ``value``'s (an int is not a float here: JSON tells 1 from 1.0)."""
    pool = ["x", 1.5, 7, True, None, [], {}]
    same = {bool: bool, int: int, float: float, str: str, list: list, dict: dict, type(None): type(None)}[type(value)]
    return [v for v in pool if type(v) is not same and not (same is float and type(v) is int)]


def out_of_range(value):
    """Values of ``value``'s type outside any range a field of the formats declares."""
    if isinstance(value, bool):
        return [2]
    if isinstance(value, (int, float)):
        return [-2, 10**9, -0.5] if isinstance(value, float) else [-2, 10**9]
    if isinstance(value, list):
        return [[-2], [10**9], [[-2.0]]]
    if isinstance(value, str):
        return [""]
    return [{"nosuch": -2}]


def mutate(doc: dict, holder: tuple, key, kind: str, choice: int) -> tuple[dict, str]:
    """``doc`` with one mutation; returns (the mutated copy, the name the refusal must hold)."""
    d = json.loads(json.dumps(doc))
    obj = d
    for k in holder:
        obj = obj[k]
    if kind == "delete":
        del obj[key]
    elif kind == "retype":
        vals = other_type(obj[key])
        obj[key] = vals[choice % len(vals)]
    elif kind == "range":
        vals = out_of_range(obj[key])
        obj[key] = vals[choice % len(vals)]
    else:
        obj["zz_extra"] = 1
        return d, "zz_extra"
    return d, str(key)


def names_field(message: str, name: str) -> bool:
    """The refusal names the field: its key as a word (``heads.0.1.w``, ``field n:``, ``tail 40 beyond``)."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", message) is not None


def write(doc: dict) -> Path:
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    f.write(json.dumps(doc))
    f.close()
    return Path(f.name)


# ---- the properties --------------------------------------------------------------------------------------------------
@SETTINGS
@given(plan=plans(), pick=st.integers(0, 10**6), kind=st.sampled_from(KINDS), choice=st.integers(0, 5))
def test_a_plan_file_mutated_field_by_field_is_refused_naming_it_or_runs_the_same_plan(plan, pick, kind, choice):
    from attnlab.llm.methods import is_registered
    from attnlab.llm.plans.plan import Plan

    doc = plan.to_dict()
    good = Plan.load(write(doc), known_method=is_registered).to_dict()   # as plan-run and eval --plan read it
    assert good == json.loads(json.dumps(doc))                                 # the valid file: the plan written
    holder, key = fields_of(doc, "plan")[pick % len(fields_of(doc, "plan"))]
    bad, name = mutate(doc, holder, key, kind, choice)
    path = write(bad)
    try:
        got = Plan.load(path, known_method=is_registered).to_dict()
    except UserError as err:
        message = str(err)
        assert "\n" not in message and message.startswith(str(path)), message
        assert names_field(message, name), (kind, holder, key, message)
        return
    finally:
        path.unlink()
    assert name in HARMLESS and holder == () and kind != "delete", (kind, holder, key, bad)
    assert {k: v for k, v in got.items() if k != "meta"} == {k: v for k, v in good.items() if k != "meta"}


@SETTINGS
@given(drawn=heads_docs(), pick=st.integers(0, 10**6), kind=st.sampled_from(KINDS), choice=st.integers(0, 5))
def test_a_heads_file_mutated_field_by_field_is_refused_naming_it_or_draws_the_same_scores(drawn, pick, kind, choice):
    from attnlab.llm.heads.heads_file import read_detector_scores

    doc, L, H = drawn
    good = read_detector_scores(write(doc), L, H)
    places = fields_of(doc, "heads")
    holder, key = places[pick % len(places)]
    bad, name = mutate(doc, holder, key, kind, choice)
    path = write(bad)
    try:
        got = read_detector_scores(path, L, H)
    except UserError as err:
        message = str(err)
        assert "\n" not in message and str(path) in message, message
        within = holder in (("detectors",), ("thresholds",))   # an entry of a table: the table named will do
        assert names_field(message, name) or (within and names_field(message, holder[0])), (kind, holder, key, message)
        return
    finally:
        path.unlink()
    # accepted: free-form meta given another value, the format tag deleted (a file older than the tag), or a threshold
    # no head reaches deleted: the same scores, named heads and labels
    assert (name == "meta" and holder == () and kind != "delete") or (holder == () and key in ("format", "meta")
                                                                     and kind == "delete") \
        or (holder == ("thresholds",) and kind == "delete"), (kind, holder, key, bad)
    assert got.model == good.model and got.n == good.n and got.named == good.named
    assert got.scores.keys() == good.scores.keys()
    assert all(np.array_equal(got.scores[d], good.scores[d], equal_nan=True) for d in good.scores)
    assert all(got.label(l, h, "role") == good.label(l, h, "role") for l in range(L) for h in range(H))


def test_a_version_1_plan_reads_as_its_writer_meant_it_and_loses_no_key_silently(tmp_path):
    """A file of the earlier version (the parts that were 0 left out) is migrated; a key that version always wrote,
    deleted, is still refused."""
    from attnlab.llm.plans.plan import HeadPlan, Plan
    from attnlab.schemas.plan import V1_HEAD, V1_PLAN
    from attnlab.support import Support

    head = HeadPlan(support=Support(w=4, columns=np.array([0])), dynamic=1, tail=8)
    plan = Plan([[head, HeadPlan.full()]], 1, "attnlab", 0.5, 64)
    v2 = plan.to_dict()
    v1 = {k: v for k, v in v2.items() if k not in V1_PLAN} | {"format": "attnlab-plan/1"}
    v1["heads"] = [[{k: x for k, x in h.items() if not (k in V1_HEAD and x == 0)} for h in row] for row in v2["heads"]]
    (tmp_path / "v1.json").write_text(json.dumps(v1))
    assert Plan.load(tmp_path / "v1.json").to_dict() == v2
    del v1["heads"][0][0]["w"]
    (tmp_path / "v1.json").write_text(json.dumps(v1))
    with pytest.raises(UserError, match=r"field heads\.0\.0\.w: required field missing"):
        Plan.load(tmp_path / "v1.json")


def test_a_plan_without_windows_for_a_model_whose_layers_slide_is_refused():
    """``windows: null`` is a valid plan (no layer slides) — of another model than one whose layers slide."""
    from attnlab.llm.plans.plan import Plan

    class Config:
        num_attention_heads, num_hidden_layers, num_key_value_heads, head_dim = 4, 2, 2, 8
        layer_types, sliding_window = ["sliding_attention", "full_attention"], 16

    class Model:
        config = Config()

    plan = Plan.full({"num_layers": 2, "num_heads": 4, "num_kv_heads": 2}, 64)
    with pytest.raises(UserError, match="sliding windows None vs"):
        plan.check(Model())
    sliding = Plan.full({"num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "windows": [16, None]}, 64)
    assert sliding.check(Model()) is sliding


@st.composite
def eval_settings(draw):
    """The settings of an eval run (``EvalSettings``), each within its rules."""
    from attnlab.llm.eval.eval_settings import EvalSettings
    from attnlab.llm.eval.tasks import TASKS

    def some(pool, most=3):
        return draw(st.lists(st.sampled_from(pool), unique=True, min_size=1, max_size=most))

    return EvalSettings(model=draw(st.sampled_from(["smollm2-135m", "runs/tiny"])), tasks=some(sorted(TASKS)),
                        lengths=some([512, 1024, 2048]), depths=draw(st.integers(1, 11)),
                        samples=draw(st.integers(1, 10)), methods=some(["streaming-llm", "snapkv:window=8", "attnlab"]),
                        budgets=some([0.1, 0.25, 0.5]), plan=draw(st.sampled_from([None, "plan.json"])),
                        seed=draw(st.integers(0, 3)), calibrate=draw(st.sampled_from([None, "cal.txt"])),
                        ppl=draw(st.sampled_from([None, "dev.txt"])), max_new=draw(st.sampled_from([None, 16])),
                        template=draw(st.sampled_from(["auto", "chat", "none"])),
                        question=draw(st.sampled_from(["after", "before"])))


@SETTINGS
@given(settings_=eval_settings(), pick=st.integers(0, 10**6), kind=st.sampled_from(KINDS), choice=st.integers(0, 5))
def test_an_eval_folder_whose_config_is_mutated_is_not_continued_and_the_field_is_named(settings_, pick, kind, choice):
    """``attnlab eval --out`` on a folder of the same run whose config.json has one field mutated: refused before the
    model loads naming the field (by its schema, or as a setting other than the run's), or — a field the format lets
    a file lack (``template``, ``question``: their defaults, the one migration) deleted where it held its default —
    continued as the valid folder is."""
    import dataclasses

    from attnlab.llm.eval.eval_inputs import check_eval_folder
    from attnlab.schemas.eval_config import FORMAT, LATER

    doc = {"format": FORMAT, **dataclasses.asdict(settings_)}
    places = fields_of(doc, "config")
    holder, key = places[pick % len(places)]
    bad, name = mutate(doc, holder, key, kind, choice)
    with tempfile.TemporaryDirectory() as out:
        (Path(out) / "config.json").write_text(json.dumps(doc))
        assert check_eval_folder(out, settings_) == doc                       # the valid folder: continued as it is
        (Path(out) / "config.json").write_text(json.dumps(bad))
        try:
            got = check_eval_folder(out, settings_)
        except UserError as err:
            assert "\n" not in str(err) and "--out" in str(err), str(err)
            assert names_field(str(err), name), (kind, key, str(err))
            return
    assert kind == "delete" and key in LATER and doc[key] == LATER[key], (kind, key, bad)
    assert got == doc

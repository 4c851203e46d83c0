"""attnlab-retrieval as parts composed (attnlab/llm/methods/parts): each option declared by one part, each part's share
of β and sliding layer stated, a composition made in Python or on the command line planning as the whole does, the
options no preset uses marked experimental with their measurement, and `attnlab methods` short, its commands real."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnlab.errors import UserError
from attnlab.llm import methods
from attnlab.llm.methods.parts import EVERY, PARTS, compose

sys.path.insert(0, str(Path(__file__).parent))
from test_llm_retrieval_plan import scored_calibration  # noqa: E402  (2 layers × 4 heads, 2 KV heads, scores)

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTAL = {"vote_next", "by_kv", "slashes", "group_vote", "decode_band", "mean_pages", "widths"}


def test_every_option_is_declared_by_one_part_and_every_part_states_its_share_and_sliding_layer():
    declared = [key for part in EVERY for key in part.options]
    assert len(declared) == len(set(declared))
    assert set(methods.method_class("attnlab-retrieval").options) == set(declared)
    for part in EVERY:
        assert part.name and part.purpose and part.sliding and part.share_rule, part


def test_the_options_no_preset_uses_are_experimental_with_a_measurement():
    options = methods.method_class("attnlab-retrieval").options
    assert {key for key, opt in options.items() if opt.experimental} == EXPERIMENTAL
    for key in EXPERIMENTAL:
        assert re.search(r"\d+/\d+", options[key].experimental), key                 # a measured count, a source
        assert "docs/" in options[key].experimental, key
    for preset in methods.PRESETS.values():
        assert not EXPERIMENTAL & set(preset.values), preset.name


def test_a_composition_plans_as_the_whole_with_the_same_options():
    cal = scored_calibration()
    opts = {"retrieval_heads": 2, "tail": 8, "blocks": 2, "tail_keep": 32, "pages": 4}
    whole = methods.get("attnlab-retrieval", 0.5, **opts).make_plan(None, cal.n, cal)
    parts = ["retrieval-tails", "key-blocks", "voted-cache", "read-back"]
    python = compose(parts, 0.5, **opts).make_plan(None, cal.n, cal)
    cli = methods.get("+".join(parts), 0.5, **opts).make_plan(None, cal.n, cal)
    for plan in (python, cli):
        assert plan.to_dict()["heads"] == whole.to_dict()["heads"] and plan.pages == whole.pages == 4
        assert plan.meta["retrieval_heads"] == whole.meta["retrieval_heads"] and plan.meta["blocks"] == 2
    assert sum(h.kept == 32 and h.blocks == 2 and h.tail == 8 for row in cli.heads for h in row) == 2


def test_a_part_left_out_is_off_and_a_dependency_on_it_is_refused_once():
    cal = scored_calibration()
    plain = compose(["band-floor"], 0.5).make_plan(None, cal.n, cal)
    assert plain.meta["retrieval_heads"] == [] and not any(h.tail or h.blocks for row in plain.heads for h in row)
    alone = methods.get("band-floor", 0.5, band_floor=2).make_plan(None, cal.n, cal)    # one part, by its name
    assert min(h.w for row in alone.heads for h in row if not h.is_full) >= 2
    with pytest.raises(UserError, match="blocks=2 needs tail > 0"):
        compose(["key-blocks"], 0.5, blocks=2)
    with pytest.raises(UserError, match="no part 'nope'"):
        methods.get("retrieval-tails+nope", 0.5)
    with pytest.raises(UserError, match="has no option pages"):
        methods.get("retrieval-tails+key-blocks", 0.5, pages=4)
    from attnlab.llm.eval.eval_settings import parse_methods, parse_plan_method

    assert parse_methods("retrieval-tails+key-blocks:blocks=08") == ["retrieval-tails+key-blocks:blocks=8"]
    assert parse_plan_method("retrieval-tails+key-blocks:blocks=2") == "retrieval-tails+key-blocks:blocks=2"


def test_shares_beyond_the_budget_are_one_line_naming_each():
    cal = scored_calibration()
    m = methods.get("attnlab-retrieval", 0.05, retrieval_heads=4, tail=64, blocks=8, other_blocks=2)
    with pytest.raises(UserError) as err:
        m.make_plan(None, cal.n, cal)
    text = str(err.value)
    assert "\n" not in text and "retrieval heads' tails of 64 rows" in text and "8 key blocks" in text
    assert "other heads' 2 key blocks" in text and f"n = {cal.n}" in text


def test_the_default_shows_as_its_parts_in_40_lines_and_every_command_it_names_exists():
    out = subprocess.run([sys.executable, "-m", "attnlab", "methods"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) <= 40, len(lines)
    assert lines[0].startswith("attnlab — the recommended default")
    shown = {line.split()[0] for line in lines[1:8]}
    assert {"retrieval-tails", "key-blocks", "read-back", "voted-cache"} <= shown
    assert "attnlab-mass" not in out.stdout and "oracle-topk" not in out.stdout                 # research: --all
    every = subprocess.run([sys.executable, "-m", "attnlab", "methods", "--all"], capture_output=True, text=True,
                           cwd=ROOT, timeout=120).stdout
    assert "attnlab-mass" in every and "[experimental:" in every and "β share:" in every
    commands = set(re.findall(r"`attnlab ([a-z][a-z-]+)", out.stdout + every)) - {"methods"}
    from attnlab.cli import app

    known = {c.name or c.callback.__name__ for c in app.registered_commands}
    assert commands <= known, commands - known
    for script in re.findall(r"python (benchmarks/\S+\.py)", out.stdout + every):
        assert (ROOT / script).is_file(), script
    for doc in re.findall(r"(docs/[\w./-]+?)[),\]]", every):
        assert (ROOT / doc).exists(), doc


def test_no_method_text_is_a_changelog():
    methods.names()
    for preset in methods.PRESETS.values():
        assert "before" not in preset.purpose, preset.name
    assert np.all([not re.search(r"round \d", methods.REGISTRY[n].prefill + methods.REGISTRY[n].decoding)
                   for n in methods.names()])
    assert set(PARTS) == {part.name for part in EVERY}

"""Declared method options (default, range, help), presets, the recommended default, and their refusals."""

from __future__ import annotations

import pytest

from attnlab.errors import UserError
from attnlab.llm import methods
from attnlab.llm.methods.base import Option


@pytest.mark.parametrize("name", methods.names())
def test_every_option_is_declared_with_a_default_in_its_range_and_a_help(name):
    cls = methods.REGISTRY[name]
    for key, opt in cls.options.items():
        assert isinstance(opt, Option) and opt.help.strip() and "\n" not in opt.help, (name, key)
        if opt.default is not None:
            assert opt.parse(key, opt.default) == opt.default, (name, key)   # the default lies in its own range
    m = methods.get(name, 0.5)
    assert all(m.option(key) == opt.default for key, opt in cls.options.items())   # nothing given: the defaults


def test_option_values_are_read_and_checked_in_one_line():
    m = methods.get("snapkv", 0.2, window="32")
    assert m.option("window") == 32 and m.option("kernel") == 5 and m.opts == {"window": 32}
    for value, says in (("x", "expected int"), ("0", "must be in [1, 8192]"), ("1.5", "expected int")):
        with pytest.raises(UserError) as err:
            methods.get("snapkv", 0.2, window=value)
        assert str(err.value).startswith("--option window:") and says in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UserError, match="--option widths: expected one of all, own"):
        methods.get("attnlab-retrieval", 0.2, widths="some")


def test_an_option_of_another_method_is_refused():
    with pytest.raises(UserError) as err:
        methods.get("streaming-llm", 0.1, window="8")
    assert "has no option window" in str(err.value) and "compression" in str(err.value)
    with pytest.raises(UserError) as err:
        methods.get("attnlab", 0.1, window="8")
    assert "method attnlab (attnlab-retrieval) has no option window" in str(err.value)


def test_attnlab_is_the_recommended_preset_of_attnlab_retrieval():
    assert methods.DEFAULT == "attnlab" and "attnlab" in methods.preset_names() and "attnlab" not in methods.names()
    assert "attnlab" in methods.default_names() and "attnlab" in methods.plan_names()
    m = methods.get("attnlab", 0.1)
    p = methods.PRESETS["attnlab"]
    assert type(m) is methods.REGISTRY["attnlab-retrieval"]
    assert m.name == "attnlab" and m.describe()["method"] == "attnlab"
    assert p.values == {"retrieval_heads": 32, "blocks": 8, "other_blocks": 4, "tail_keep": 512, "pages": 16,
                        "sliding_floor": 384, "page_score": "calibrated", "band_floor": 8}
    assert {k: m.option(k) for k in p.values} == p.values and m.option("tail") == 64   # the rest: the base's defaults
    assert methods.get("attnlab-retrieval", 0.1).option("retrieval_heads") == 16          # the base keeps its own
    assert methods.method_class("attnlab") is methods.REGISTRY["attnlab-retrieval"]
    band = methods.get("attnlab-band", 0.1)
    assert band.name == "attnlab-band" and not band.needs_retrieval                      # the band plan alone


def test_a_preset_takes_more_options_but_refuses_a_contradiction():
    m = methods.get("attnlab", 0.1, widths="own", retrieval_heads="32")     # the same value: no contradiction
    assert m.option("widths") == "own" and m.option("retrieval_heads") == 32
    with pytest.raises(UserError) as err:
        methods.get("attnlab", 0.1, pages="4")
    text = str(err.value)
    assert "\n" not in text and "pages=4" in text and "contradicts the preset attnlab (pages=16)" in text


def test_a_preset_is_checked_against_its_base_when_registered():
    with pytest.raises(ValueError):
        methods.register_preset("attnlab", "attnlab-retrieval", "taken")
    with pytest.raises(KeyError):
        methods.register_preset("x-preset", "attnlab-retrieval", "no such option", window=3)
    with pytest.raises(UserError):
        methods.register_preset("y-preset", "attnlab-retrieval", "out of range", blocks=-1)
    assert "x-preset" not in methods.PRESETS and "y-preset" not in methods.PRESETS


def test_methods_command_prints_options_defaults_ranges_and_presets(capsys):
    from attnlab_cli import run_main

    code, out, _ = run_main(["methods", "--all"], capsys)
    assert code in (0, None)
    block = out[out.index("  retrieval-tails: "):]
    assert "    retrieval_heads = 16  [0, 1000000]  k: heads of largest retrieval score" in block
    assert "    widths = all  all | own" in block
    assert ("attnlab  [default] = attnlab-retrieval:retrieval_heads=32:blocks=8:other_blocks=4:tail_keep=512:pages=16:"
            "sliding_floor=384:page_score=calibrated:band_floor=8") in out
    assert out.count("[default]") == 2 and "attnlab-band (calibrated)" in out   # the default's block and the presets'
    code, short, _ = run_main(["methods"], capsys)
    assert code in (0, None) and short.count("[default]") == 1 and "attnlab-band" not in short


@pytest.mark.parametrize("spec, says", [
    ("attnlab-retrieval:pages=2:pages=3", "given twice"),
    ("attnlab:pages=2", "contradicts the preset attnlab"),
    ("snapkv:retrieval_heads=2", "has no option retrieval_heads"),
])
def test_eval_refuses_bad_method_options_in_one_line_before_anything(spec, says, tmp_path, capsys):
    from attnlab_cli import run_main

    out = tmp_path / "run"
    code, _, err = run_main(["eval", "--hf", "smollm2-135m", "--method", spec, "--calibrate", str(tmp_path / "c.txt"),
                             "--out", str(out)], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and says in lines[0] and not out.exists(), err

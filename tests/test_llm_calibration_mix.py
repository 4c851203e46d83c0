"""The calibration mix: synthetic retrieval prompts with their answers, errors measured on the answer rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.errors import UserError
from attnlab.llm.calibration.statistics import calibrate
from attnlab.llm.calibration.mix import MIX_SEED, mix_windows, parse_mix
from attnlab.llm.eval.tasks import Haystack, string_match_all

from test_llm_eval import text_file, tiny  # noqa: F401  (fixtures)


def test_parse_mix_reads_counts_and_refuses_bad_items():
    assert parse_mix("niah:2,vt:1") == [("niah", 2), ("vt", 1)]
    assert parse_mix("niah-multikey") == [("niah-multikey", 1)]
    assert parse_mix(None) == [] and parse_mix("") == []
    for bad in ("needle:2", "niah:0", "niah:-1", "niah:x"):
        with pytest.raises(UserError, match="--calibrate-mix"):
            parse_mix(bad)


def test_mix_windows_are_n_tokens_and_their_rows_predict_the_answer(tiny, text_file):
    _, _, tok = tiny
    n = 600
    wins = mix_windows(tok, Haystack.file(tok, text_file, n), n, parse_mix("niah:2,vt:1"))
    assert [w.task for w in wins] == ["niah", "niah", "vt"]
    for w in wins:
        assert w.ids.shape == (1, n)
        targets = w.ids[0, w.rows + 1]                                  # what the answer rows predict
        text = tok.decode(targets.tolist())
        assert w.rows[-1] <= n - 2 and len(w.rows) >= 2
        # the predicted tokens are the answer, and it was stated in the prompt before the rows
        before = tok.decode(w.ids[0, : int(w.rows[0]) + 1].tolist())
        for a in [x.strip() for x in text.split(",") if x.strip()]:
            assert a in before
    # other prompts than the evaluation's: the seed is far from eval's and the two niah prompts differ
    assert MIX_SEED > 10**6 and not torch.equal(wins[0].ids, wins[1].ids)


def test_the_mix_changes_the_option_errors_and_only_through_the_answer_rows(tiny, text_file):
    _, model, tok = tiny
    from attnlab.llm.models.text_windows import token_windows

    n = 400
    text = token_windows(tok, text_file, n, 1)
    wins = mix_windows(tok, Haystack.file(tok, text_file, n), n, parse_mix("niah:1"))
    plain = calibrate(model, text)
    mixed = calibrate(model, text + wins)
    alone = calibrate(model, wins)
    assert mixed.windows.tolist() == [2, 2] and np.isfinite(mixed.err).all()
    # the mixed table is the sum of the two calibrations' (each window's errors on its own rows)
    assert np.allclose(mixed.err, plain.err + alone.err, rtol=1e-6, atol=1e-12)
    # and the answer rows are not the evenly spread rows: measuring the same window on those gives another table
    spread = calibrate(model, [w.ids for w in wins])
    assert not np.allclose(spread.err, alone.err)


def test_attnlab_plan_calibrates_what_each_method_needs(tiny, text_file):
    """`attnlab plan` builds its calibration as eval does: MInference's pattern search, the mix in the plan's meta."""
    _, model, tok = tiny
    from attnlab.cli.plan import make_plan

    make_plan(model, tok, text_file, 0.3, 400, 1, "minference")                 # needs the pattern search
    p = make_plan(model, tok, text_file, 0.5, 400, 1, "attnlab-retrieval:retrieval_heads=2:blocks=2", "niah:1")
    assert p.meta["calibrate_mix"] == "niah:1" and len(p.meta["retrieval_heads"]) == 2
    assert p.meta["blocks"] == 2 and p.block_heads() == 2 and p.fraction(400) <= 0.5   # the key blocks: a plan field, in β


def test_the_mix_haystack_of_a_text_read_once_is_the_files(tiny, tmp_path):
    """The mix's haystack is made from the calibration text read once (``TokenText.text``): the same tokens as the
    file read again (``Haystack.file``), whatever its line ends (\\n, \\r\\n, \\r, U+2028, blank lines), at any n."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from attnlab.llm.models.text_windows import TokenText

    _, _, tok = tiny
    line = st.text(alphabet="abc xyz.,", min_size=1, max_size=30).filter(str.strip)   # an empty file is refused
    ends = st.sampled_from(["\n", "\r\n", "\r", "\u2028", "\n\n"])

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.tuples(line, ends), min_size=1, max_size=30), st.integers(1, 200))
    def same(pieces, n):
        path = tmp_path / "cal.txt"
        path.write_bytes("".join(a + b for a, b in pieces).encode("utf-8"))
        once = TokenText.read(tok, path)
        assert Haystack.of_text(tok, once.text, once.path, n).ids == Haystack.file(tok, path, n).ids

    same()


def test_an_eval_with_a_mix_calibrates_on_the_mix_parsed_once(tiny, text_file, tmp_path):
    """``--calibrate-mix`` is parsed by ``check_settings`` and its pairs reach the calibration the grid makes: the
    eval's ``calibration-n.npz`` is the calibration ``build_calibration`` makes with those pairs, not without them."""
    from attnlab.llm.eval.eval_grid import run_eval
    from attnlab.llm.eval.eval_settings import EvalSettings, check_settings, method_at
    from attnlab.llm.calibration.statistics import Calibration
    from attnlab.llm.calibration.build import build_calibration

    folder, model, tok = tiny
    n = 512
    settings = EvalSettings(model=str(folder), tasks=["niah"], lengths=[n], depths=1, samples=1, methods=["attnlab"],
                            budgets=[0.5], haystack="noise", max_new=2, calibrate=str(text_file), calibrate_windows=1,
                            calibrate_mix="niah:1")
    checked = check_settings(settings)
    assert checked.mix == [("niah", 1)]
    run_eval(model, tok, checked, tmp_path / "run")
    made = Calibration.load(tmp_path / "run" / f"calibration-{n}.npz")
    need = [method_at(settings, "attnlab", 0.5)]
    mixed, _ = build_calibration(model, tok, need, n, text_file, 1, [("niah", 1)])
    plain, _ = build_calibration(model, tok, need, n, text_file, 1, [])
    assert np.array_equal(made.err, mixed.err) and not np.array_equal(made.err, plain.err)

"""The eval grid shared by torchrun's ranks (``attnlab.llm.eval.ranks``): each rank its share of the prompts in its own
file, the union the single process's rows, folded into results.jsonl by the next run; resumable with any N."""

from __future__ import annotations

import json

import pytest

from test_llm_eval import tiny  # noqa: F401 - the fixture: a 2-layer Llama with a one-character tokenizer


def _strip(rows):
    drop = ("prefill_s", "decode_s", "seconds", "reused_tokens")   # what a run spent, not what it measured
    return sorted(json.dumps({k: v for k, v in r.items() if k not in drop}, sort_keys=True) for r in rows)


def test_two_ranks_share_the_prompts_and_fold_into_the_single_process_rows(tiny, tmp_path, monkeypatch):
    from attnlab.llm.eval.eval_grid import read_results, run_eval
    from attnlab.llm.eval.eval_settings import EvalSettings, check_settings
    from attnlab.llm.eval.ranks import Ranks, fold_results

    folder, model, tok = tiny
    settings = EvalSettings(model=str(folder), tasks=["niah"], lengths=[500], depths=3, samples=1, methods=["streaming-llm"],
                            budgets=[0.5], haystack="noise", max_new=4)
    whole = run_eval(model, tok, check_settings(settings), tmp_path / "whole")
    out = tmp_path / "ranked"
    shares = []
    for rank in (0, 1):   # torchrun's variables set by hand: no process group, each rank writes its own file
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        assert not Ranks.from_env().merges()
        run_eval(model, tok, check_settings(settings), out)
        shares.append(read_results(out / f"results.rank{rank}.jsonl"))
    assert not (out / "results.jsonl").exists()
    keys = [{r["key"] for r in s} for s in shares]
    assert keys[0] and keys[1] and not keys[0] & keys[1]                   # each prompt answered once
    assert _strip(shares[0] + shares[1]) == _strip(whole)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    again = run_eval(model, tok, check_settings(settings), out)           # one process: nothing left to measure
    assert _strip(again) == _strip(whole)
    folded = fold_results(out)
    assert _strip(folded) == _strip(whole) and not list(out.glob("results.rank*.jsonl"))
    assert _strip(read_results(out / "results.jsonl")) == _strip(whole)


@pytest.mark.parametrize("env,needle", [({"RANK": "2", "WORLD_SIZE": "2"}, "0 <= RANK < WORLD_SIZE"),
                                        ({"RANK": "x", "WORLD_SIZE": "2"}, "expected integers")])
def test_bad_rank_variables_are_one_line(monkeypatch, env, needle):
    from attnlab.errors import UserError
    from attnlab.llm.eval.ranks import Ranks

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(UserError, match=needle):
        Ranks.from_env()


def test_a_ranks_bar_counts_its_own_share(tiny, tmp_path, monkeypatch):
    """Each rank's progress bar runs over its own rows (the prompts of index ≡ rank mod N), and ends full."""
    from attnlab.llm.eval.eval_grid import run_eval
    from attnlab.llm.eval.eval_settings import EvalSettings, check_settings
    from attnlab.progress import Progress

    class Recorded(Progress):
        def __init__(self):
            self.bars = []

        def _closed(self, bar):
            self.bars.append((bar.description, bar.done, bar.total))

    folder, model, tok = tiny
    settings = EvalSettings(model=str(folder), tasks=["niah"], lengths=[500], depths=3, samples=1, methods=["streaming-llm"],
                            budgets=[0.5], haystack="noise", max_new=4)
    out, seen = tmp_path / "ranked", []
    for rank in (0, 1):   # 3 prompts × (full, streaming-llm): rank 0 answers prompts 0 and 2, rank 1 prompt 1
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        run_eval(model, tok, check_settings(settings), out, progress=(progress := Recorded()))
        seen += [b for b in progress.bars if b[0].startswith("eval")]
    assert seen == [("eval (rank 0 of 2)", 4, 4), ("eval (rank 1 of 2)", 2, 2)]


def test_the_wall_time_counts_runs_side_by_side_once():
    """wall.jsonl's lines: runs one after the other add up; two ranks' lines over the same stretch count once."""
    from attnlab.llm.eval.eval_report import markdown, wall_time

    after = [{"started": "2026-01-01T10:00:00Z", "seconds": 100.4}, {"started": "2026-01-01T10:01:40Z", "seconds": 50.0}]
    assert wall_time(after) == {"wall_s": 150.4, "wall_runs": 2, "wall_side_by_side": 0}   # 1 s of rounding is no overlap
    ranks = [{"started": "2026-01-01T12:00:00Z", "seconds": 600.0}, {"started": "2026-01-01T12:00:01Z", "seconds": 610.0}]
    w = wall_time(after + ranks)
    assert w["wall_runs"] == 4 and w["wall_side_by_side"] == 2 and abs(w["wall_s"] - (150.4 + 611.0)) < 1e-6
    assert wall_time([]) == {"wall_s": None, "wall_runs": 0, "wall_side_by_side": 0}
    assert wall_time(after + [{"started": "x", "seconds": 9.0}])["wall_s"] == 159.4   # no readable start: a run by itself
    text = markdown({"table": [], **w})
    assert "grid wall time: 761.4 s (4 runs of attnlab eval on this folder, 2 of them side by side, counted once;" in text
    assert "side by side" not in markdown({"table": [], **wall_time(after)})

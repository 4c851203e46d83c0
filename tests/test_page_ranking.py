"""benchmarks/page_ranking.py: recall@K and hit@K of read-back's page scores (Quest's bound, the mean key) against the
pages full attention reads, on constructed keys, and its bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from attnlab.llm.calibration.page_ranking import page_scores, rank_layer  # noqa: E402


def keys_with_a_page_read(n=256, d=8, page_read=5, seed=0):
    """One KV head, one query head, 4 rows: small random keys, and page ``page_read`` holding 16 copies of 10·q."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 4, d, generator=g)
    q[0] = q[0, :1]                                                            # the 4 rows ask the same
    k = 0.1 * torch.randn(1, n, d, generator=g)
    k[0, page_read * 16 : page_read * 16 + 16] = 10 * q[0, 0]
    return q, k


def test_a_page_of_keys_along_the_query_is_first_by_both_scores_and_its_mass_is_recalled():
    q, k = keys_with_a_page_read()
    U, mu, _ = page_scores(q, k)
    assert U.shape == mu.shape == (1, 4, 16)
    assert int(U[0, 0].argmax()) == int(mu[0, 0].argmax()) == 5
    got = rank_layer(q, k, 1.0, w=32, K=1, far=0.25)
    for key in ("recall_bound", "recall_mean", "recall_half", "hit_bound", "hit_mean", "hit_half"):
        x, c = got[key]
        assert c == 4 and abs(x / c - 1.0) < 1e-6, key
    assert got["rows"] == (4, 4)


def test_the_bound_is_an_upper_bound_and_the_mean_is_the_mean():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(6, 3, 16, generator=g), torch.randn(2, 100, 16, generator=g)     # GQA: 3 query heads per KV head
    U, mu, _ = page_scores(q, k)
    s = torch.einsum("hrd,hnd->hrn", q, k.repeat_interleave(3, 0))                      # (6, 3, 100)
    pages = torch.arange(100) // 16
    for P in range(7):
        inside = s[..., pages == P]
        assert (U[..., P] >= inside.max(-1).values - 1e-4).all()
        assert torch.allclose(mu[..., P], inside.mean(-1), atol=1e-4)


def test_a_head_that_reads_only_its_band_is_not_counted():
    q, k = keys_with_a_page_read(page_read=15)                                         # the page read lies in the band
    got = rank_layer(q, k, 1.0, w=32, K=1, far=0.25)
    assert got["rows"] == (0, 4) and got["recall_bound"] == (0.0, 0)


def test_bad_input_is_one_line_exit_2(tmp_path):
    for args, words in ((["--rows", "64", "--n", "64"], "--rows"), (["--far", "2"], "--far"),
                        (["--data", str(tmp_path / "none.txt")], "--data"), (["--pages", "0"], "--pages")):
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "page_ranking.py"), *args], capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and words in lines[0] and "Traceback" not in r.stderr, (args, r.stderr)

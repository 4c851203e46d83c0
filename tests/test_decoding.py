"""Greedy and beam search."""

from __future__ import annotations

import torch

from attnlab.config import ModelConfig
from attnlab.nn import build_model
from attnlab.train.decoding import beam_search, greedy


def _model(kind="transformer"):
    torch.manual_seed(3)
    return build_model(ModelConfig(model=kind, vocab_size=25, d_model=32, heads=4, layers=2, ff=64, max_len=32)).eval()


def test_beam_size_one_equals_greedy():
    for kind in ("transformer", "gru"):
        model = _model(kind)
        src = torch.randint(4, 25, (6, 9))
        src[2, 6:] = 0
        assert beam_search(model, src, bos=1, eos=2, beam=1) == greedy(model, src, bos=1, eos=2)


def test_beam_search_never_scores_below_greedy():
    model = _model()
    src = torch.randint(4, 25, (5, 8))

    def logprob(ids, row):
        y = torch.tensor([[1] + ids + [2]])
        with torch.no_grad():
            logp = torch.log_softmax(model(src[row : row + 1], y[:, :-1]), -1)
        return float(logp[0, torch.arange(y.shape[1] - 1), y[0, 1:]].sum())

    g = greedy(model, src, 1, 2)
    b = beam_search(model, src, 1, 2, beam=5, length_penalty=0.0)
    for row in range(5):
        assert logprob(b[row], row) >= logprob(g[row], row) - 1e-4


def test_batched_decoding_equals_one_by_one():
    model = _model()
    src = torch.randint(4, 25, (4, 7))
    together = beam_search(model, src, 1, 2, beam=3)
    alone = [beam_search(model, src[i : i + 1], 1, 2, beam=3)[0] for i in range(4)]
    assert together == alone

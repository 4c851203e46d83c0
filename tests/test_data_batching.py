"""Length-bucketed batches under a token budget: coverage, budget, determinism, DDP shards."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.data import Tokenizer, collate, encode_pairs, iterate_batches, load_corpus, make_batches, shard


@pytest.fixture(scope="module")
def enc():
    c = load_corpus("synthetic", n=1500)
    tok = Tokenizer.train_bpe(c.sources + c.targets, vocab_size=400)
    e, _ = encode_pairs(c, tok, max_len=64)
    return e


def _ell(enc, idx):
    return np.maximum(enc.src.lengths[idx], enc.tgt.lengths[idx] + 1)


def test_every_pair_once_and_budget(enc):
    batches = make_batches(enc, max_tokens=600, seed=0)
    allidx = np.concatenate(batches)
    assert sorted(allidx.tolist()) == list(range(len(enc)))
    for b in batches:
        assert len(b) * _ell(enc, b).max() <= 600
    # buckets: pairs of a batch have similar lengths
    spread = np.mean([_ell(enc, b).max() - _ell(enc, b).min() for b in batches])
    assert spread <= 2


def test_deterministic_and_seeded(enc):
    a = make_batches(enc, 600, seed=3, epoch=1)
    b = make_batches(enc, 600, seed=3, epoch=1)
    c = make_batches(enc, 600, seed=3, epoch=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_oversized_pair_gets_its_own_batch(enc):
    batches = make_batches(enc, max_tokens=5, seed=0)
    assert all(len(b) >= 1 for b in batches)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(enc)))


def test_collate_shapes_and_shift(enc):
    idx = make_batches(enc, 600, seed=0)[0]
    src, tgt_in, tgt_out = collate(enc, idx)
    assert src.shape[0] == tgt_in.shape[0] == len(idx) and tgt_in.shape == tgt_out.shape
    for b, r in enumerate(idx):
        x, y = enc[int(r)]
        assert src[b, :len(x)].tolist() == x.tolist() and (src[b, len(x):] == 0).all()
        assert tgt_in[b, 0] == 1 and tgt_in[b, 1:len(y) + 1].tolist() == y.tolist()
        assert tgt_out[b, :len(y)].tolist() == y.tolist() and tgt_out[b, len(y)] == 2
        assert (tgt_in[b, len(y) + 1:] == 0).all() and (tgt_out[b, len(y) + 1:] == 0).all()


@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_shards_partition_each_global_batch(enc, world_size):
    batches = make_batches(enc, 600, seed=5, min_size=world_size)
    assert all(len(b) >= world_size for b in batches)
    for b in batches:
        parts = [shard(b, r, world_size, enc) for r in range(world_size)]
        assert sorted(np.concatenate(parts).tolist()) == sorted(b.tolist())
        assert all(len(p) > 0 for p in parts)
    per_rank = [list(iterate_batches(enc, 600, seed=5, rank=r, world_size=world_size))
                for r in range(world_size)]
    assert len({len(p) for p in per_rank}) == 1  # same number of steps on every rank
    n_src_rows = sum(s.shape[0] for p in per_rank for s, _, _ in p)
    assert n_src_rows == len(enc)


def test_skip_resumes_mid_epoch(enc):
    full = list(iterate_batches(enc, 600, seed=1, epoch=0))
    rest = list(iterate_batches(enc, 600, seed=1, epoch=0, skip=3))
    assert len(rest) == len(full) - 3
    assert all((a[0] == b[0]).all() for a, b in zip(full[3:], rest))


def test_bad_arguments(enc):
    with pytest.raises(ValueError, match="max_tokens"):
        make_batches(enc, 0)
    with pytest.raises(ValueError, match="rank"):
        shard(np.arange(4), 2, 2)

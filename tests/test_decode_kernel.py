"""The fused native decoding step (decode_kernel.c through ``native.decode_read_back``) against its reference, the tensor
code of ``DecodeStep.decode_read_back`` (ATTNLAB_NATIVE_DECODE=0): the same output (≤ 1e-5) and the same count of stored
slots read, on random caches — GQA, a part holding some of the KV heads, empty slots (−1) between the compacted slots
and the appended ones, columns, pages cut by the query's position, more pages asked than there are candidates, keys
resident, stored or lost — with a query's keys in one part or split into several across the threads (``DECODE_CHUNK``,
FlashDecoding's split, merged by the parts' maxima)."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from attnlab.llm.execution.decode_step import DecodeStep
from attnlab.llm.execution.input_state import InputState
from attnlab.llm.execution.kv_cache import Part, Slab
from attnlab.llm.execution.pages import page_summaries
from attnlab.llm.plans.plan import FULL, HeadPlan
from attnlab.nn.mechanisms import native
from attnlab.support import Support, column_mask

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

pytestmark = pytest.mark.skipif(not native.decode_library(), reason=f"no native decoding step: {native.decode_unavailable_reason()}")


def random_step(seed: int, B: int, H_kv: int, r: int, kv: list[int], i: int, page: int, pages: int, d: int = 16, dv: int = 8,
                mean_pages: int = 0):
    """(step, q, part, summaries, q_pos): a layer of H_kv·r query heads (random bands, FULL ones not reading back) and a
    part of the KV heads ``kv`` whose keys up to position i are resident, stored or lost at random."""
    g = torch.Generator().manual_seed(seed)
    H = H_kv * r
    step = DecodeStep([HeadPlan(support=Support(w=4)) for _ in range(H)], 0, H_kv, pages=pages, page=page)
    w = torch.randint(0, i + 3, (H,), generator=g)
    w = torch.where(torch.rand(H, generator=g) < 0.15, FULL, w)
    w[0] = max(int(w[0]), 0)
    step.w_read = w
    step.reads = (w != FULL) & (torch.rand(H, generator=g) < 0.9)
    step.reads[0] = True                                                                     # a head reads back
    step.pages, step.mean_pages = pages, min(mean_pages, pages)
    n = i + 1
    k_all, v_all = torch.randn(B, H_kv, n, d, generator=g), torch.randn(B, H_kv, n, dv, generator=g)
    cols = torch.where(torch.rand(B, H, 3, generator=g) < 0.7, torch.randint(0, n, (B, H, 3), generator=g), -1)
    cols = torch.where(cols == torch.roll(cols, 1, -1), -1, cols)                          # mostly distinct; −1 empty
    summaries = page_summaries(k_all, cols, step.kv_of, page, step.reads)
    H_s = len(kv)
    where = torch.randint(0, 3, (B, H_s, n), generator=g)                                  # 0 resident, 1 stored, 2 lost
    where[..., n - 3:] = 0                                                                   # the newest keys resident
    where[..., 0] = 1                                                                        # a store holds a key at least
    res = [[torch.nonzero(where[b, x] == 0).view(-1) for x in range(H_s)] for b in range(B)]
    sto = [[torch.nonzero(where[b, x] == 1).view(-1) for x in range(H_s)] for b in range(B)]
    L = max(len(p) for row in res for p in row) + 4
    S = max(max(len(p) for row in sto for p in row), 1) + 2
    pos_r = torch.full((B, H_s, L), -1, dtype=torch.long)
    pos_s = torch.full((B, H_s, S), -1, dtype=torch.long)
    for b in range(B):
        for x in range(H_s):
            p, gap = res[b][x], int(torch.randint(0, 4, (1,), generator=g))              # −1 gap before the last 2
            cut = max(len(p) - 2, 0)
            pos_r[b, x, :cut], pos_r[b, x, cut + gap:cut + gap + len(p) - cut] = p[:cut], p[cut:]
            s = sto[b][x][torch.randperm(len(sto[b][x]), generator=g)]
            pos_s[b, x, :len(s)] = s
    kvt = torch.tensor(kv)

    def gather(x, pos):   # (B, H_kv, n, ·) at positions (B, H_s, L) → (B, H_s, L, ·), 0 at −1
        y = torch.gather(x[:, kvt], 2, pos.clamp_min(0)[..., None].expand(*pos.shape, x.shape[-1]))
        return y.masked_fill((pos < 0)[..., None], 0.0)

    hq = (kvt[:, None] * r + torch.arange(r)).reshape(-1)
    flags = torch.gather(column_mask(cols[:, hq], n), -1, pos_r.clamp_min(0).repeat_interleave(r, 1)) & (pos_r >= 0).repeat_interleave(r, 1)
    flags |= torch.rand(flags.shape, generator=g) < 0.05                                    # a flag on any slot
    flags &= (pos_r >= 0).repeat_interleave(r, 1)
    # resident keys as a view with spare room, as the cache keeps them
    k_buf, v_buf = torch.randn(B, H_s, L + 5, d, generator=g), torch.randn(B, H_s, L + 5, dv, generator=g)
    k_buf[:, :, :L], v_buf[:, :, :L] = gather(k_all, pos_r), gather(v_all, pos_r)
    store = Slab(kvt, None, None, None)
    store.store_keys, store.store_values, store.store_pos = gather(k_all, pos_s), gather(v_all, pos_s), pos_s
    part = Part(kvt, k_buf[:, :, :L], v_buf[:, :, :L], pos_r, flags.view(B, H_s, r, L), store=store)
    q = torch.randn(B, H_s * r, 1, d, generator=g)
    return step, q, part, summaries, (kvt, hq), torch.tensor([i])


@contextmanager
def torch_threads(n: int):
    """torch's (and so the native step's) thread count set to ``n`` inside the block."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def both(case, monkeypatch):
    """(out, read) of the native step and of the reference; the native step given the layer's summaries with the part's
    heads (as ``decode_parts`` gives them) and given their rows (as ``PageSummaries.of_heads`` makes them) alike."""
    step, q, part, summaries, heads, q_pos = case
    calls = []
    real = native.decode_read_back
    monkeypatch.setattr(native, "decode_read_back", lambda *a, **k: calls.append(1) or real(*a, **k))
    fast = step.decode_read_back(q, part, 0.3, q_pos, summaries, InputState(), heads=heads)
    sliced = step.decode_read_back(q, part, 0.3, q_pos, summaries.of_heads(*heads), InputState())
    assert len(calls) == 2, "the native step did not run"
    torch.testing.assert_close(fast[0], sliced[0], atol=0, rtol=0)
    assert fast[1] == sliced[1]
    monkeypatch.setenv("ATTNLAB_NATIVE_DECODE", "0")
    native.decode_library.cache_clear()
    ref = step.decode_read_back(q, part, 0.3, q_pos, summaries, InputState(), heads=heads)
    monkeypatch.delenv("ATTNLAB_NATIVE_DECODE")
    native.decode_library.cache_clear()
    assert len(calls) == 2
    return fast, ref


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), B=st.integers(1, 2), H_kv=st.integers(1, 3), r=st.integers(1, 3), i=st.integers(3, 90),
       page=st.sampled_from([1, 4, 16]), pages=st.integers(1, 12), which=st.integers(0, 7), mean=st.integers(0, 12),
       chunk=st.sampled_from([1, 5, 128]), threads=st.integers(1, 3))
def test_the_native_step_equals_the_tensor_step(seed, B, H_kv, r, i, page, pages, which, mean, chunk, threads):
    """… the pages chosen by the bound alone or split with the mean key's score (``mean_pages``); the resident slots
    in parts of ≥ ``chunk`` slots where the KV heads are fewer than twice the threads."""
    kv = [x for x in range(H_kv) if which >> x & 1] or [H_kv - 1]                          # a part: some KV heads
    with pytest.MonkeyPatch.context() as mp, torch_threads(threads):
        mp.setattr(native, "DECODE_CHUNK", chunk)
        (o, read), (o_ref, read_ref) = both(random_step(seed, B, H_kv, r, kv, i, page, pages, mean_pages=mean), mp)
    torch.testing.assert_close(o, o_ref, atol=1e-5, rtol=1e-5)
    assert read == read_ref


@pytest.mark.parametrize("chunk", [128, 7])
@pytest.mark.parametrize("pages,mean", [(1, 0), (3, 0), (50, 0), (4, 2), (50, 25)])   # 50: more than the candidate pages
def test_more_pages_than_candidates_and_reads_from_the_store(pages, mean, chunk, monkeypatch):
    monkeypatch.setattr(native, "DECODE_CHUNK", chunk)
    case = random_step(7, 2, 3, 3, [0, 1, 2], 200, 16, pages, d=64, dv=64, mean_pages=mean)
    (o, read), (o_ref, read_ref) = both(case, monkeypatch)
    torch.testing.assert_close(o, o_ref, atol=1e-5, rtol=1e-5)
    assert read == read_ref and read > 0


def test_a_page_whose_keys_are_all_columns_is_no_candidate(monkeypatch):
    """Head 0's columns fill page 1 (positions 4 … 7 with page 4): its own summary there is ±inf (no key left) and
    the page is no candidate; the other heads may still read it."""
    step, q, part, _, heads, q_pos = random_step(3, 1, 1, 2, [0], 40, 4, 4)
    step.w_read = torch.tensor([2, 2])
    step.reads = torch.tensor([True, True])
    cols = torch.tensor([[[4, 5, 6, 7], [-1, -1, -1, -1]]])
    g = torch.Generator().manual_seed(0)
    k_all = torch.randn(1, 1, 41, 16, generator=g)
    summaries = page_summaries(k_all, cols, step.kv_of, 4, step.reads)
    assert torch.isinf(summaries.column_min[0, 0]).all()
    pos = part.positions
    part.flags = ((pos >= 4) & (pos <= 7))[:, :, None, :] & torch.tensor([True, False]).view(1, 1, 2, 1)
    (o, read), (o_ref, read_ref) = both((step, q, part, summaries, heads, q_pos), monkeypatch)
    torch.testing.assert_close(o, o_ref, atol=1e-5, rtol=1e-5)
    assert read == read_ref


def test_the_switch_falls_back_to_the_tensor_step(monkeypatch):
    monkeypatch.setenv("ATTNLAB_NATIVE_DECODE", "0")
    native.decode_library.cache_clear()
    assert native.decode_library() is None and native.decode_unavailable_reason() == "ATTNLAB_NATIVE_DECODE=0"
    monkeypatch.delenv("ATTNLAB_NATIVE_DECODE")
    native.decode_library.cache_clear()
    assert native.decode_library() is not None


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), H_kv=st.integers(1, 3), r=st.integers(1, 3), i=st.integers(0, 60),
       sliding=st.sampled_from([None, 5, 20]), chunk=st.sampled_from([1, 4, 128]))
def test_the_native_band_and_columns_step_equals_the_masked_softmax(seed, H_kv, r, i, sliding, chunk):
    """Without pages (``DecodeStep.decode``, n = 1): band ∪ columns over the cached slots, a sliding window, every-key heads."""
    g = torch.Generator().manual_seed(seed)
    H, B, L = H_kv * r, 2, i + 6
    step = DecodeStep([HeadPlan(support=Support(w=4)) for _ in range(H)], 0, H_kv, sliding_window=sliding)
    w = torch.randint(0, i + 3, (H,), generator=g)
    step.w_read = torch.where(torch.rand(H, generator=g) < 0.2, FULL, w)
    pos = torch.where(torch.rand(B, H_kv, L, generator=g) < 0.8, torch.randint(0, i + 1, (B, H_kv, L), generator=g), -1)
    flags = (torch.rand(B, H_kv, r, L, generator=g) < 0.2) & (pos >= 0)[:, :, None]
    k, v = torch.randn(B, H_kv, L, 16, generator=g), torch.randn(B, H_kv, L, 8, generator=g)
    q = torch.randn(B, H, 1, 16, generator=g)
    calls = []
    real = native.decode_read_back
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native, "DECODE_CHUNK", chunk)
        mp.setattr(native, "decode_read_back", lambda *a, **kw: calls.append(1) or real(*a, **kw))
        o = step.decode(q, k, v, 0.3, torch.tensor([i]), pos, InputState(), flags)
        mp.setenv("ATTNLAB_NATIVE_DECODE", "0")
        native.decode_library.cache_clear()
        o_ref = step.decode(q, k, v, 0.3, torch.tensor([i]), pos, InputState(), flags)
    native.decode_library.cache_clear()
    assert len(calls) == 1
    torch.testing.assert_close(o, o_ref, atol=1e-5, rtol=1e-5)

"""Decoding by index (``execution.page_table``): a step reads the slots its page table names, equal to the dense
masked softmax over every cached slot; the layer's decoding hands the seam a table, and the CPU's fused step sits
behind ``CpuBackend``."""

from __future__ import annotations

import pytest
import torch

from attnlab.llm.execution.backend import PageKeys
from attnlab.llm.execution.cpu_backend import CpuBackend
from attnlab.llm.execution.flex_backend import FlexBackend
from attnlab.llm.execution.input_state import InputState
from attnlab.llm.execution.page_table import PageTable, allowed_of, read_by_index, table_of
from attnlab.nn.softmax import masked_softmax


def dense(q, k, v, scaling, allowed, pages=None):
    """The reference: every query head over every cached slot of its KV head, a masked softmax (∪ the pages' keys)."""
    B, H, t, d = q.shape
    r = H // k.shape[1]
    keys, vals = k.repeat_interleave(r, 1), v.repeat_interleave(r, 1)                     # (B, H, L, ·)
    mask = allowed.reshape(B, H, t, -1)
    if pages is not None:
        keys, vals = torch.cat([keys, pages.keys], 2), torch.cat([vals, pages.values], 2)
        mask = torch.cat([mask, pages.ok[:, :, None]], -1)
    return masked_softmax((q @ keys.transpose(-1, -2)) * scaling, mask) @ vals


@pytest.mark.parametrize("p", [0.0, 0.05, 0.5, 1.0])
def test_table_round_trips_its_mask_in_ascending_slots(p):
    gen = torch.Generator().manual_seed(1)
    allowed = torch.rand(2, 3, 2, 4, 37, generator=gen) < p
    table = table_of(allowed)
    assert table.slots.shape[-1] == int(allowed.sum(-1).max())
    assert torch.equal(allowed_of(table, 37), allowed)
    s = table.slots
    ok = s >= 0
    assert bool((s[..., 1:][ok[..., 1:]] > s[..., :-1][ok[..., 1:]]).all())                 # ascending, −1 after them


@pytest.mark.parametrize("backend", [CpuBackend(), FlexBackend()], ids=["cpu", "flex"])
@pytest.mark.parametrize("t, with_pages", [(1, False), (1, True), (3, False)])
def test_decoding_by_index_equals_the_dense_reference(backend, t, with_pages):
    gen = torch.Generator().manual_seed(0)
    B, H_s, r, L, X, d = 2, 2, 3, 50, 6, 16
    q = torch.randn(B, H_s * r, t, d, generator=gen)
    k, v = torch.randn(B, H_s, L, d, generator=gen), torch.randn(B, H_s, L, d, generator=gen)
    allowed = torch.rand(B, H_s, r, t, L, generator=gen) < 0.2
    allowed[0, 0, 0] = False                                                               # a query with no slot: 0
    pages = None
    if with_pages:
        pages = PageKeys(torch.randn(B, H_s * r, X, d, generator=gen), torch.randn(B, H_s * r, X, d, generator=gen),
                         torch.rand(B, H_s * r, X, generator=gen) < 0.5)
    out = backend.decode(q, k, v, 0.3, table_of(allowed), pages)
    ref = dense(q, k, v, 0.3, allowed, pages).nan_to_num(0.0)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    by_index = read_by_index(q, k, v, 0.3, table_of(allowed), pages) if t == 1 or not with_pages else ref
    torch.testing.assert_close(by_index, ref, atol=1e-5, rtol=1e-5)


def test_by_index_reads_only_the_table_slots():
    """A slot outside the table changes nothing, however large its score (it is never gathered)."""
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, 1, 8, generator=gen)
    k, v = torch.randn(1, 1, 30, 8, generator=gen), torch.randn(1, 1, 30, 8, generator=gen)
    table = PageTable(torch.tensor([[[[[3, 7, 20]], [[0, 29, -1]]]]]))                    # (1, 1, 2, 1, 3)
    a = read_by_index(q, k, v, 0.5, table)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 10], v2[:, :, 10] = 1e4, 1e4                                                  # slot 10: read by no head
    assert torch.equal(read_by_index(q, k2, v2, 0.5, table), a)


def test_a_layer_hands_the_seam_a_page_table_and_the_fused_step_stays_behind_the_cpu_backend(monkeypatch):
    from attnlab.llm.execution.attention import LayerRunner
    from attnlab.llm.plans.plan import HeadPlan
    from attnlab.nn.mechanisms import native
    from attnlab.support import Support

    class Seen(CpuBackend):
        tables = []

        def decode(self, q, k, v, scaling, table=None, pages=None):
            self.tables.append(table)
            return super().decode(q, k, v, scaling, table, pages)

    gen = torch.Generator().manual_seed(3)
    heads = [HeadPlan(support=Support(w=4, columns=(0, 1))), HeadPlan.full(), HeadPlan(support=Support(w=2)),
             HeadPlan(support=Support(w=6, columns=(5,)))]
    L = 40
    q = torch.randn(1, 4, 1, 8, generator=gen)
    k, v = torch.randn(1, 2, L, 8, generator=gen), torch.randn(1, 2, L, 8, generator=gen)
    pos = torch.arange(L).expand(1, 2, L)
    q_pos = torch.tensor([L - 1])
    seen = Seen()
    monkeypatch.setattr(native, "decode_read_back", lambda *a, **kw: pytest.fail("fused step called above the seam"))
    monkeypatch.setattr(Seen, "decode_fused", lambda self, *a, **kw: None)                 # no fused step: the table
    runner = LayerRunner(heads, 0, 2, backend=seen)
    state = InputState()                                               # no prefill: no decoding columns chosen
    out = runner.decode(q, k, v, 0.5, q_pos, pos, state)
    assert len(seen.tables) == 1 and isinstance(seen.tables[0], PageTable)
    allowed = runner.allowed(q_pos, pos, runner.column_flags(pos, state))
    assert torch.equal(allowed_of(seen.tables[0], L), allowed)
    torch.testing.assert_close(out, dense(q, k, v, 0.5, allowed), atol=1e-5, rtol=1e-5)


def test_the_hosts_bound_on_a_steps_slots_holds_after_a_prefill():
    """Off the CPU the table's width comes from the plan (band + columns + pages), never read back from the device:
    after a real prefill into a PlanCache and decoding steps, every query reads at most that many slots."""
    import numpy as np

    from attnlab.llm.execution.attention import apply_plan, attention_modules
    from attnlab.llm.execution.kv_cache import PlanCache
    from attnlab.llm.plans.plan import HeadPlan, Plan
    from attnlab.support import Support
    from tiny_llama import tiny_model

    model = tiny_model()
    row = [HeadPlan(support=Support(w=8, columns=np.array([0, 1])), dynamic=3),
           HeadPlan(support=Support(w=20), dynamic=2), HeadPlan(support=Support(w=4)), HeadPlan(support=Support(w=12))]
    apply_plan(model, Plan([list(row) for _ in range(2)], 2, "t", 0.5, 200))
    ids = torch.randint(0, 100, (1, 200), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        cache = PlanCache(model)
        model.generate(ids, past_key_values=cache, max_new_tokens=5, do_sample=False)
    narrower = 0
    for mod, layer in zip(attention_modules(model), cache.layers):
        runner = mod.attnlab_layer
        for part in layer.parts():   # the KV heads of a ragged cache apart
            L = part.positions.shape[-1]
            counts = runner.allowed(torch.tensor([int(layer.seen)]), part.positions, part.flags, part.kv).sum(-1)
            bound = runner.reads_at_most(part.kv, L, layer.state, device="cuda")
            assert int(counts.max()) <= bound <= L
            narrower += bound < L
    assert narrower   # the table is narrower than the cache somewhere (the keys since the last compaction)

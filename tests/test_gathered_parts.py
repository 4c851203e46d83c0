"""The flex backend's gathered parts: band ⊔ columns ⊔ key blocks, merged by their log-sum-exp, equal the dense masked
softmax over the seam's support, whatever the parts (repeated slots, FULL heads, tails, diagonals, GQA)."""

from __future__ import annotations

import pytest
import torch

from attnlab.llm.execution.gathered_parts import block_part, column_part, gathered_prefill, merge_parts
from attnlab.llm.plans.plan import FULL
from attnlab.support import NO_DIAGONAL

from test_flex_backend import B, D, H, H_KV, masked_reference, random_parts

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


def layer(n: int, seed: int, g: int = 3, **kw):
    """A random layer: ``random_parts`` with g column slots a head (some empty, some repeated in the property test)."""
    gen = torch.Generator().manual_seed(seed)
    parts = random_parts(n, gen, **kw)
    cols = torch.randint(-1, n, (B, H, g), generator=gen)
    parts = parts._replace(columns=cols)
    q = torch.randn(B, H, n, D, generator=gen)
    k, v = (torch.randn(B, H_KV, n, D, generator=gen) for _ in range(2))
    return parts, q, k, v


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 150), seed=st.integers(0, 10**6), g=st.sampled_from([0, 3, 4]),
       w=st.lists(st.integers(-1, 120), min_size=H, max_size=H), tails=st.lists(st.integers(0, 60), min_size=H, max_size=H))
def test_property_gathered_prefill_equals_the_dense_reference(n, seed, g, w, tails):
    parts, q, k, v = layer(n, seed, g=g, w=[FULL if x < 0 else x for x in w], tails=tails)
    if g > 1:   # repeated slots and a slot on a diagonal of the last row: each key read once
        parts.columns[:, :, -1] = parts.columns[:, :, 0]
        parts.diagonals[:, 0, 0] = torch.where(parts.columns[:, 0, 1] >= 0, parts.columns[:, 0, 1] - (n - 1), NO_DIAGONAL)
    out = gathered_prefill(parts, q, k, v, D ** -0.5, t=16)
    torch.testing.assert_close(out, masked_reference(parts, q, k, v, D ** -0.5, n).to(out.dtype), atol=3e-5, rtol=3e-5)


def test_parts_are_disjoint_and_their_merge_is_the_softmax_over_the_union():
    # columns and key blocks alone (no band beyond the diagonal, no tail): ℓ of each part and of the union, by hand
    n, scaling = 64, D ** -0.5
    parts, q, k, v = layer(n, 3, g=2, w=(0, 0, 0, 0), tails=(0, 0, 0, 0), counts=(0, 0, 2, 1))
    parts = parts._replace(diagonals=torch.full_like(parts.diagonals, NO_DIAGONAL))
    o_c, l_c = column_part(parts, q, k, v, scaling)
    o_k, l_k, heads = block_part(parts, q, k, v, scaling)
    assert heads.tolist() == [2, 3]
    s = (q @ k[:, parts.kv_of].transpose(-1, -2)) * scaling                          # (B, H, n, n)
    diag = torch.eye(n, dtype=torch.bool).expand(B, H, n, n)
    lse_a = torch.logsumexp(s.masked_fill(~diag, float("-inf")), -1)
    o_a = v[:, parts.kv_of]                                                          # the diagonal alone: v_i
    out = merge_parts(o_a, lse_a, [(o_c, l_c, None), (o_k, l_k, heads)])
    torch.testing.assert_close(out, masked_reference(parts, q, k, v, scaling, n), atol=3e-5, rtol=3e-5)
    # row 0 reads its own key only (the band's diagonal): the gathered parts hold nothing there
    assert torch.isneginf(l_c[:, :, 0]).all() and torch.isneginf(l_k[:, :, 0]).all()


def test_bf16_inputs_keep_fp32_scores_in_the_gathered_parts():
    n = 96
    parts, q, k, v = layer(n, 8, g=1)
    ref = masked_reference(parts, q, k, v, D ** -0.5, n)
    got = gathered_prefill(parts, q.bfloat16(), k.bfloat16(), v.bfloat16(), D ** -0.5, t=16)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), ref, atol=3e-2, rtol=3e-2)


def test_a_layer_of_fixed_columns_builds_its_block_mask_once_per_plan():
    # streaming-llm's sinks: nothing chosen per input, so the BlockMask is the plan's and is reused
    from attnlab.llm.execution.block_masks import dense_of, layer_block_mask
    from attnlab.llm.execution.layer_plan import LayerPlan
    from attnlab.llm.plans.plan import HeadPlan
    from attnlab.support import Support

    from test_flex_backend import dense_support

    n = 100
    heads = [HeadPlan(Support(w=w, columns=[0, 1, 2, 3])) for w in (5, 9, 20, 9)]
    plan = LayerPlan(heads, 0, H_KV)
    q = torch.randn(1, H, n, D)
    cols, diagonals = plan.choose_columns(q, torch.randn(1, H_KV, n, D), D ** -0.5)
    parts = plan.parts(cols, diagonals, plan.choose_blocks(q, q[:, :H_KV], n), n)
    assert parts.fixed == ((0, 1, 2, 3),) * H
    a, b = layer_block_mask(parts, n, "cpu", 16), layer_block_mask(parts._replace(columns=cols.clone()), n, "cpu", 16)
    assert a is b
    assert torch.equal(dense_of(a, 1, H, n), dense_support(parts, n))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the gathered parts beside compiled FlexAttention, bf16")
def test_gathered_prefill_on_cuda_bf16_equals_the_dense_reference():
    # compiled FlexAttention's log-sum-exp (return_aux) and bmm(out_dtype=float32) on the device, every part at once
    n = 1000
    parts, q, k, v = layer(n, 4, g=8)
    ref = masked_reference(parts, q, k, v, D ** -0.5, n)
    dev = parts._replace(columns=parts.columns.cuda(), diagonals=parts.diagonals.cuda(), blocks=parts.blocks.cuda(), kv_of=parts.kv_of.cuda())
    got = gathered_prefill(dev, q.cuda().bfloat16(), k.cuda().bfloat16(), v.cuda().bfloat16(), D ** -0.5)
    assert got.dtype == torch.bfloat16 and got.is_cuda
    torch.testing.assert_close(got.float().cpu(), ref, atol=3e-2, rtol=3e-2)

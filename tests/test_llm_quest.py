"""Quest: the page bound is an upper bound of every score in the page; with every page in budget it is full attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from attnlab.errors import UserError  # noqa: E402
from attnlab.llm import methods  # noqa: E402
from attnlab.llm.execution.attention import attention_modules  # noqa: E402
from attnlab.llm.execution.input_state import InputState  # noqa: E402
from attnlab.llm.execution.pages import page_upper_bound, quest_pages  # noqa: E402


def tiny_model(seed=0, layers=3):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    return LlamaForCausalLM(cfg).eval()


@settings(max_examples=60, deadline=None)
@given(L=st.integers(1, 70), page=st.integers(1, 20), seed=st.integers(0, 10**6), scale=st.floats(0.01, 100))
def test_page_bound_is_at_least_every_score_in_the_page(L, page, seed, scale):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 4, 3, 8, generator=g, dtype=torch.float64) * scale
    k = torch.randn(1, 2, L, 8, generator=g, dtype=torch.float64) * scale
    pos = torch.arange(L).expand(1, 2, L)
    U = page_upper_bound(q, k, pos, page)                                 # (1, 4, 3, P)
    s = q.view(1, 2, 2, 3, 8) @ k[:, :, None].transpose(-1, -2)           # (1, 2, 2, 3, L)
    s = s.view(1, 4, 3, L)
    for j in range(L):
        assert bool((U[..., j // page] >= s[..., j] - 1e-9 * scale**2).all())
    # and it is attained when a page holds one key
    if page == 1:
        assert torch.allclose(U, s)


def test_pages_are_the_top_bounds_and_the_current_page_always():
    g = torch.Generator().manual_seed(0)
    U = torch.randn(1, 2, 1, 10, generator=g)
    q_pos = torch.tensor([9 * 16 + 3])
    chosen = quest_pages(U, q_pos, 16, 3)[0, :, 0].numpy()
    for h in range(2):
        want = {9} | set(np.argsort(-U[0, h, 0, :9].numpy())[:2].tolist())
        assert set(np.flatnonzero(chosen[h]).tolist()) == want


def test_every_page_in_budget_decodes_like_full_attention():
    model = tiny_model(1)
    ids = torch.randint(0, 100, (1, 90), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=6, do_sample=False, output_logits=True, return_dict_in_generate=True)
        m = methods.get("quest", tokens=4096)
        m.prepare(model, 90)
        with m.applied(model):
            out = model.generate(ids, past_key_values=m.new_cache(model), max_new_tokens=6, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True)
    assert torch.equal(out.sequences, ref.sequences)
    for a, b in zip(out.logits, ref.logits):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    small = methods.get("quest", tokens=16)                        # one page: the current one alone
    small.prepare(model, 90)
    with torch.no_grad(), small.applied(model):
        few = model.generate(ids, past_key_values=small.new_cache(model), max_new_tokens=2, do_sample=False,
                             output_logits=True, return_dict_in_generate=True)
    assert torch.allclose(few.logits[0], ref.logits[0], atol=1e-4)          # the prefill is full
    assert not torch.allclose(few.logits[1], ref.logits[1], atol=1e-3)         # the first decoded step is not


def test_a_small_budget_reads_only_its_pages():
    """Layer 2 (past the dense ones) at 2 pages of 16: the output equals a masked softmax over those pages only."""
    model = tiny_model(2)
    m = methods.get("quest", tokens=32)
    m.prepare(model, 100)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 1, 16, generator=g)
    k, v = torch.randn(1, 2, 101, 16, generator=g), torch.randn(1, 2, 101, 16, generator=g)
    pos = torch.arange(101).expand(1, 2, 101)
    with m.applied(model):
        runners = [mod.attnlab_layer for mod in attention_modules(model)]
        out = runners[2].decode(q, k, v, 0.25, torch.tensor([100]), pos, InputState())
        dense = runners[0].decode(q, k, v, 0.25, torch.tensor([100]), pos, InputState())
    assert not torch.allclose(out, dense)
    U = page_upper_bound(q, k, pos, 16)
    for h in range(4):
        pages = {6} | set(torch.topk(U[0, h, 0, :6], 1).indices.tolist())
        keys = [j for j in range(101) if j // 16 in pages]
        s = (q[0, h, 0] @ k[0, h // 2, keys].T) * 0.25
        torch.testing.assert_close(out[0, h, 0], torch.softmax(s, -1) @ v[0, h // 2, keys])


@pytest.mark.parametrize("opts,word", [({"page": 0}, "page"), ({"tokens": 0}, "tokens"), ({"page": 5000}, "page")])
def test_options_out_of_range_name_the_option(opts, word):
    with pytest.raises(UserError, match=word):
        methods.get("quest", **opts)

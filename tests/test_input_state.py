"""The state of one input is its own object (``attnlab.llm.execution.input_state``): made by the input's prefill, owned
by its cache layer, handed to its decoding steps; the runner holds the plan only."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from attnlab.llm.execution.attention import apply_plan, attention_modules  # noqa: E402
from attnlab.llm.execution.input_state import InputState  # noqa: E402
from attnlab.llm.execution.kv_cache import PlanCache  # noqa: E402
from attnlab.llm.plans.plan import HeadPlan, Plan  # noqa: E402
from attnlab.support import Support  # noqa: E402

N, STEPS = 160, 6


def plan(pages: int) -> Plan:
    """Dynamic columns, key blocks and a voting tail: each input chooses its own decoding columns."""
    row = [HeadPlan(support=Support(w=8, columns=np.array([0])), dynamic=3),
           HeadPlan(support=Support(w=6), dynamic=2, blocks=1),
           HeadPlan(support=Support(w=4), dynamic=2, tail=8, kept=32),
           HeadPlan(support=Support(w=8), dynamic=3)]
    return Plan([list(row) for _ in range(2)], 2, "test", 0.5, N, pages=pages)


def prompts():
    g = torch.Generator().manual_seed(11)
    return [torch.randint(0, 100, (1, N), generator=g) for _ in range(2)]


def step(model, cache, token):
    """One greedy decoding step: (its logits (vocab,), the next token (1, 1))."""
    logits = model(input_ids=token, cache=cache, use_cache=True).logits[0, -1]
    return logits, logits.argmax().view(1, 1)


@pytest.mark.parametrize("pages", [0, 1], ids=["band+columns", "read-back"])
def test_two_inputs_decoded_alternately_each_read_their_own_prefills_columns(pages, monkeypatch):
    """Two inputs prefilled one after the other, then decoded step by step in turn (each in its own PlanCache): every
    step's logits equal those of the same input decoded alone, and its cache layers hold its own prefill's columns."""
    from tiny_llama import tiny_model

    import attnlab.llm.execution.kv_cache as kv_cache

    monkeypatch.setattr(kv_cache, "EVICT_EVERY", 2)   # compactions between the steps too, each by its input's columns
    model = tiny_model()
    apply_plan(model, plan(pages))
    xs = prompts()
    with torch.no_grad():
        alone = []
        for x in xs:
            cache = PlanCache(model)
            out = model(input_ids=x, cache=cache, use_cache=True).logits[0, -1]
            rows, token = [out], out.argmax().view(1, 1)
            for _ in range(STEPS):
                logits, token = step(model, cache, token)
                rows.append(logits)
            alone.append(rows)
        caches = [PlanCache(model) for _ in xs]
        first = [model(input_ids=x, cache=c, use_cache=True).logits[0, -1] for x, c in zip(xs, caches)]
        columns = [[layer.state.decode_columns.clone() for layer in c.layers] for c in caches]
        assert any(not torch.equal(a, b) for a, b in zip(*columns)), "the two inputs chose the same columns"
        tokens = [f.argmax().view(1, 1) for f in first]
        turns = [[f] for f in first]
        for _ in range(STEPS):
            for i, c in enumerate(caches):   # input 0's step, then input 1's: each after the other's prefill and step
                logits, tokens[i] = step(model, c, tokens[i])
                turns[i].append(logits)
    for i in range(2):
        for t, (a, b) in enumerate(zip(turns[i], alone[i])):
            assert torch.equal(a, b), (i, t)
        for layer, cols in zip(caches[i].layers, columns[i]):
            assert torch.equal(layer.state.decode_columns, cols)   # its own prefill's, after the other input ran


def test_the_runner_holds_no_state_of_an_input():
    """After a prefill and decoding steps of an input, every attribute of each layer's runner is the same object as
    before that input (the plan, its tables, the model run's cache reference); no attribute holds an ``InputState`` or
    one of its tensors: the input's state is in its cache layer alone."""
    from tiny_llama import tiny_model

    model = tiny_model()
    apply_plan(model, plan(1))
    runners = [mod.attnlab_layer for mod in attention_modules(model)]
    xs = prompts()

    def run(x):
        cache = PlanCache(model)
        with torch.no_grad():
            model.generate(x, cache=cache, max_new_tokens=3, do_sample=False)
        return cache

    first = run(xs[0])
    before = [dict(vars(r)) for r in runners]
    second = run(xs[1])
    for r, was, c1, c2 in zip(runners, before, first.layers, second.layers):
        now = vars(r)
        assert now.keys() == was.keys() and all(now[k] is was[k] for k in now if k != "cache"), sorted(now)
        assert not any(isinstance(v, InputState) for v in now.values())
        mine = {x.data_ptr() for layer in (c1, c2) for x in vars(layer.state).values() if isinstance(x, torch.Tensor)}
        held = [x for v in now.values() for x in (v if isinstance(v, (list, tuple)) else [v])
                if isinstance(x, torch.Tensor)]
        assert not mine & {x.data_ptr() for x in held}
        assert isinstance(c1.state, InputState) and c1.state is not c2.state

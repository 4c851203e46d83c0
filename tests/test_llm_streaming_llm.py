"""StreamingLLM at a KV compression ratio: the cache keeps the 4 sinks and the ⌊n(1−c)⌋ − 4 most recent tokens,
and the next decoded token reads exactly those (plus itself)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
from tiny_llama import tiny_model  # noqa: E402

from attnlab.errors import UserError  # noqa: E402
from attnlab.llm import methods  # noqa: E402


@pytest.mark.parametrize("n,c", [(100, 0.5), (257, 0.75), (64, 0.25)])
def test_cache_keeps_sinks_and_the_recent_tokens_of_the_ratio(n, c):
    model = tiny_model()
    ids = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(n))
    m = methods.get("streaming-llm", compression=c)
    m.prepare(model, n)
    k = int(n * (1 - c))
    assert m.kv_tokens(n) == k
    with m.applied(model), torch.no_grad():
        cache = m.new_cache(model)
        model(ids, past_key_values=cache, use_cache=True)
    want = list(range(4)) + list(range(n - (k - 4), n))
    for layer in cache.layers:
        for g in range(2):
            assert sorted(p for p in layer.positions[0, g].tolist() if p >= 0) == want


def test_a_ratio_leaving_only_the_sinks_is_refused():
    model = tiny_model()
    m = methods.get("streaming-llm", compression=0.99)
    with pytest.raises(UserError, match="compression"):
        m.prepare(model, 300)
    with pytest.raises(UserError, match="compression"):
        methods.get("streaming-llm", compression=1.5)

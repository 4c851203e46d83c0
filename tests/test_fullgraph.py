"""One layer's prefill compiles whole: ``torch.compile(fullgraph=True)`` captures the selection (the last queries'
scores, the columns' and key blocks' top-k, as one batch over heads), the index lists and BlockMask built from them,
and the FlexAttention call as one graph — no graph break, no value read back to Python — and the compiled layer
gives the eager layer's output and choice.

On the CPU the graph runs through AOT autograd's eager backend: Inductor's CPU FlexAttention template refuses a
BlockMask built inside the same graph (torch 2.13: "Cannot Append Choice: Pointwise"); on CUDA the GPU check
compiles it with Inductor (``benchmarks/gpu_check.py``, section "compiled layer").
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from gpu_check import beta_heads  # noqa: E402

from attnlab.llm.execution.attention import LayerRunner  # noqa: E402
from attnlab.llm.execution.flex_backend import FlexBackend  # noqa: E402
from attnlab.nn.mechanisms.flex import flex_available  # noqa: E402

pytestmark = pytest.mark.skipif(not flex_available(), reason="FlexAttention needs a C++ compiler on the CPU")


@pytest.mark.parametrize("K", [0, 2], ids=["columns", "columns+key-blocks"])
def test_one_layer_compiles_whole_and_matches_eager(K):
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    H, H_kv, n = 8, 2, 512
    q = torch.randn(1, H, n, 32, generator=g)
    k, v = torch.randn(1, H_kv, n, 32, generator=g), torch.randn(1, H_kv, n, 32, generator=g)
    runner = LayerRunner(beta_heads(H, n, 0.2, dynamic=8, K=K or 1, blocked_every=2 if K else 10**9), 0, H_kv,
                         backend=FlexBackend(gather=False, tile=64))
    eager, state = runner.prefill(q, k, v, 32 ** -0.5)
    columns = state.decode_columns.clone()
    graphs = []

    def count(gm, example_inputs):   # every graph dynamo captures, run as AOT autograd's eager
        graphs.append(gm)
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(fw_compiler=lambda g_, _: g_)(gm, example_inputs)

    layer = torch.compile(lambda q, k, v: runner.prefill(q, k, v, 32 ** -0.5), fullgraph=True, backend=count)
    out, compiled_state = layer(q, k, v)
    assert len(graphs) == 1
    names = " ".join(str(node.target) for node in graphs[0].graph.nodes)
    assert "topk" in names and "flex_attention" in names                  # the selection and the kernel, one graph
    torch.testing.assert_close(out, eager, atol=1e-5, rtol=1e-5)
    assert torch.equal(compiled_state.decode_columns, columns)

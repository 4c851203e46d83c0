"""The operations one layer's prefill dispatches, counted by a ``TorchDispatchMode``: the selection (the last
queries' scores, the columns' top-k, the key blocks' top-k per query block), the index lists and the BlockMask, and
the attention kernel — on the path meant to be fast, ``FlexBackend(gather=False)``: the selection as one batch over
heads (``indexed_selection``), every per-input part handed to one FlexAttention call as tile indices.

The count must not grow with n, the number of heads, the number of columns or of key blocks (no Python loop over
them).  The kernel is counted as one operation: FlexAttention's compiled kernel is one launch on CUDA, and on the CPU
the test stands in for it (its CPU interior is not what runs on a GPU).  The measured count is pinned from above, so
that an added per-call operation shows here.

Measured (torch 2.13, CPU): 134 operations a layer at any size (the per-head selection it replaces: 361 at 8 heads,
575 at 16).  The goal of ≤ 40 is not reached: most of the 134 are small operations on index tensors (the tiles of
the columns and key blocks, the BlockMask's sorted index lists, views); one layer compiled whole (``test_fullgraph``)
is the way to fuse them into a few kernels, which Inductor does on CUDA.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from gpu_check import beta_heads  # noqa: E402  (the plan the GPU check times: band, 4 sinks, dynamic columns, key blocks)

from attnlab.llm.execution.attention import LayerRunner  # noqa: E402
from attnlab.llm.execution.cpu_backend import CpuBackend  # noqa: E402
from attnlab.llm.execution.flex_backend import FlexBackend  # noqa: E402

CEILING = 140   # measured: 134 on torch 2.13 (CPU), the kernel included; the goal of ≤ 40 is not reached (docstring)


class Count(TorchDispatchMode):
    """Counts every ATen operation dispatched inside it (views included)."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture
def one_kernel(monkeypatch):
    """FlexAttention's call as one counted operation (its output: an empty tensor of q's shape)."""
    import attnlab.nn.mechanisms.flex as flex

    calls = []

    def kernel(q, k, v, block_mask, scale=None, enable_gqa=False):
        calls.append(block_mask)
        return torch.empty_like(q)

    def kernel_lse(q, k, v, block_mask, scale=None, enable_gqa=False):   # the gathered path's band, with its ℓ
        calls.append(block_mask)
        return torch.zeros_like(q), torch.zeros(q.shape[:3])

    monkeypatch.setattr(flex, "flex_attention_compiled", kernel)
    monkeypatch.setattr(flex, "flex_attention_lse", kernel_lse)
    return calls


def prefill_ops(H: int, n: int, dynamic: int, K: int, backend) -> int:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, H, n, 32, generator=g)
    k, v = torch.randn(1, H // 4, n, 32, generator=g), torch.randn(1, H // 4, n, 32, generator=g)
    runner = LayerRunner(beta_heads(H, n, 0.1, dynamic=dynamic, K=K), 0, H // 4, backend=backend)
    runner.prefill(q, k, v, 32 ** -0.5)                                       # the plan's constants built once
    with Count() as c:
        runner.prefill(q, k, v, 32 ** -0.5)
    return sum(c.ops.values()) + 1                                            # + the kernel


def test_a_layers_prefill_dispatches_as_many_operations_at_any_size(one_kernel):
    fast = lambda: FlexBackend(gather=False)   # noqa: E731
    base = prefill_ops(8, 1024, 16, 4, fast())
    assert one_kernel, "the layer did not reach FlexAttention"
    assert prefill_ops(8, 2048, 16, 4, fast()) == base                        # n
    assert prefill_ops(32, 1024, 16, 4, fast()) == base                       # heads
    assert prefill_ops(8, 1024, 64, 4, fast()) == base                        # columns
    assert prefill_ops(8, 1024, 16, 8, fast()) == base                        # key blocks
    assert base <= CEILING, f"{base} operations a layer (pinned at ≤ {CEILING})"


def test_the_gathered_path_does_not_grow_either(one_kernel):
    """CUDA's default path (columns and key blocks gathered beside the band, merged by log-sum-exp): more operations,
    as many at any size."""
    base = prefill_ops(8, 1024, 16, 4, FlexBackend())
    assert prefill_ops(32, 2048, 64, 8, FlexBackend()) == base


def test_the_per_head_path_grows_with_heads(one_kernel):
    """The CPU backend's selection loops over heads (its native kernels, bit-equal to the recorded outputs): the
    count that the batched selection removes."""
    assert prefill_ops(16, 1024, 16, 4, CpuBackend()) > prefill_ops(8, 1024, 16, 4, CpuBackend())


def test_the_batched_selection_chooses_what_the_per_head_one_chooses():
    """The same columns and key blocks (as sets per head) and the same held keys, on inputs without ties."""
    g = torch.Generator().manual_seed(1)
    H, n = 8, 700
    q, k = torch.randn(2, H, n, 16, generator=g), torch.randn(2, 2, n, 16, generator=g)
    v = torch.randn(2, 2, n, 16, generator=g)
    heads = beta_heads(H, n, 0.1, dynamic=12, blocked_every=2, K=3)
    picked = {}
    for name, backend in (("batched", FlexBackend(gather=False, tile=64)), ("per head", CpuBackend())):
        runner = LayerRunner(heads, 0, 2, backend=backend)
        out, state = runner.prefill(q, k, v, 0.25)
        picked[name] = (state.decode_columns, state.blocks, out)
    (c1, b1, o1), (c2, b2, o2) = picked["batched"], picked["per head"]

    def sets(x):   # each row's chosen indices (a head's columns, a query block's key blocks), as a set
        return [sorted(t for t in row if t >= 0) for row in x.reshape(-1, x.shape[-1]).tolist()]

    assert sets(c1) == sets(c2) and sets(b1) == sets(b2)
    torch.testing.assert_close(o1, o2, atol=2e-5, rtol=2e-5)

"""The CPU backend's slash lines (``llm.execution.diagonal_keys``): band ∪ columns from the native kernel with its
log-sum-exp, the diagonals joined in row spans — the dense masked softmax over the union, whatever the span, with
diagonals on the band, on a column, out of range or empty, GQA and a batch; and memory O(span), not O(n·s·c)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

import attnlab.llm.execution.diagonal_keys as dk
from attnlab.llm.execution.backend import PrefillParts, dense_support
from attnlab.llm.execution.cpu_backend import CpuBackend
from attnlab.nn.mechanisms import native
from attnlab.nn.softmax import masked_softmax
from attnlab.support import NO_DIAGONAL

pytestmark = pytest.mark.skipif(not native.available(), reason="the native kernel is not built here: "
                                f"{native.unavailable_reason()}")


def parts_of(w, cols, diags, H, H_kv, n):
    B = cols.shape[0]
    return PrefillParts(w=tuple(w), columns=cols, diagonals=diags, blocks=torch.full((B, H, 1, 0), -1, dtype=torch.long),
                        block_counts=(0,) * H, tails=(0,) * H, kv_of=torch.arange(H) // (H // H_kv), block=16)


def dense(q, k, v, scaling, mask, kv_of):
    return masked_softmax((q @ k[:, kv_of].transpose(-1, -2)) * scaling, mask) @ v[:, kv_of]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 90), w=st.integers(0, 12), s=st.integers(1, 5), g=st.integers(0, 3), B=st.integers(1, 2),
       r=st.sampled_from([1, 3, 1000]), seed=st.integers(0, 10**6))
def test_join_equals_the_dense_support(n, w, s, g, B, r, seed):
    """Any offsets — off the band, on it (read once, there), on a column's key, before the first key, empty —
    in spans of r rows."""
    gen = torch.Generator().manual_seed(seed)
    H, H_kv, d = 4, 2, 16
    s = min(s, n + 3)
    diags = torch.stack([torch.stack([-torch.randperm(n + 3, generator=gen)[:s] for _ in range(H)]) for _ in range(B)])
    diags[torch.rand(B, H, s, generator=gen) < 0.2] = NO_DIAGONAL                        # δ ∈ [−n − 2, 0], distinct
    cols = torch.full((B, H, g), -1, dtype=torch.long)
    for b in range(B):
        for h in range(H):
            cols[b, h, : min(g, n)] = torch.randperm(n, generator=gen)[: g]
    if g and int(cols[0, 0, 0]) - (n - 1) not in diags[0, 0].tolist():   # a diagonal whose key at the last row is a column
        diags[0, 0, 0] = int(cols[0, 0, 0]) - (n - 1)
    diags = diags.sort(-1).values                                   # the empty slots last, as the plans write them
    parts = parts_of([w] * H, cols, diags, H, H_kv, n)
    q, k, v = (torch.randn(B, h, n, d, generator=gen) for h in (H, H_kv, H_kv))
    old = dk.SPAN_FLOATS
    dk.SPAN_FLOATS = r * H * s * d   # spans of r rows
    try:
        out = CpuBackend().prefill(parts, q, k, v, 0.3)
    finally:
        dk.SPAN_FLOATS = old
    ref = dense(q, k, v, 0.3, dense_support(parts, n), parts.kv_of)
    assert (out - ref).abs().max() < 1e-5


def test_join_runs_in_the_transformers_layout_and_leaves_other_heads():
    """q, out as transformers' (B, n, H, d) views; the heads of other groups untouched."""
    gen = torch.Generator().manual_seed(3)
    B, H, n, d = 2, 4, 70, 16
    q = torch.randn(B, n, H, d, generator=gen).transpose(1, 2)
    k, v = torch.randn(B, 2, n, d, generator=gen), torch.randn(B, 2, n, d, generator=gen)
    out = torch.full((B, n, H, d), 7.0).transpose(1, 2)
    L = torch.empty(B, H, n)
    from attnlab.nn.mechanisms.sliding_window import band_heads_attention
    heads, kv = torch.tensor([1, 3]), torch.tensor([0, 1])
    cols, diags = torch.tensor([[[5], [-1]]] * B), torch.tensor([[[-20, -41], [-9, NO_DIAGONAL]]] * B)
    band_heads_attention(q, k, v, 4, heads, kv, out, columns=cols, scale=0.3, lse=L)
    dk.join_diagonals(q, k, v, heads, kv, out, L, diags, cols, 4, 0.3)
    parts = parts_of([4] * H, cols[:, [0, 0, 1, 1]], diags[:, [0, 0, 1, 1]], H, 2, n)   # heads 1, 3: the group's
    parts = parts._replace(kv_of=torch.tensor([0, 0, 1, 1]))
    ref = dense(q, k, v, 0.3, dense_support(parts, n), parts.kv_of)
    assert (out[:, heads] - ref[:, heads]).abs().max() < 1e-5
    assert (out[:, [0, 2]] == 7.0).all()


MEMORY_PROBE = """
import resource, sys, torch
from attnlab.llm.execution.backend import PrefillParts
from attnlab.llm.execution.cpu_backend import CpuBackend
torch.set_num_threads(1)
H, n, d, s = 4, 4096, 64, 400
q, k, v = torch.randn(1, H, n, d), torch.randn(1, 1, n, d), torch.randn(1, 1, n, d)
parts = PrefillParts(w=(32,) * H, columns=torch.full((1, H, 2), -1), diagonals=-(torch.arange(s) * 7 + 70).expand(1, H, s).clone(),
                     blocks=torch.full((1, H, 1, 0), -1), block_counts=(0,) * H, tails=(0,) * H, kv_of=torch.zeros(H, dtype=torch.long), block=16)
CpuBackend().prefill(parts, q[:, :, :64], k[:, :, :64], v[:, :, :64], 0.125)   # the kernel loaded, its buffers made
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
CpuBackend().prefill(parts, q, k, v, 0.125)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""


def test_slash_memory_is_a_span_not_the_layer():
    """Four heads of 400 diagonals each at n = 4,096, d = 64: the chunked extras held every chunk's gathered keys and
    values and the c·s scores of each query (≈ 3.5 GB); joined in spans, the process grows by a few spans (fresh
    process: its peak resident memory before and after the prefill)."""
    import subprocess
    import sys

    got = subprocess.run([sys.executable, "-c", MEMORY_PROBE], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    grown_mb = float(got.stdout.split()[-1])
    assert grown_mb < 600, f"the slash path grew the process by {grown_mb:.0f} MB"

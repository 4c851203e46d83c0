"""The FlexAttention backend of the execution seam: every BlockMask it builds equals the dense support it stands for,
and its compiled output (FlexAttention runs on the CPU too, forward only) equals the dense masked softmax."""

from __future__ import annotations

import pytest
import torch

from attnlab.llm.execution.backend import PrefillParts
from attnlab.llm.execution.block_masks import dense_of, diagonal_tiles, layer_block_mask, static_tiles
from attnlab.llm.plans.plan import FULL
from attnlab.nn.mechanisms.flex import flex_available
from attnlab.support import NO_DIAGONAL, Support

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

B, H, H_KV, D = 2, 4, 2, 16


def dense_support(parts: PrefillParts, n: int):
    """S_βh as (B, H, n, n) bool, drawn entry by entry from the seam's definition (``backend``), not from tiles."""
    Bp = parts.columns.shape[0]
    w = torch.tensor([FULL if x == FULL or x >= n - 1 else x for x in parts.w])
    blocked = torch.tensor([k > 0 for k in parts.block_counts]).view(1, H, 1)            # a head with key blocks: no diagonals
    lines = parts.diagonals.masked_fill(blocked, NO_DIAGONAL)
    s = Support(w=w, columns=parts.columns, diagonals=lines).dense(n, n).expand(Bp, H, n, n).clone()
    i = torch.arange(n)[:, None]
    for h in range(H):
        if parts.tails[h]:
            s[:, h, n - min(parts.tails[h], n):] = True
        for x in range(parts.block_counts[h] if parts.blocks.shape[-1] else 0):
            u = parts.blocks[:, h, :, x]                                          # (B, P) the x-th block of each query block
            key_block = torch.arange(n) // parts.block                            # (n,)
            s[:, h] |= (u[:, i[:, 0] // parts.block][:, :, None] == key_block[None, None, :])
    return s & (torch.arange(n)[None, :] <= i)


def seam_reference(parts, n):
    from attnlab.llm.execution.backend import dense_support as seam_dense

    return seam_dense(parts, n).expand(parts.columns.shape[0], H, n, n)


def random_parts(n: int, gen, g=3, s=2, K=2, block=16, w=(5, FULL, 40, 2), tails=(0, 0, 7, 30), counts=(0, 0, 2, 1)):
    cols = torch.randint(0, n, (B, H, g), generator=gen)
    cols[:, 1, 0] = -1                                                            # an empty slot
    cols[0, 3] = torch.tensor([0, n - 1, 17])[:g]
    diags = -torch.randint(1, n + 5, (B, H, s), generator=gen)                 # some beyond the first row: nothing
    diags[1, 0, 0] = NO_DIAGONAL
    P = -(-n // block)
    blocks = torch.stack([torch.randint(-1, P, (B, H, P), generator=gen) for _ in range(K)], -1)
    return PrefillParts(w=tuple(w), columns=cols, diagonals=diags, blocks=blocks, block_counts=tuple(counts), tails=tuple(tails),
                        kv_of=torch.arange(H) // (H // H_KV), block=block)


@pytest.mark.parametrize("n,tile", [(200, 64), (256, 128), (96, 16), (64, 128)])
def test_block_mask_equals_the_dense_support(n, tile):
    gen = torch.Generator().manual_seed(n + tile)
    parts = random_parts(n, gen)
    bm = layer_block_mask(parts, n, "cpu", tile)
    want = dense_support(parts, n)
    assert torch.equal(dense_of(bm, B, H, n), want)
    assert torch.equal(want, seam_reference(parts, n))                          # the seam's own dense support
    # the full tiles are read whole: each lies inside S (dropping the predicate from them loses nothing)
    assert bm.full_kv_num_blocks is not None


def test_key_blocks_as_whole_tiles_when_the_block_is_the_tile():
    n, b = 128, 16
    gen = torch.Generator().manual_seed(5)
    parts = random_parts(n, gen, block=b)
    bm = layer_block_mask(parts, n, "cpu", b)                                   # t = b: an earlier chosen block is a full tile
    assert int(bm.full_kv_num_blocks.sum()) > 0
    assert torch.equal(dense_of(bm, B, H, n), dense_support(parts, n))


def test_a_static_layer_reuses_one_block_mask_per_plan_and_length():
    n = 160
    none = PrefillParts(w=(3, 8, FULL, 20), columns=torch.zeros(B, H, 0, dtype=torch.long),
                        diagonals=torch.zeros(B, H, 0, dtype=torch.long), blocks=torch.zeros(B, H, 10, 0, dtype=torch.long),
                        block_counts=(0,) * H, tails=(0, 5, 0, 0), kv_of=torch.arange(H) // 2, block=16)
    a, b = layer_block_mask(none, n, "cpu", 32), layer_block_mask(none, n, "cpu", 32)
    assert a is b and a.kv_num_blocks.shape[0] == 1                             # one BlockMask, broadcast over the batch
    assert torch.equal(dense_of(a, B, H, n), dense_support(none, n))
    # a layer with per-input parts: its band and tails are the cached tiles of its plan; only its own parts are new
    parts = random_parts(n, torch.Generator().manual_seed(1))
    hits = static_tiles.cache_info().hits
    for seed in (2, 3):
        layer_block_mask(random_parts(n, torch.Generator().manual_seed(seed)), n, "cpu", 32)
    assert static_tiles.cache_info().hits >= hits + 1
    assert parts.w == random_parts(n, torch.Generator().manual_seed(2)).w


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 90), tile=st.sampled_from([16, 32, 64]), seed=st.integers(0, 10**6),
       w=st.lists(st.integers(-1, 100), min_size=H, max_size=H), tails=st.lists(st.integers(0, 100), min_size=H, max_size=H))
def test_property_any_parts_give_their_dense_support(n, tile, seed, w, tails):
    gen = torch.Generator().manual_seed(seed)
    parts = random_parts(n, gen, w=[FULL if x < 0 else x for x in w], tails=tails)
    assert torch.equal(dense_of(layer_block_mask(parts, n, "cpu", tile), B, H, n), dense_support(parts, n))


def test_a_diagonal_crosses_at_most_two_key_tiles_of_a_row_tile():
    n, t = 100, 16
    d = torch.tensor([[[-37]]])
    tiles = diagonal_tiles(d, n, t)[0, 0]
    assert int(tiles.sum(-1).max()) <= 2
    i = torch.arange(n)
    want = torch.zeros(7, 7, dtype=torch.bool)
    ok = i - 37 >= 0
    want[i[ok] // t, (i[ok] - 37) // t] = True
    assert torch.equal(tiles, want)


def test_bad_tile_is_refused():
    parts = random_parts(64, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="multiple of the plan's key block"):
        layer_block_mask(parts, 64, "cpu", 24)


def masked_reference(parts, q, k, v, scaling, n):
    kv = parts.kv_of
    s = (q.float() @ k[:, kv].float().transpose(-1, -2)) * scaling
    a = torch.softmax(s.masked_fill(~dense_support(parts, n), float("-inf")), -1)
    return a @ v[:, kv].float()


@pytest.mark.skipif(not flex_available(), reason="FlexAttention cannot compile here (no C++ compiler)")
def test_flex_backend_output_equals_the_dense_reference_and_the_cpu_backend():
    # one compiled shape (compiling on the CPU takes tens of seconds): fp32, GQA in place, every part at once
    from attnlab.llm.execution.cpu_backend import CpuBackend
    from attnlab.llm.execution.flex_backend import FlexBackend

    n, scaling = 200, D ** -0.5
    gen = torch.Generator().manual_seed(11)
    parts = random_parts(n, gen)
    q = torch.randn(B, H, n, D, generator=gen)
    k, v = (torch.randn(B, H_KV, n, D, generator=gen) for _ in range(2))
    out = FlexBackend(tile=64).prefill(parts, q, k, v, scaling)
    ref = masked_reference(parts, q, k, v, scaling, n)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=2e-5)
    # the CPU backend takes the parts a layer plan chooses: distinct columns, diagonals δ < −w_h on heads without key blocks
    cols = torch.stack([torch.randperm(n, generator=gen)[:3] for _ in range(B * H)]).view(B, H, 3)
    diags = torch.full((B, H, 2), NO_DIAGONAL)
    diags[:, 0] = torch.tensor([-9, -150])                                        # head 0: w = 5
    chosen = parts._replace(columns=cols, diagonals=diags)
    torch.testing.assert_close(CpuBackend().prefill(chosen, q, k, v, scaling), FlexBackend(tile=64).prefill(chosen, q, k, v, scaling),
                               atol=2e-5, rtol=2e-5)
    # decoding: by index, half-precision inputs accumulated in fp32, against the CPU backend's masked softmax
    from attnlab.llm.execution.page_table import table_of

    allowed = torch.rand(B, H_KV, H // H_KV, 1, n, generator=gen) > 0.5
    qd = q[:, :, -1:]
    table = table_of(allowed)
    got = FlexBackend().decode(qd.bfloat16(), k.bfloat16(), v.bfloat16(), scaling, table)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), CpuBackend().decode(qd, k, v, scaling, table), atol=3e-2, rtol=3e-2)


def minference_layer(n: int, gen):
    """A MInference layer's q, k, v and its heads' patterns as the seam's parts (Λ, vertical-slash, block-sparse ×2)."""
    from attnlab.llm.methods.minference_runner import pattern_parts

    heads = [{"pattern": "lambda", "sinks": 7, "w": 30}, {"pattern": "vs", "vertical": 12, "slash": 110},
             {"pattern": "block", "blocks": 2}, {"pattern": "block", "blocks": 3}]
    q = torch.randn(B, H, n, D, generator=gen)
    k, v = (torch.randn(B, H_KV, n, D, generator=gen) for _ in range(2))
    parts, _ = pattern_parts(heads, q, k, torch.arange(H) // (H // H_KV), D ** -0.5)
    return parts, q, k, v


@pytest.mark.parametrize("tile", [64, 128])
def test_minference_parts_as_a_block_mask_equal_their_dense_support(tile):
    n = 300
    parts, *_ = minference_layer(n, torch.Generator().manual_seed(tile))
    assert parts.block_counts == (0, 0, 2, 3) and (parts.diagonals[:, 1] != NO_DIAGONAL).any()
    want = dense_support(parts, n)
    assert torch.equal(want, seam_reference(parts, n))
    assert torch.equal(dense_of(layer_block_mask(parts, n, "cpu", tile), B, H, n), want)


@pytest.mark.skipif(not flex_available(), reason="FlexAttention cannot compile here (no C++ compiler)")
def test_minference_layer_through_the_flex_backend_equals_the_dense_reference_and_the_cpu_backend():
    # MInference's three patterns, one layer, one compiled FlexAttention call (fp32 on the CPU)
    from attnlab.llm.execution.cpu_backend import CpuBackend
    from attnlab.llm.execution.flex_backend import FlexBackend

    n, scaling = 300, D ** -0.5
    parts, q, k, v = minference_layer(n, torch.Generator().manual_seed(21))
    out = FlexBackend(tile=64).prefill(parts, q, k, v, scaling)
    torch.testing.assert_close(out, masked_reference(parts, q, k, v, scaling, n), atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(out, CpuBackend().prefill(parts, q, k, v, scaling), atol=2e-5, rtol=2e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: MInference's prefill on the device")
def test_minference_prefill_on_cuda_bf16_goes_through_the_flex_backend():
    # the patterns chosen on the device (parts on CUDA), the layer run by backend_for("cuda") = FlexAttention, bf16
    from attnlab.llm.execution.backend import backend_for
    from attnlab.llm.methods.minference_runner import pattern_parts

    n, scaling = 1000, D ** -0.5
    _, q, k, v = minference_layer(n, torch.Generator().manual_seed(22))
    heads = [{"pattern": "lambda", "sinks": 7, "w": 30}, {"pattern": "vs", "vertical": 12, "slash": 110},
             {"pattern": "block", "blocks": 2}, {"pattern": "block", "blocks": 3}]
    qc, kc, vc = (x.cuda().bfloat16() for x in (q, k, v))
    parts, _ = pattern_parts(heads, qc, kc, torch.arange(H) // (H // H_KV), scaling)
    assert parts.columns.is_cuda and parts.blocks.is_cuda and backend_for(qc.device).name == "flex"
    out = backend_for(qc.device).prefill(parts, qc, kc, vc, scaling)
    cpu = parts._replace(columns=parts.columns.cpu(), diagonals=parts.diagonals.cpu(), blocks=parts.blocks.cpu(), kv_of=parts.kv_of.cpu())
    ref = masked_reference(cpu, qc.float().cpu(), kc.float().cpu(), vc.float().cpu(), scaling, n)
    torch.testing.assert_close(out.float().cpu(), ref, atol=2e-2, rtol=2e-2)                            # bf16 inputs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the flex backend's bf16 prefill on the device")
def test_flex_backend_on_cuda_bf16_equals_the_dense_reference():
    from attnlab.llm.execution.backend import backend_for

    n, scaling = 1000, D ** -0.5
    gen = torch.Generator().manual_seed(12)
    parts = random_parts(n, gen)
    q = torch.randn(B, H, n, D, generator=gen)
    k, v = (torch.randn(B, H_KV, n, D, generator=gen) for _ in range(2))
    backend = backend_for("cuda")
    assert backend.name == "flex"
    cuda = parts._replace(columns=parts.columns.cuda(), diagonals=parts.diagonals.cuda(), blocks=parts.blocks.cuda())
    out = backend.prefill(cuda, *(x.cuda().bfloat16() for x in (q, k, v)), scaling)
    torch.testing.assert_close(out.float().cpu(), masked_reference(parts, q, k, v, scaling, n), atol=2e-2, rtol=2e-2)  # bf16 inputs


def test_support_mask_mod_moves_nothing_inside_the_predicate():
    # torch.compile lowers the predicate into the kernel: a device copy there fails on CUDA ("Buffers cannot be created
    # while lowering a pointwise subgraph … device_put"); the tables are placed once, when the predicate is made
    from torch.overrides import TorchFunctionMode

    class Moves(TorchFunctionMode):
        seen: list = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("to", "cuda", "cpu", "_to_copy", "as_tensor", "tensor"):
                self.seen.append(func.__name__)
            return func(*args, **(kwargs or {}))

    S = Support(w=torch.tensor([3, 9]), offset=torch.tensor([0, -2]), columns=torch.tensor([[0, -1], [5, 7]]),
                diagonals=torch.tensor([[-20], [NO_DIAGONAL]]))
    mod = S.mask_mod("cpu")
    with Moves() as m:
        mod.dense(1, 2, 30, 30)
    assert m.seen == []
    assert torch.equal(mod.dense(1, 2, 30, 30)[0], S.dense(30, 30))


@pytest.mark.skipif(not flex_available(), reason="FlexAttention cannot compile here (no C++ compiler)")
def test_support_mask_mod_through_compiled_flex_attention():
    from torch.nn.attention.flex_attention import create_block_mask

    from attnlab.nn.mechanisms.flex import flex_attention_compiled

    n = 96
    gen = torch.Generator().manual_seed(4)
    S = Support(w=torch.tensor([3, 9, 40, 0]), columns=torch.tensor([[0, 50], [1, -1], [2, 3], [90, 10]]))
    pred = S.mask_mod("cpu")
    bm = create_block_mask(lambda b, h, i, j: pred(b, h, i, j) & (j <= i), None, H, n, n, device="cpu", BLOCK_SIZE=32)
    q, k, v = (torch.randn(1, H, n, D, generator=gen) for _ in range(3))
    allowed = S.dense(n, n) & torch.ones(n, n, dtype=torch.bool).tril()
    ref = torch.softmax((q @ k.transpose(-1, -2) * D ** -0.5).masked_fill(~allowed, float("-inf")), -1) @ v
    torch.testing.assert_close(flex_attention_compiled(q, k, v, bm), ref, atol=2e-5, rtol=2e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the calibration's statistics measured on the device")
def test_calibration_observes_on_cuda_as_on_the_cpu():
    # the model's own mask (`far`), the column sums and the candidates' errors on the input's device, the tables on the host
    from attnlab.llm.calibration.statistics import Calibration

    Hc, n = 3, 300
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, Hc, n, 16, generator=gen) for _ in range(3))
    shape = {"num_layers": 1, "num_heads": Hc, "num_kv_heads": Hc}
    cpu, gpu = Calibration(shape, n, [(8, 4, 16)]), Calibration(shape, n, [(8, 4, 16)])
    out_c = cpu.observe(0, q, k, v, 0.25)
    out_g = gpu.observe(0, q.cuda(), k.cuda(), v.cuda(), 0.25, sliding=None)
    torch.testing.assert_close(out_g.cpu(), out_c, atol=1e-4, rtol=1e-4)
    for table in ("fit", "est", "sink", "cand_err", "cand_mass"):
        torch.testing.assert_close(torch.as_tensor(getattr(gpu, table)), torch.as_tensor(getattr(cpu, table)), atol=1e-4, rtol=1e-4)

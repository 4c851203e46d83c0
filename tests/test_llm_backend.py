"""The execution seam (``llm.execution.backend``): the CPU backend's prefill and decoding step equal the dense masked
softmax over the support they are given; backends are chosen by device; methods plug in through a runner class."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest
import torch

from attnlab.llm.execution.backend import AttentionBackend, PageKeys, PrefillParts, backend_for, dense_support, register_backend
from attnlab.llm.execution.cpu_backend import CpuBackend
from attnlab.llm.plans.plan import FULL
from attnlab.nn.softmax import masked_softmax
from attnlab.support import NO_DIAGONAL

ROOT = Path(__file__).resolve().parents[1] / "attnlab"


def random_parts(rng: random.Random, B: int, H: int, H_kv: int, n: int, b: int) -> PrefillParts:
    """Every kind of part, per head: band (some FULL), columns, diagonals off the band, key blocks, tails."""
    w = tuple(rng.choice([FULL, 0, 3, 7, n]) for _ in range(H))
    g, s, T, K = 3, 2, -(-n // b), 2
    cols = torch.full((B, H, g), -1, dtype=torch.long)
    diags = torch.full((B, H, s), NO_DIAGONAL, dtype=torch.long)
    blocks = torch.full((B, H, T, K), -1, dtype=torch.long)
    counts = []
    for h in range(H):
        counts.append(rng.choice([0, 1, 2]) if w[h] >= 0 else 0)
        for x in range(B):
            picked = rng.sample(range(n), rng.randint(0, g))
            cols[x, h, : len(picked)] = torch.tensor(picked, dtype=torch.long)
            if w[h] >= 0 and not counts[h]:   # a head has key blocks or diagonals, not both
                far = list(range(-n + 1, -w[h] - 1))
                d = rng.sample(far, min(len(far), rng.randint(0, s)))
                diags[x, h, : len(d)] = torch.tensor(d, dtype=torch.long)
        for x in range(B):
            for t in range(T):
                u = rng.sample(range(t + 1), min(t + 1, counts[h]))
                blocks[x, h, t, : len(u)] = torch.tensor(u, dtype=torch.long)
    tails = tuple(rng.choice([0, 0, 5]) for _ in range(H))
    kv_of = torch.arange(H) // (H // H_kv)
    return PrefillParts(w=w, columns=cols, diagonals=diags, blocks=blocks, block_counts=tuple(counts), tails=tails,
                        kv_of=kv_of, block=b)


def dense(q, k, v, scaling, mask, kv_of):
    """softmax over mask (B, H, n, L) of q (B, H, n, d) against each head's KV head."""
    s = (q @ k[:, kv_of].transpose(-1, -2)) * scaling
    return masked_softmax(s, mask) @ v[:, kv_of]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("native", [True, False])
def test_cpu_prefill_equals_the_dense_support(seed, native, monkeypatch):
    import attnlab.llm.execution.cpu_backend as cb

    if not native:
        monkeypatch.setattr(cb, "native_heads_ready", lambda *a: False)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    B, H_kv, n, b = rng.choice([1, 2]), 2, rng.choice([37, 80]), 16
    H = H_kv * rng.choice([1, 2])
    parts = random_parts(rng, B, H, H_kv, n, b)
    q, k, v = torch.randn(B, H, n, 16), torch.randn(B, H_kv, n, 16), torch.randn(B, H_kv, n, 16)
    out = CpuBackend().prefill(parts, q, k, v, 0.3)
    ref = dense(q, k, v, 0.3, dense_support(parts, n), parts.kv_of)
    assert (out - ref).abs().max() < 1e-5


def test_a_head_with_key_blocks_reads_no_diagonals():
    """A plan file may give a head both: its blocks are read, its diagonals not (the dense support says the same)."""
    rng = random.Random(0)
    torch.manual_seed(0)
    parts = random_parts(rng, 1, 2, 2, 40, 16)
    parts = parts._replace(w=(3, 3), block_counts=(1, 0), diagonals=torch.tensor([[[-20, -30], [-20, -30]]]))
    q, k, v = torch.randn(1, 2, 40, 16), torch.randn(1, 2, 40, 16), torch.randn(1, 2, 40, 16)
    mask = dense_support(parts, 40)
    plain = dense_support(parts._replace(diagonals=torch.full((1, 2, 2), NO_DIAGONAL)), 40)
    assert torch.equal(mask[0, 0], plain[0, 0]) and not torch.equal(mask[0, 1], plain[0, 1])   # head 1 reads its lines
    assert (CpuBackend().prefill(parts, q, k, v, 0.3) - dense(q, k, v, 0.3, mask, parts.kv_of)).abs().max() < 1e-5


def test_the_dense_support_draws_each_part():
    """Not vacuous: one part at a time, the rows it adds."""
    n, b = 40, 16
    one = dict(columns=torch.full((1, 1, 1), -1), diagonals=torch.full((1, 1, 1), NO_DIAGONAL),
               blocks=torch.full((1, 1, 3, 1), -1), block_counts=(0,), tails=(0,), kv_of=torch.zeros(1, dtype=torch.long), block=b)
    band = dense_support(PrefillParts(w=(2,), **one), n)[0, 0]
    assert int(band.sum()) == sum(min(i, 2) + 1 for i in range(n))
    col = dense_support(PrefillParts(w=(2,), **{**one, "columns": torch.tensor([[[30]]])}), n)[0, 0]
    assert (col & ~band).nonzero().tolist() == [[i, 30] for i in range(33, n)]
    diag = dense_support(PrefillParts(w=(2,), **{**one, "diagonals": torch.tensor([[[-10]]])}), n)[0, 0]
    assert (diag & ~band).nonzero().tolist() == [[i, i - 10] for i in range(10, n)]
    blk = dense_support(PrefillParts(w=(2,), **{**one, "blocks": torch.tensor([[[[-1], [0], [0]]]]), "block_counts": (1,)}), n)[0, 0]
    assert {tuple(x) for x in (blk & ~band).nonzero().tolist()} == {(i, j) for i in range(16, n) for j in range(16) if i - j > 2}
    tail = dense_support(PrefillParts(w=(2,), **{**one, "tails": (4,)}), n)[0, 0]
    assert tail[n - 4:].sum(-1).tolist() == [n - 3, n - 2, n - 1, n]


def test_cpu_decode_reads_the_allowed_slots_and_the_pages_in_one_softmax():
    from attnlab.llm.execution.page_table import table_of

    torch.manual_seed(0)
    B, H_s, r, L, X, d = 2, 2, 3, 20, 8, 16
    q, k, v = torch.randn(B, H_s * r, 1, d), torch.randn(B, H_s, L, d), torch.randn(B, H_s, L, d)
    allowed = torch.rand(B, H_s, r, 1, L) < 0.5
    pk, pv, ok = torch.randn(B, H_s * r, X, d), torch.randn(B, H_s * r, X, d), torch.rand(B, H_s * r, X) < 0.5
    out = CpuBackend().decode(q, k, v, 0.25, table_of(allowed), PageKeys(pk, pv, ok))
    keys = torch.cat([k.repeat_interleave(r, 1), pk], 2)                                      # (B, H, L + X, d)
    vals = torch.cat([v.repeat_interleave(r, 1), pv], 2)
    mask = torch.cat([allowed.reshape(B, H_s * r, 1, L), ok[:, :, None]], -1)
    ref = masked_softmax((q @ keys.transpose(-1, -2)) * 0.25, mask) @ vals
    assert (out - ref).abs().max() < 1e-5
    plain = CpuBackend().decode(q, k, v, 0.25, table_of(allowed))
    assert (plain - dense(q, k, v, 0.25, allowed.reshape(B, H_s * r, 1, L), torch.arange(H_s).repeat_interleave(r))).abs().max() < 1e-5


def test_backends_are_chosen_by_device_type():
    assert isinstance(backend_for("cpu"), CpuBackend) and backend_for(torch.device("cpu")) is backend_for("cpu")
    assert isinstance(backend_for("meta"), AttentionBackend)   # a device without its own: the CPU backend's torch paths

    class Marker(CpuBackend):
        name = "marker"

    register_backend("meta", Marker)
    try:
        assert backend_for("meta").name == "marker"
    finally:
        register_backend("meta", CpuBackend)


def test_no_method_copies_a_live_runner():
    """Methods change attention through a runner class they declare (``layer_runner``), never ``__new__`` + ``__dict__``."""
    found = []
    for path in sorted((ROOT / "llm").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            f = node.func
            if f.attr == "__new__" or (f.attr == "update" and isinstance(f.value, ast.Attribute) and f.value.attr == "__dict__"):
                found.append(f"{path.name}:{node.lineno} {ast.unparse(f)}")
    assert not found, found


def test_head_plans_are_built_with_keywords():
    from attnlab.llm.plans.plan import HeadPlan
    from attnlab.support import Support

    with pytest.raises(TypeError):
        HeadPlan(Support.full(), 2)
    assert HeadPlan(support=Support.full(), dynamic=2).dynamic == 2

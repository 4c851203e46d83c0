"""The sliding-window kernel runs Support(w, offset, columns) exactly: output and gradients equal the dense reference.

Property tests (hypothesis) over n, m, w, offset, chunk, causal, padding, key columns and d_k, for
the three execution paths: the native fused band kernel (band_kernel.c, d_k a multiple of 16), the
CPU flash kernel over strided windows, both with the flash-style backward, and the plain torch path.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlab.nn.mechanisms.sliding_window as sw
import attnlab.nn.mechanisms.window_autograd as wa
from attnlab.nn.softmax import masked_softmax
from attnlab.support import Support

TOL = 1e-5  # float32


def dense_reference(q, k, v, S: Support, causal: bool, keep, extra_logit_dense=None):
    # q: (B, H, n, d), k, v: (B, H, m, d) → softmax over S ∩ causal ∩ keep, 0 for a query that sees nothing
    n, m = q.shape[2], k.shape[2]
    allowed = torch.as_tensor(S.dense(n, m))
    if causal:
        allowed = allowed & torch.ones(n, m, dtype=torch.bool).tril()
    if keep is not None:
        allowed = allowed & keep[:, None, None, :]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if extra_logit_dense is not None:
        s = s + extra_logit_dense
    return masked_softmax(s, allowed) @ v


PATHS = {"native": (True, True), "flash": (True, False), "plain": (False, False)}  # path: (FLASH, NATIVE)


def run_paths(fn):
    outs = []
    for flash, native in PATHS.values():
        sw.FLASH, sw.NATIVE = flash, native
        try:
            outs.append(fn())
        finally:
            sw.FLASH = sw.NATIVE = True
    return outs


def assert_close(x, ref, what):
    err = (x - ref).abs().max().item()
    assert err <= TOL * max(1.0, ref.abs().max().item()), f"{what}: max error {err:.2e}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 70),
    dm=st.integers(-20, 20),
    w=st.integers(0, 24),
    offset=st.integers(-12, 12),
    chunk=st.sampled_from([None, 1, 5, 16, 32]),
    causal=st.booleans(),
    padded=st.booleans(),
    g=st.integers(0, 3),
    block=st.sampled_from([None, 1, 3000]),
    d=st.sampled_from([8, 16, 48]),
    seed=st.integers(0, 2**16),
)
def test_kernel_equals_dense_reference(n, dm, w, offset, chunk, causal, padded, g, block, d, seed):
    m = n if causal else max(1, n + dm)  # causal self-attention; cross-attention lengths otherwise
    gen = torch.Generator().manual_seed(seed)
    B, H = 2, 2
    q = torch.randn(B, H, n, d, generator=gen, requires_grad=True)
    k = torch.randn(B, H, m, d, generator=gen, requires_grad=True)
    v = torch.randn(B, H, m, d, generator=gen, requires_grad=True)
    keep = None
    if padded:
        keep = torch.rand(B, m, generator=gen) > 0.3
    cols = torch.randint(-1, m, (1, H, g), generator=gen)  # −1: an empty slot
    S = Support(w=w, offset=offset, columns=cols)
    c = chunk or sw.chunk_size(w)
    kwargs = dict(causal=causal, key_keep=keep, chunk=c, offset=offset)
    if g:
        kwargs.update(extra_idx=S.kernel_extra_idx(n, c), extra_own=S.kernel_extra_own())
    ref = dense_reference(q, k, v, S, causal, keep)
    grad = torch.randn(ref.shape, generator=gen)
    g_ref = torch.autograd.grad(ref, (q, k, v), grad)

    def one():
        out = sw.sliding_window_attention(q, k, v, w, **kwargs)
        return out, torch.autograd.grad(out, (q, k, v), grad)

    saved = wa.BACKWARD_BLOCK
    wa.BACKWARD_BLOCK = block or saved  # 1: every chunk its own backward block (window gradients folded across blocks)
    try:
        results = run_paths(one)
    finally:
        wa.BACKWARD_BLOCK = saved
    for path, (out, grads) in zip(PATHS, results):
        assert torch.isfinite(out).all()
        assert_close(out, ref, f"{path} output")
        for name, gx, gr in zip("qkv", grads, g_ref):
            assert_close(gx, gr, f"{path} d{name}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 90),
    dm=st.integers(-20, 20),
    w=st.integers(0, 30),
    offset=st.integers(-12, 12),
    causal=st.booleans(),
    padded=st.booleans(),
    g=st.integers(1, 40),
    d=st.sampled_from([16, 48]),
    seed=st.integers(0, 2**16),
)
def test_inference_columns_scored_inside_the_native_kernel_equal_the_dense_reference(n, dm, w, offset, causal, padded, g, d, seed):
    # no gradient asked, distinct columns (unique): the native kernel scores and masks the columns itself
    if not sw.native.available():
        pytest.skip(f"no native kernel here: {sw.native.unavailable_reason()}")
    m = n if causal else max(1, n + dm)
    gen = torch.Generator().manual_seed(seed)
    B, H = 2, 3
    q, k, v = (torch.randn(B, H, r, d, generator=gen) for r in (n, m, m))
    keep = torch.rand(B, m, generator=gen) > 0.3 if padded else None
    cols = torch.stack([torch.randperm(m, generator=gen)[: min(g, m)] for _ in range(H)])[None]      # (1, H, g') distinct
    cols = torch.where(torch.rand(cols.shape, generator=gen) < 0.2, torch.full_like(cols, -1), cols)  # some empty slots
    S = Support(w=w, offset=offset, columns=cols)
    c = sw.chunk_size(w)
    taken = []
    real = sw._native_columns
    sw._native_columns = lambda *a: taken.append(1) or real(*a)
    try:
        with torch.no_grad():
            out = sw.sliding_window_attention(q, k, v, w, causal=causal, key_keep=keep, chunk=c, offset=offset, unique=True,
                                              extra_idx=S.kernel_extra_idx(n, c), extra_own=S.kernel_extra_own())
    finally:
        sw._native_columns = real
    assert taken, "the columns path of the native kernel was not taken"
    assert torch.isfinite(out).all()
    assert_close(out, dense_reference(q, k, v, S, causal, keep), "native columns output")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 90),
    w=st.integers(0, 40),
    wide=st.integers(0, 40),
    g=st.integers(0, 12),
    tokens=st.booleans(),
    B=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_heads_in_place_equal_the_dense_reference_with_a_wide_bands_prefix_as_sdpa(n, w, wide, g, tokens, B, seed):
    # band_heads_attention, causal: query heads 0 and 2 of 4 reading KV heads 0 and 1 (GQA), each with its columns; a band
    # of w ≥ WIDE_BAND runs its rows i ≤ w as SDPA's causal attention and the kernel the rest (first_row)
    if not sw.native.available():
        pytest.skip(f"no native kernel here: {sw.native.unavailable_reason()}")
    gen = torch.Generator().manual_seed(seed)
    H, H_kv, d = 4, 2, 16
    q, k, v = torch.randn(B, n, H, d, generator=gen), torch.randn(B, n, H_kv, d, generator=gen), torch.randn(B, n, H_kv, d, generator=gen)
    q, k, v = (x.transpose(1, 2) if tokens else x.transpose(1, 2).contiguous() for x in (q, k, v))   # transformers' layout, or not
    heads, kv_heads = torch.tensor([0, 2]), torch.tensor([0, 1])
    cols = torch.stack([torch.stack([torch.randperm(n, generator=gen)[: min(g, n)] for _ in range(2)]) for _ in range(B)])
    cols = torch.where(torch.rand(cols.shape, generator=gen) < 0.2, torch.full_like(cols, -1), cols)   # (B, 2, g') some empty
    out = torch.full((B, n, H, d), float("nan")).transpose(1, 2) if tokens else torch.full((B, H, n, d), float("nan"))
    real = sw.WIDE_BAND
    sw.WIDE_BAND = wide
    try:
        with torch.no_grad():
            sw.band_heads_attention(q, k, v, w, heads, kv_heads, out, columns=cols, scale=d ** -0.5)
    finally:
        sw.WIDE_BAND = real
    for x, (h, j) in enumerate(zip(heads.tolist(), kv_heads.tolist())):
        for b in range(B):
            S = Support(w=w, columns=cols[b, x][cols[b, x] >= 0])
            ref = dense_reference(q[b : b + 1, h : h + 1], k[b : b + 1, j : j + 1], v[b : b + 1, j : j + 1], S, True, None)
            assert_close(out[b, h], ref[0, 0], f"head {h}, batch entry {b}")
    assert torch.isnan(out[:, [1, 3]]).all()   # the other heads untouched


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 120),
    w=st.integers(0, 40),
    wide=st.integers(0, 40),
    g=st.integers(0, 20),
    gc=st.integers(0, 6),
    chunk=st.sampled_from([8, 16, 24]),
    tokens=st.booleans(),
    B=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_heads_in_place_with_a_key_set_per_chunk_equal_the_dense_reference(n, w, wide, g, gc, chunk, tokens, B, seed):
    # band_heads_attention with columns (B, G, g_c) and blocks (B, G, T, g): the rows of chunk t read band ∪ the columns ∪
    # their chunk's keys (key blocks chosen per query block), read by the kernel where k, v lie; distinct keys in any
    # order (unsorted), none a column, empty slots (−1); a wide band's SDPA prefix ends on a whole chunk
    if not sw.native.available():
        pytest.skip(f"no native kernel here: {sw.native.unavailable_reason()}")
    gen = torch.Generator().manual_seed(seed)
    H, H_kv, d = 4, 2, 16
    q, k, v = torch.randn(B, n, H, d, generator=gen), torch.randn(B, n, H_kv, d, generator=gen), torch.randn(B, n, H_kv, d, generator=gen)
    q, k, v = (x.transpose(1, 2) if tokens else x.transpose(1, 2).contiguous() for x in (q, k, v))
    heads, kv_heads = torch.tensor([1, 2]), torch.tensor([0, 1])
    T = -(-n // chunk)
    cols = torch.full((B, 2, gc), -1, dtype=torch.long)
    sets = torch.full((B, 2, T, g), -1, dtype=torch.long)
    for b in range(B):
        for x in range(2):
            perm = torch.randperm(n, generator=gen)
            cols[b, x, : min(gc, n)] = perm[:gc]
            rest = perm[gc:]                                                                   # the blocks: no column
            for t in range(T):
                r = rest[torch.randperm(len(rest), generator=gen)][:g]
                sets[b, x, t, : len(r)] = r
    sets = torch.where(torch.rand(sets.shape, generator=gen) < 0.2, torch.full_like(sets, -1), sets)
    out = torch.full((B, n, H, d), float("nan")).transpose(1, 2) if tokens else torch.full((B, H, n, d), float("nan"))
    real = sw.WIDE_BAND
    sw.WIDE_BAND = wide
    try:
        with torch.no_grad():
            sw.band_heads_attention(q, k, v, w, heads, kv_heads, out, columns=cols, blocks=sets, chunk=chunk, scale=d ** -0.5)
    finally:
        sw.WIDE_BAND = real
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    for x, (h, kv) in enumerate(zip(heads.tolist(), kv_heads.tolist())):
        for b in range(B):
            mine = torch.zeros(n, n, dtype=torch.bool)                                          # j ∈ the set of i's chunk
            for t in range(T):
                keys = sets[b, x, t][sets[b, x, t] >= 0]
                mine[t * chunk : (t + 1) * chunk, keys] = True
            mine[:, cols[b, x][cols[b, x] >= 0]] = True                                         # a column: every row
            allowed = (j <= i) & ((i - j <= w) | mine)
            s_ = (q[b, h] @ k[b, kv].T) * d ** -0.5
            ref = torch.softmax(s_.masked_fill(~allowed, float("-inf")), -1) @ v[b, kv]
            assert_close(out[b, h], ref, f"head {h}, batch entry {b}")
    assert torch.isnan(out[:, [0, 3]]).all()   # the other heads untouched


def test_a_key_set_per_chunk_needs_whole_tiles():
    if not sw.native.available():
        pytest.skip(f"no native kernel here: {sw.native.unavailable_reason()}")
    q, k, v = torch.randn(2, 40, 16), torch.randn(2, 40, 16), torch.randn(2, 40, 16)
    sets = torch.zeros(2, 4, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="chunks of a multiple"):
        sw.native.band_forward(q, k, v, 4, causal=True, scale=0.25, blocks=sets, chunk=10)
    sw.native.band_forward(q, k, v, 4, causal=True, scale=0.25, blocks=torch.zeros(2, 5, 3, dtype=torch.long), chunk=8)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 60), w=st.integers(0, 8), causal=st.booleans(), seed=st.integers(0, 2**16))
def test_gate_on_extra_keys_gets_its_gradient(n, w, causal, seed):
    # extra_logit (the learned column gate) is added to the extras' scores off the band: its gradient too
    gen = torch.Generator().manual_seed(seed)
    B, H, d, g, c = 1, 2, 16, 2, 16
    q, k, v = (torch.randn(B, H, n, d, generator=gen, requires_grad=True) for _ in range(3))
    cols = torch.stack([torch.randperm(n, generator=gen)[:g] for _ in range(H)])[None]  # distinct columns per head
    gate = torch.randn(B, H, g, generator=gen, requires_grad=True)
    S = Support(w=w, columns=cols)
    T = -(-n // c)
    idx = S.kernel_extra_idx(n, c)
    # dense: the gate on the column entries off the band
    off_band = ~S.band(n, n)
    g_dense = torch.zeros(B, H, 1, n).scatter(-1, cols[..., None, :], gate[..., None, :]) * off_band
    ref = dense_reference(q, k, v, S, causal, None, g_dense)
    grad = torch.randn(ref.shape, generator=gen)
    g_ref = torch.autograd.grad(ref, (q, k, v, gate), grad)

    def one():
        out = sw.sliding_window_attention(
            q, k, v, w, causal=causal, extra_idx=idx, extra_logit=gate[..., None, :].expand(B, H, T, g), chunk=c
        )
        return out, torch.autograd.grad(out, (q, k, v, gate), grad)

    for path, (out, grads) in zip(PATHS, run_paths(one)):
        assert_close(out, ref, f"{path} output")
        for name, gx, gr in zip(("q", "k", "v", "gate"), grads, g_ref):
            assert_close(gx, gr, f"{path} d{name}")


def test_values_of_another_width_and_float64_take_the_plain_path():
    # d_v ≠ d_k (the flash kernel needs equal head sizes) and float64 give the dense result too
    torch.manual_seed(0)
    for dtype, d_v in ((torch.float32, 5), (torch.float64, 8)):
        q, k = torch.randn(1, 2, 40, 8, dtype=dtype), torch.randn(1, 2, 40, 8, dtype=dtype)
        v = torch.randn(1, 2, 40, d_v, dtype=dtype)
        S = Support(w=3, offset=-2)
        out = sw.sliding_window_attention(q, k, v, 3, offset=-2, causal=True)
        assert_close(out, dense_reference(q, k, v, S, True, None), str(dtype))


def test_training_keeps_no_attention_matrix():
    # flash-style backward: autograd keeps q, k, v, O, L and the (shared) band mask — no per-head scores
    H, d, w = 4, 16, 32

    def saved(n):
        q, k, v = (torch.randn(1, H, n, d, requires_grad=True) for _ in range(3))
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda x: sizes.append(x.numel()) or x, lambda x: x):
            sw.sliding_window_attention(q, k, v, w, chunk=32)
        return sizes

    small, large = saved(512), saved(2048)
    assert sum(large) <= 4.1 * sum(small)  # linear in n
    scores = H * 2048 * (32 + 2 * w)  # the band scores P of all heads (c + 2w per query)
    assert max(large) < scores / 2


def test_bad_arguments_name_the_parameter():
    q = torch.randn(1, 1, 10, 4)
    with pytest.raises(ValueError, match="^w:"):
        sw.sliding_window_attention(q, q, q, -1)
    with pytest.raises(ValueError, match="^chunk:"):
        sw.sliding_window_attention(q, q, q, 2, chunk=-3)
    with pytest.raises(ValueError, match="^extra_idx:"):
        sw.sliding_window_attention(q, q, q, 2, chunk=4, extra_idx=torch.zeros(1, 1, 2, 1, dtype=torch.long))


@pytest.mark.parametrize("offset", [-3, 0, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_structured_mechanism_with_offset_equals_its_weights(offset, causal):
    # Support(w, offset, columns) runs through the kernel entirely: forward and gradients = weights(q, k) @ v
    from attnlab.nn.mask import Mask
    from attnlab.nn.mechanisms import Structured

    torch.manual_seed(1)
    mech = Structured(2, 2, offset=offset, positions=[0, 9])
    q, k, v = (torch.randn(2, 3, 45, 8, requires_grad=True) for _ in range(3))
    keep = torch.ones(2, 45, dtype=torch.bool)
    keep[1, 30:] = False
    mask = Mask(key_keep=keep, causal=causal)
    ref = mech.weights(q, k, mask) @ v
    out, _ = mech(q, k, v, mask)
    assert_close(out, ref, "output")
    g = torch.randn_like(ref)
    for name, a, b in zip("qkv", torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        assert_close(a, b, f"d{name}")


def test_native_kernel_builds_where_a_compiler_exists():
    # the fused kernel is what the benchmarks measure: a broken build must fail here, not fall back silently
    from attnlab.nn.mechanisms import native

    if native._compiler() is None or native.os.environ.get("ATTNLAB_NATIVE") == "0":
        pytest.skip(f"native kernel off: {native.unavailable_reason() or 'no C compiler'}")
    assert native.available(), native.unavailable_reason()


@pytest.mark.parametrize("causal", [False, True])
def test_native_band_forward_equals_dense_weights_and_log_normaliser(causal):
    # O_i = Σ_{j ∈ B(i)} exp(s_ij − L_i) v_j and L_i = log Σ exp(s_ij), rows with no key: O = 0, L = NEG_INF
    from attnlab.nn.mechanisms import native

    if not native.available():
        pytest.skip(f"native kernel unavailable: {native.unavailable_reason()}")
    gen = torch.Generator().manual_seed(3)
    N, n, m, d, w, offset = 4, 70, 50, 32, 6, -9  # m < n and a negative offset: the first rows see no key
    q, k, v = (torch.randn(N, x, d, generator=gen) for x in (n, m, m))
    keep = torch.rand(2, m, generator=gen) > 0.4
    O, L = native.band_forward(q, k, v, w, offset=offset, causal=causal, keep=keep, heads_per_keep=2, scale=0.3)
    i, j = torch.arange(n)[:, None], torch.arange(m)[None]
    allowed = ((j - i - offset).abs() <= w) & (j <= i if causal else True) & keep.repeat_interleave(2, 0)[:, None, :]
    s = (q @ k.transpose(1, 2) * 0.3).masked_fill(~allowed, float("-inf"))
    seen = allowed.any(-1)
    assert (~seen).any() and seen.any()
    L_ref = torch.logsumexp(s, -1)
    O_ref = masked_softmax(q @ k.transpose(1, 2) * 0.3, allowed) @ v
    assert_close(O, O_ref, "O")
    assert_close(L[seen], L_ref[seen], "L")
    assert (L[~seen] == sw.NEG_INF).all() and (O[~seen] == 0).all()


def test_native_kernel_unavailable_falls_back_with_a_reason(tmp_path, monkeypatch):
    # an unwritable cache (or no compiler) costs speed, not correctness: available() is False with the reason
    from attnlab.nn.mechanisms import native

    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # a file where the cache folder should be
    native.library.cache_clear()
    try:
        assert not native.available()
        assert "cannot write the compiled kernel" in native.unavailable_reason()
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 2, 40, 16, generator=gen) for _ in range(3))
        ref = dense_reference(q, k, v, Support(w=3), False, None)
        assert_close(sw.sliding_window_attention(q, k, v, 3), ref, "fallback output")
    finally:
        monkeypatch.undo()
        native.library.cache_clear()
    assert native.available() or native._compiler() is None


@pytest.mark.parametrize("e", [3, 40])  # key columns to an LLM plan's dynamic columns
@pytest.mark.parametrize("causal", [False, True])
def test_native_path_with_few_and_many_extra_keys_equals_the_plain_path(e, causal):
    gen = torch.Generator().manual_seed(e)
    B, H, n, d, w, c = 2, 2, 150, 16, 4, 16
    q, k, v = (torch.randn(B, H, n, d, generator=gen, requires_grad=True) for _ in range(3))
    T = -(-n // c)
    idx = torch.randint(0, n, (B, H, T, e), generator=gen)  # per-chunk keys, duplicates included

    def one():
        out = sw.sliding_window_attention(q, k, v, w, causal=causal, extra_idx=idx, chunk=c)
        return (out, *torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))

    results = run_paths(one)
    for x, ref, what in zip(results[0], results[2], ("out", "dq", "dk", "dv")):
        assert_close(x, ref, f"native {what} (e = {e})")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 70), m=st.integers(1, 70), w=st.integers(0, 24), offset=st.integers(-30, 30),
       c=st.sampled_from([1, 5, 16, 32]), causal=st.booleans())
def test_band_reach_is_the_band_masks_any(n, m, w, offset, c, causal):
    """The native path skips the band mask: which queries reach a band key is computed from the bounds alone."""
    T = -(-n // c)
    lo, W = sw.band_window(w, offset, c, causal)
    if W <= 0:
        lo, W = 0, 1
    _, any_ref = sw.band_bias(w, offset, lo, W, c, causal, n, torch.ones(1, m, dtype=torch.bool), torch.float32)
    assert torch.equal(sw.band_reach(w, offset, c, causal, T, m, "cpu"), any_ref)


def test_native_kernel_builds_with_the_plain_flags_when_the_avx512_preference_is_refused(tmp_path, monkeypatch):
    # compile_flags() adds AVX512_FLAGS where /proc/cpuinfo lists avx512f; a compiler that refuses them still builds
    from attnlab.nn.mechanisms import native

    if native._compiler() is None or native.os.environ.get("ATTNLAB_NATIVE") == "0":
        pytest.skip(f"native kernel off: {native.unavailable_reason() or 'no C compiler'}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))       # a fresh cache: the build runs here
    monkeypatch.setattr(native, "_cpu_flags", lambda: "flags\t: fpu sse avx2 avx512f")
    monkeypatch.setattr(native, "AVX512_FLAGS", ["-fno-such-option-attnlab"])
    assert native.compile_flags()[-1] == "-fno-such-option-attnlab"
    native.library.cache_clear()
    try:
        assert native.available(), native.unavailable_reason()
        assert list((tmp_path / "attnlab" / "native").glob("band_kernel-*.so"))
    finally:
        monkeypatch.undo()
        native.library.cache_clear()


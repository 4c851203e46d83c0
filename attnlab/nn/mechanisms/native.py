"""The fused band kernel (``band_kernel.c``), compiled on first use for this CPU and called through ctypes.

    O, L = band_forward(q, k, v, w, offset=o, causal=…, keep=…, scale=τ, extras=(S_E, V_E, c))
    o_i = Σ_{j ∈ N(i)} exp(s_ij − L_i) v_j,   L_i = log Σ_{j ∈ N(i)} exp(s_ij),   N(i) = B(i) ∪ E(i)
    B(i) = {j : |j − i − o| ≤ w, 0 ≤ j < m, j ≤ i if causal, keep_j},   s_ij = τ q_i·k_j
    E(i): e extra keys (V_E of query i's chunk ⌊i/c⌋) with their scores given, S_E[i, x] = τ q_i·K_E[x] + b_E[i, x]

The C source is compiled once per machine (``cc -O3 -march=native -ffast-math -fopenmp -c``, linked apart without
-ffast-math so that loading it leaves the process's denormals alone) into ``$XDG_CACHE_HOME/attnlab/native/`` (default
``~/.cache``), named by a hash of the sources (``band_kernel.c``, ``band_backward.c``, ``block_topk.c`` and
``column_mass.c``, linked into one library: ``BAND_SOURCES``) and the headers beside them (``band_tiles.h``,
``vector_math.h``), the flags, the compiler and the CPU's feature flags; the build writes a temporary file and renames
it, so concurrent first uses are safe.  With no C compiler, or ``ATTNLAB_NATIVE=0``, ``available()`` is False and
callers use PyTorch's flash kernel instead (``sliding_window.WindowAttention``); the reason is kept in
``unavailable_reason()``.

``band_backward`` is the band's share of the gradients, flash style (P recomputed from the saved
L of the whole softmax); the extras' share stays in ``sliding_window.WindowAttention.backward``.

``decode_read_back`` is a planned layer's decoding step for one query per head (``decode_kernel.c``, built the same
way by ``compiled``): band ∪ columns over the resident slots and the read-back pages of largest Quest bound, resident
or from the store, in one softmax; ``ATTNLAB_NATIVE_DECODE=0`` leaves decoding to its tensor reference
(``llm.execution.decode_step``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from array import array
from functools import lru_cache
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).with_name("band_kernel.c")
BACKWARD_SOURCE = Path(__file__).with_name("band_backward.c")   # linked with SOURCE into one library, as is
BLOCKS_SOURCE = Path(__file__).with_name("block_topk.c")        # the key blocks' choice (``block_topk``)
MASS_SOURCE = Path(__file__).with_name("column_mass.c")         # the last queries' column mass (``column_mass``)
BAND_SOURCES = [SOURCE, BACKWARD_SOURCE, BLOCKS_SOURCE, MASS_SOURCE]   # ``library()``
FLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC", "-std=c11"]   # compiling (-c)
# linking, without -ffast-math: GCC links crtfastmath.o into anything linked with it, and that object's constructor sets
# flush-to-zero / denormals-are-zero in the whole process that loads the library (PyTorch's and NumPy's arithmetic too)
LINK = ["-shared", "-fopenmp"]
# where the CPU has AVX-512: the compiler's own loops (softmax, exp via libmvec, masks) 16 floats wide as well — GCC
# prefers 256-bit ones on Intel by default; measured on the 8K plan's kernel calls: 1.54 → 1.42 s
# (docs/archive/earlier-results-speed.md)
AVX512_FLAGS = ["-mprefer-vector-width=512"]
VEC = 16  # floats per vector in band_kernel.c: keys are padded by 2·VEC columns
TILE = 8  # R in band_kernel.c: query rows per tile (a chunk of per-chunk columns holds whole tiles)
_reason: list[str] = []


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnlab" / "native"


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return ""


def compile_flags() -> list[str]:
    """``FLAGS``, and ``AVX512_FLAGS`` where /proc/cpuinfo lists avx512f (an x86 option: other CPUs do not get it)."""
    return FLAGS + (AVX512_FLAGS if "avx512f" in _cpu_flags().split() else [])


def compiled(sources: Path | list[Path], reasons: list[str]) -> ctypes.CDLL | None:
    """``sources`` (one C file or several, linked into one library) compiled for this CPU (``compile_flags``) into
    ``cache_dir()`` once, named by the first's stem and a hash of the sources, every header beside them (``*.h``: what
    they include, so that a header edit recompiles), the flags, the compiler and the CPU, and loaded; None (the reason
    appended to ``reasons``) if it cannot be."""
    sources = [sources] if isinstance(sources, Path) else list(sources)
    cc = _compiler()
    if cc is None:
        reasons.append("no C compiler (cc, gcc or clang) on PATH")
        return None
    headers = sorted({h for src in sources for h in src.parent.glob("*.h")})
    texts = [f.name.encode() + b"\0" + f.read_bytes() for f in [*sources, *headers]]
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as err:
        reasons.append(f"{cc} --version failed: {err}")
        return None
    flags = compile_flags()
    parts = [*texts, " ".join(flags).encode(), b"-c, then " + " ".join(LINK).encode(), version.encode(),
             _cpu_flags().encode()]
    key = hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]
    name = sources[0].name
    path = cache_dir() / f"{sources[0].stem}-{key}.so"
    if not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
            os.close(fd)
        except OSError as err:
            reasons.append(f"cannot write the compiled kernel to {path.parent}: {err}")
            return None
        objs = [f"{tmp[: -len('.so')]}-{x}.o" for x in range(len(sources))]
        try:
            for src, obj in zip(sources, objs):
                done = subprocess.run([cc, *flags, "-c", str(src), "-o", obj], capture_output=True, text=True,
                                      timeout=300)
                # a compiler without the AVX-512 preference: the plain flags
                if done.returncode != 0 and flags != FLAGS:
                    done = subprocess.run([cc, *FLAGS, "-c", str(src), "-o", obj], capture_output=True, text=True,
                                          timeout=300)
                if done.returncode != 0:
                    name = src.name
                    break
            if done.returncode == 0:   # linked apart: -ffast-math at the link would add crtfastmath, which flushes the
                # process's denormals
                done = subprocess.run([cc, *LINK, *objs, "-o", tmp, "-lm"], capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as err:
            os.unlink(tmp)
            reasons.append(f"compiling {name} failed: {err}")
            return None
        finally:
            for obj in objs:
                if os.path.exists(obj):
                    os.unlink(obj)
        if done.returncode != 0:
            os.unlink(tmp)
            reasons.append(f"compiling {name} failed: {done.stderr.strip().splitlines()[-1:]}")
            return None
        os.replace(tmp, path)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as err:
        reasons.append(f"cannot load {path}: {err}")
        return None
    return lib


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The compiled kernel, built on first call; None (reason in ``unavailable_reason()``) if it cannot be."""
    if os.environ.get("ATTNLAB_NATIVE", "1") == "0":
        _reason.append("ATTNLAB_NATIVE=0")
        return None
    lib = compiled(BAND_SOURCES, _reason)
    if lib is None:
        return None
    f = lib.attnlab_band_forward
    p, i64 = ctypes.c_void_p, ctypes.c_long
    f.argtypes = ([p, p, p, p, p, p, i64, i64, i64, p, i64, p, i64, i64, i64, p, p] + [i64] * 15
                  + [ctypes.c_int, ctypes.c_float, ctypes.c_int, p, p, i64])
    f.restype = ctypes.c_int
    f = lib.attnlab_band_backward
    f.argtypes = [p, p, p, p, p, p, p, p, p, p, i64, i64, i64, i64, i64, i64, i64, i64, i64, ctypes.c_int,
                  ctypes.c_float, ctypes.c_int]
    f.restype = ctypes.c_int
    f = lib.attnlab_block_topk
    f.argtypes = [p, i64, i64, p, i64, i64, p, ctypes.c_int]
    f.restype = ctypes.c_int
    f = lib.attnlab_column_mass
    f.argtypes = [p, i64, i64, i64, p, i64, i64, ctypes.c_int]
    f.restype = ctypes.c_int
    return lib


def available() -> bool:
    return library() is not None


def unavailable_reason() -> str:
    library()
    return _reason[-1] if _reason else ""


def _library_or_raise() -> ctypes.CDLL:
    lib = library()
    if lib is None:
        raise RuntimeError(f"the native band kernel is unavailable: {unavailable_reason()}")
    return lib


def _rows(x: Tensor) -> Tensor:
    # (N, m, d) with contiguous rows of d floats (any head stride: the kernel takes it); a copy only if not
    return x if x.stride(2) == 1 and x.stride(1) == x.shape[2] else x.contiguous()


def _strided(x: Tensor) -> Tensor:
    # (N, n, d) whose rows are d contiguous floats, at any head and row stride (the forward kernel takes both:
    # transformers' (B, n, H, d) layout seen as (B·H, n, d) is read in place); a copy only if not
    return x if x.stride(2) == 1 else x.contiguous()


def _ptr(x: Tensor | None) -> int | None:
    return None if x is None else x.data_ptr()


def _keep_bytes(keep: Tensor | None) -> Tensor | None:
    return None if keep is None else keep.to(torch.uint8).contiguous()


def band_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    w: int,
    *,
    offset: int = 0,
    causal: bool = False,
    keep: Tensor | None = None,
    heads_per_keep: int = 1,
    scale: float,
    extras: tuple[Tensor, Tensor, int] | None = None,
    columns: Tensor | None = None,
    blocks: Tensor | None = None,
    chunk: int = 0,
    heads: tuple[Tensor, Tensor] | None = None,
    out: tuple[Tensor, Tensor] | None = None,
    first_row: int = 0,
) -> tuple[Tensor, Tensor]:
    """(O, L) over N heads: q (N, n, d), k, v (N, m, d) float32 CPU (q, k, v and O may be views at any head and row
    stride whose rows are d contiguous floats); keep (N / heads_per_keep, m) bool or None; extras (S_E, V_E, c): S_E (N,
    n, e) the extra keys' scores (NEG_INF where not allowed), V_E (N, T|1, e, d) their values, c the rows per chunk;
    columns: (N, g) int64 key positions every row may read (−1: empty; ascending with the empty slots last reads least),
    read from k, v where they lie (once per head), scored and masked (off the band, causal, kept) inside the kernel;
    blocks: (N, T, g_b) int64 a key set per chunk of ``chunk`` rows (a multiple of the kernel's tile, ``TILE``: key
    blocks chosen per query block), distinct in each set (a key of a set that is a column is read once, as the column),
    in any order, read from k, v where they lie (once per head and chunk); heads (h_q, h_kv): N int64 rows each — head x
    reads q row h_q[x] and k, v row h_kv[x], and writes ``out`` = (O, L) at row h_q[x] (q, O: (R, n, d), k, v: (R_kv, m,
    d), L: (R, n); the other rows untouched); first_row (with ``heads``): rows i < first_row are left as they are in
    ``out`` (computed elsewhere). Returns O (N, n, d), L (N, n) (with ``heads``: ``out``)."""
    lib = _library_or_raise()
    N, n, d = q.shape
    m = k.shape[1]
    h_q = h_kv = None
    if heads is not None:
        h_q, h_kv = (x.to(torch.int64).contiguous() for x in heads)
        N = h_q.shape[0]
        if out is None or out[0].stride(2) != 1 or not out[1].is_contiguous():
            raise ValueError("band_forward: heads= writes into out=(O, L): O with rows of d contiguous floats, "
                             "L contiguous")
    if d % VEC:
        raise ValueError(f"band_forward: d must be a multiple of {VEC}, got {d}")
    if first_row and heads is None:
        raise ValueError("band_forward: first_row= leaves rows unwritten: only with heads= and out=")
    q, k, v, keep_u8 = _strided(q), _strided(k), _strided(v), _keep_bytes(keep)
    e = Te = c = 0
    s_e = v_e = None
    if extras is not None:
        s_e, v_e, c = extras
        s_e, v_e = s_e.contiguous(), v_e.contiguous()
        Te, e = v_e.shape[1], v_e.shape[2]
    g = 0
    p_c = None
    if columns is not None:
        p_c = columns.to(torch.int64).contiguous()
        g = p_c.shape[-1]
    gb, Tb = 0, 1
    if blocks is not None:   # a set per chunk, read from k, v in place
        blocks = blocks.to(torch.int64).contiguous()
        if chunk <= 0 or chunk % TILE or blocks.dim() != 3 or blocks.shape[1] != -(-n // chunk):
            raise ValueError(f"band_forward: blocks need {-(-n // chunk) if chunk > 0 else '?'} chunks of a multiple "
                             f"of {TILE} rows, got chunk = {chunk}, blocks {tuple(blocks.shape)}")
        if first_row % TILE:
            raise ValueError(f"band_forward: blocks need first_row a multiple of {TILE}, got {first_row}")
        Tb, gb = blocks.shape[1], blocks.shape[2]
    O, L = out if heads is not None else (q.new_empty(N, n, d), q.new_empty(N, n))
    failed = lib.attnlab_band_forward(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), _ptr(keep_u8), _ptr(s_e), _ptr(v_e), e, Te, c,
        _ptr(p_c), g, _ptr(blocks), gb, Tb, int(chunk) if gb else 1,
        O.data_ptr(), L.data_ptr(), N, n, m, d, *q.stride()[:2], *k.stride()[:2], *v.stride()[:2], *O.stride()[:2],
        heads_per_keep,
        int(w), int(offset), int(bool(causal)), float(scale), torch.get_num_threads(), _ptr(h_q), _ptr(h_kv),
        min(int(first_row), n),
    )
    if failed:
        raise MemoryError(f"band kernel: no memory for its per-thread scratch (w = {w}, d = {d})")
    return O, L


def band_backward(
    q: Tensor, k: Tensor, v: Tensor, dO: Tensor, L: Tensor, D: Tensor, w: int, *,
    offset: int = 0, causal: bool = False, keep: Tensor | None = None, heads_per_keep: int = 1, scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """The band's (dq, dk, dv), P_ij = exp(τ q_i·k_j − L_i), dS = P ∘ (dO vᵀ − D): q, dO (N, n, d), k, v (N, m, d),
    L (N, n) the saved log-normaliser, D (N, n) = rowsum(dO ∘ O).  Threads take whole heads."""
    lib = _library_or_raise()
    N, n, d = q.shape
    m = k.shape[1]
    q, dO, L, D = (x.contiguous() for x in (q, dO, L, D))
    k, v, keep_u8 = _rows(k), _rows(v), _keep_bytes(keep)
    dq, dk, dv = torch.zeros_like(q), q.new_zeros(N, m, d), q.new_zeros(N, m, d)
    failed = lib.attnlab_band_backward(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), _ptr(keep_u8),
        dO.data_ptr(), L.data_ptr(), D.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        N, n, m, d, k.stride(0), v.stride(0), heads_per_keep, int(w), int(offset), int(bool(causal)), float(scale),
        torch.get_num_threads(),
    )
    if failed:
        raise MemoryError(f"band kernel: no memory for its per-thread scratch (w = {w}, d = {d})")
    return dq, dk, dv


def block_topk(s: Tensor, w, K: int, b: int) -> Tensor:
    """B_t of every query block from the pooled scores s (B, H, T, T), CPU float32 (``block_topk.c``): the K blocks
    J < t of largest ŝ_tJ that the band of half-width w_h does not hold for every row of block t, largest first,
    −1 past the candidates; ``(B, H, T, K)`` int64 — ``key_blocks.top_pooled_blocks``' choice, a row's prefix of
    candidates scanned instead of a top-k over the masked row."""
    lib = _library_or_raise()
    B, H, T, _ = s.shape
    s = s.contiguous()
    w_ = torch.as_tensor(w, dtype=torch.long).view(1, H).expand(B, H).contiguous()              # (B·H,)
    out = torch.empty(B, H, T, K, dtype=torch.long)
    lib.attnlab_block_topk(s.data_ptr(), B * H, T, w_.data_ptr(), int(b), int(K), out.data_ptr(),
                           torch.get_num_threads())
    return out


def column_mass(s: Tensor, sigma: Tensor) -> None:
    """σ_xt = Σ_a softmax_{t ≤ p_a}(s_xa)_t into sigma (B, r, m) from the scaled scores s (B, 1, r·nq, m) of r heads'
    last nq queries at positions p_a = m − nq + a (``column_mass.c``; s is overwritten with exp(s − M)), CPU float32:
    ``slash_lines.last_query_mass``'s sum of the causal softmax rows, each row through the cache once."""
    lib = _library_or_raise()
    B, r, m = sigma.shape
    assert (s.is_contiguous() and s.shape == (B, 1, s.shape[2], m) and s.shape[2] % r == 0
            and sigma.stride()[1:] == (m, 1))
    lib.attnlab_column_mass(s.data_ptr(), B * r, s.shape[2] // r, m, sigma.data_ptr(), r, sigma.stride(0),
                            torch.get_num_threads())


# ---- the fused decoding step (``decode_kernel.c``) ----------------------------------------------------------------
DECODE_SOURCE = Path(__file__).with_name("decode_kernel.c")
# the fewest resident slots in one part of a decoding query's keys split across threads (decode_kernel.c)
DECODE_CHUNK = 128
_decode_reason: list[str] = []


@lru_cache(maxsize=1)
def _decode_compiled() -> ctypes.CDLL | None:
    lib = compiled(DECODE_SOURCE, _decode_reason)
    if lib is None:
        return None
    f = lib.attnlab_decode_read_back_packed   # its arguments packed: one conversion a call (``decode_read_back``)
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float]
    f.restype = ctypes.c_int
    return lib


@lru_cache(maxsize=1)
def decode_library() -> ctypes.CDLL | None:
    """The compiled decoding step; None (reason in ``decode_unavailable_reason()``) with ``ATTNLAB_NATIVE=0`` or
    ``ATTNLAB_NATIVE_DECODE=0`` (the Python step, its reference, then runs) or where it cannot be built.  Decided on
    first use, as ``library()`` (``decode_library.cache_clear()`` decides again)."""
    for var in ("ATTNLAB_NATIVE", "ATTNLAB_NATIVE_DECODE"):
        if os.environ.get(var, "1") == "0":
            _decode_reason.append(f"{var}=0")
            return None
    return _decode_compiled()


def decode_unavailable_reason() -> str:
    decode_library()
    return _decode_reason[-1] if _decode_reason else ""


def decode_ready(*xs: Tensor | None) -> bool:
    """Whether the fused step takes these tensors (CPU float32, or index tensors on the CPU) and is built."""
    return (all(x is None or x.device.type == "cpu" for x in xs) and xs[0].dtype == torch.float32
            and decode_library() is not None)


def _last(x: Tensor, dtype=None) -> Tensor:
    # rows of contiguous elements along the last dimension (any other strides) of ``dtype``; a copy only if not
    if dtype is not None and x.dtype != dtype:
        x = x.to(dtype)
    return x if x.shape[-1] <= 1 or x.stride(-1) == 1 else x.contiguous()


def _dense(x: Tensor, dtype=None) -> Tensor:
    if dtype is not None and x.dtype != dtype:
        x = x.to(dtype)
    return x if x.is_contiguous() else x.contiguous()


def decode_read_back(q, k, v, positions, flags, w, reads, summaries, store, i: int, *, sliding, page: int, pages: int,
                     scale: float, rows: tuple[Tensor, Tensor] | None = None,
                     mean_pages: int = 0) -> tuple[Tensor, Tensor]:
    """One decoding query per head (``decode_kernel.c``): band ∪ columns over the resident slots, and the ``pages``
    candidate pages of largest Quest bound read back (``mean_pages`` of them by the mean key's score instead,
    ``pages.choose_pages``), resident or from the store, in one softmax.

    q (B, Hq, 1, d) at position i; k, v (B, Hs, L, d | dv), positions (B, Hs, L) (−1: empty), flags (B, Hs, r, L) bool;
    w, reads (Hq,) or (Hs, r): each query head's band (FULL = −1) and whether it reads back; summaries:
    ``pages.PageSummaries`` (m, M (B, V, P', d) with P' ≥ i // page + 1; None with pages = 0), of these heads, or the
    layer's with ``rows`` = (each KV head's row of m, M (Hs,), each query head's row of the column pages (Hq,)) (no
    copy); store: (keys, values (B, Hs, S, ·), table (B, Hs, J) position → store slot, −1: not stored) or None;
    sliding: the layer's window or None.  Returns out (B, Hq, 1, dv), read (B,
    Hs) int64 the distinct store slots read."""
    lib = decode_library()
    if lib is None:
        raise RuntimeError(f"the native decoding step is unavailable: {decode_unavailable_reason()}")
    B, Hq, _, d = q.shape
    Hs, L, dv = k.shape[1], k.shape[2], v.shape[-1]
    q, k, v, positions, flags = _last(q), _last(k), _last(v), _last(positions, torch.int64), _last(flags, torch.bool)
    w, reads = _dense(w, torch.int64), _dense(reads, torch.bool)
    out = q.new_empty(B, Hq, 1, dv)
    read = torch.zeros(B, Hs, dtype=torch.int64)
    ptrs = [q, k, v, positions, flags, w, reads]
    args = [q.stride(0), q.stride(1), *k.stride()[:3], *v.stride()[:3], *positions.stride()[:2], *flags.stride()[:3]]
    extra = [None] * 4                                                   # sm, pcount, cs, ccount: the mean key's
    if pages and summaries is not None:
        m, M = (_last(x) for x in summaries[:2])
        sm = _last(summaries.s) if mean_pages else m
        if not m.stride() == M.stride() == sm.stride():
            m, M, sm = m.contiguous(), M.contiguous(), sm.contiguous()
        if mean_pages:
            extra = [sm, _dense(summaries.count, torch.float32), _dense(summaries.column_sum),
                     _dense(summaries.column_count, torch.float32)]
        pc, mc, Mc = (_dense(x) for x in summaries[2:5])
        if m.shape[2] < i // page + 1:
            raise ValueError(f"decode_read_back: summaries of {m.shape[2]} pages, position {i} needs {i // page + 1}")
        mrow, hrow = rows if rows is not None else (torch.arange(Hs), torch.arange(Hq))
        ptrs += [m, M, _dense(mrow, torch.int64), _dense(pc, torch.int64), mc, Mc, _dense(hrow, torch.int64)]
        args += [*m.stride()[:3], m.shape[2], pc.shape[1], pc.shape[-1]]
    else:
        pages = mean_pages = 0
        ptrs += [None] * 7
        args += [0] * 6
    if store is not None:
        ks, vs, table = _last(store[0]), _last(store[1]), _last(store[2], torch.int64)
        ptrs += [ks, vs, table]
        args += [*ks.stride()[:3], *vs.stride()[:3], ks.shape[2], *table.stride()[:2], table.shape[-1]]
    else:
        ptrs += [None] * 3
        args += [0] * 10
    ptrs += [out, read, *extra]
    args += [B, Hs, Hq // Hs, L, d, dv, int(i), int(sliding or 0), int(page), int(pages), torch.get_num_threads(),
             int(mean_pages), DECODE_CHUNK]
    p = array("Q", [0 if x is None else x.data_ptr() for x in ptrs])   # packed:
                                                                       # one conversion (a ctypes array: 20× slower)
    a = array("q", args)
    if lib.attnlab_decode_read_back_packed(p.buffer_info()[0], a.buffer_info()[0], float(scale)):
        raise MemoryError(f"decode kernel: no memory for its per-thread scratch (position {i})")
    return out, read

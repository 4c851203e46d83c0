"""attnlab on one CUDA GPU, in one go: (a) the CUDA tests, (b) every method's logits on CUDA against the CPU,
(c) the speed tables of the issue "faster than FlashAttention on the GPU" — all measured in this one run, on the GPU
it names, at the commit it names (``git rev-parse``, or ``$ATTNLAB_COMMIT`` where the tree has no .git).

    python benchmarks/gpu_check.py [--lengths 8192,32768,131072] [--skip tests,logits,speed] [--smoke] [--profile]

Exit status: 0 when every section ran and passed; 1 when any section failed (a CUDA test failed or did not finish, a
method's logits above the tolerance or a method that cannot run, a timed row that cannot run); 2 for a bad argument
(one line, nothing run).  The last lines list what failed.

Needs, beyond the image's PyTorch with CUDA: attnlab's own requirements (transformers, numpy, typer, rich; pytest
and hypothesis for (a)); no internet: every model is a random-weight model of a real model's shape (speed does not
depend on the weights).  ``--smoke``: tiny sizes, runs on the CPU too (the "device" side is then the FlexAttention
backend on the CPU, float32; the CUDA tests are not run there): it proves the script end to end; its times are no
speed claim.

(b) tolerance: the CUDA side runs in bfloat16 (8-bit mantissa, ≈ 0.4 % per rounding), the CPU side in float32; a
method passes when ‖logits_cuda − logits_cpu‖ / ‖logits_cpu‖ ≤ BF16_TOL over the prefill's positions and 4 decoding
steps (teacher-forced on the CPU's tokens).  A method whose per-input choice (columns, blocks) flips on a near tie
may differ more: the top-1 agreement is printed beside.
(c) attention alone at Llama-3.1-8B's head shape (32 query / 8 KV heads of 128, random q, k, v, bf16), β = 10 %:
SDPA causal (FlashAttention) vs FlexAttention band + 64 sinks (its BlockMask built once, and rebuilt) vs attnlab's
plan with its per-input parts (every head: band, 4 sinks, 64 vertical lines from the last queries; a quarter of
the heads also 8 key blocks per query block), selection and mask building included, both FlexBackend paths (parts
gathered beside the band; all in the BlockMask, the selection as one batch over heads); one layer compiled whole
(``torch.compile(fullgraph=True)``) against the same layer eager; the attention of one decoding step (SDPA over
every cached key against the page table's slots read by index); then whole-model prefill at 32K on SmolLM2-135M's
and Gemma-3-270M's shapes: SDPA, the fair sliding-window baseline (full layers SDPA, sliding layers FlexAttention's
window), streaming-llm and the plan per layer, and eager decoding (decoding from static caches under CUDA graphs is
not implemented: the tokens/s of both sides are Python-bound).  ``--profile``: one prefill per shape and method
under torch.profiler, the device time and kernels of each part of a layer (``execution.profile_ranges``).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

BF16_TOL = 3e-2
BETA = 0.10
CUDA_TEST_FILES = [
    "tests/test_kernel.py",
    "tests/test_kernel_flex.py",
    "tests/test_flex_backend.py",
    "tests/test_gathered_parts.py",
    "tests/test_device_option.py",
]


ERRORS: Path | None = None  # --errors: every caught failure's whole traceback is appended there
FAILURES: list[str] = []  # what failed in this run, one line each: the exit status and the closing list


def failed(err: BaseException, where: str) -> str:
    """One line for the table, the failure counted (the whole traceback to ``--errors``, when given)."""
    if ERRORS is not None:
        with ERRORS.open("a") as f:
            f.write(f"\n=== {where}\n{''.join(traceback.format_exception(err))}")
    line = " ".join(f"{type(err).__name__}: {err}".split())[:160]
    FAILURES.append(f"{where}: {line}")
    return line


def commit() -> str:
    """The commit this run measures: ``git rev-parse --short HEAD`` (+ "with uncommitted changes" where tracked files
    differ), else ``$ATTNLAB_COMMIT``, else "unknown (no git checkout)"."""
    import os

    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode == 0:
            dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
            return head.stdout.strip() + (" with uncommitted changes" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return os.environ.get("ATTNLAB_COMMIT") or "unknown (no git checkout)"


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


REPS = 5  # timed calls per figure (``--smoke``: 1, after 1 warm-up call)


def timed(fn, device, reps: int | None = None, warmup: int = 2) -> float:
    """Median seconds of ``fn()`` over ``reps`` calls (default ``REPS``) after ``warmup`` (compilation) calls."""
    reps, warmup = (REPS, warmup) if reps is None else (reps, warmup)
    if REPS == 1:  # the smoke: every figure once, after one warm-up call
        reps, warmup = 1, 1
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ---- (a) the CUDA tests ----------------------------------------------------------------------------------------------
def cuda_tests(timeout: int) -> None:
    """The CUDA tests in a subprocess: a failed test, a non-zero exit or a timeout is a failure of the run."""
    if not torch.cuda.is_available():
        print("no CUDA device: the CUDA tests are not run here (the CPU twins run in the test suite)", flush=True)
        return
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-o",
        "addopts=",
        "-q",
        "-p",
        "no:warnings",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:logging",
        "-rfEs",
        "--tb=line",
        "-k",
        "cuda",
        *CUDA_TEST_FILES,
    ]
    print(f"$ {' '.join(cmd[2:])}", flush=True)
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"the CUDA tests did not finish in {timeout} s", flush=True)
        FAILURES.append(f"CUDA tests: did not finish in {timeout} s")
        return
    print(
        "\n".join((r.stdout + r.stderr).strip().splitlines()[-30:]) + f"\n(pytest exit code {r.returncode})", flush=True
    )
    if r.returncode != 0:
        FAILURES.append(f"CUDA tests: pytest exit code {r.returncode}")


# ---- (b) every method's logits on the device against the CPU ---------------------------------------------------------
def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=100,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=4096,
        )
    ).eval()


def tiny_gemma3():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=64,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=4096,
    )
    return Gemma3ForCausalLM(cfg).eval()


def method_logits(model, method, ids, steps):
    """The prefill's logits (n, V) and those of the decoding steps fed ``steps`` (len(steps), V), float32, host."""
    with torch.no_grad(), method.applied(model):
        cache = method.new_cache(model)
        out = model(input_ids=ids, cache=cache, use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values
        rows = [out.logits[0].float().cpu()]
        for y in steps:
            rows.append(model(input_ids=torch.tensor([[y]]), cache=cache, use_cache=True).logits[0].float().cpu())
    return torch.cat(rows)


def tiny_method(name: str, budget: float = 0.5):
    """The method ``name`` at ``budget`` for a 2-layer, 4-head model: 2 retrieval heads where it has the option (a
    preset: its base method with the preset's values but that one)."""
    from attnlab.llm import methods

    methods.names()  # the registry, discovered
    base, values = (
        (methods.PRESETS[name].base, dict(methods.PRESETS[name].values)) if name in methods.PRESETS else (name, {})
    )
    if "retrieval_heads" in methods.method_class(base).options:
        values["retrieval_heads"] = 2
    return methods.get(base, budget, **values)


def logits_check(smoke: bool, device) -> None:
    from char_model_folder import save_with_char_tokenizer

    from attnlab.llm import methods
    from attnlab.llm.calibration.build import build_calibration
    from attnlab.llm.execution.backend import register_backend
    from attnlab.llm.models.device import place_model
    from attnlab.llm.models.loading import load_causal_lm

    n = 512 if smoke else 1024  # attnlab's preset fits its retrieval heads' tails from 512 tokens on
    names = ["full", "streaming-llm", "attnlab", "quest"] if smoke else [*methods.names(), *methods.preset_names()]
    flex_on_cpu = (
        torch.device(device).type == "cpu"
    )  # smoke without CUDA: the device side is the flex backend on the CPU
    print(
        f"tolerance: ‖Δlogits‖ / ‖logits_cpu‖ ≤ {BF16_TOL} "
        f"({'float32 flex backend on the CPU' if flex_on_cpu else 'bfloat16 on ' + str(device)})"
    )
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "text.txt"
        rng = np.random.default_rng(0)
        text.write_text(" ".join("".join(rng.choice(list("abcdefghij"), 4)) for _ in range(3 * n)) + "\n")
        for label, make in (
            ("Llama (tiny, random)", tiny_llama),
            ("Gemma-3 (tiny, random, sliding layers)", tiny_gemma3),
        ):
            folder = Path(tmp) / label.split()[0]
            save_with_char_tokenizer(make(), folder)
            cpu, tok = load_causal_lm(str(folder))
            dev = copy.deepcopy(cpu) if flex_on_cpu else place_model(copy.deepcopy(cpu), device)
            ids = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(1))
            steps = torch.randint(0, 100, (4,), generator=torch.Generator().manual_seed(2)).tolist()
            cal = None
            print(f"\n{label}, n = {n}:  method | rel. error | top-1 agreement | verdict", flush=True)
            for name in names:
                try:
                    m_cpu, m_dev = tiny_method(name), tiny_method(name)
                    if m_cpu.calibrated and cal is None:
                        cal, _ = build_calibration(
                            cpu, tok, [tiny_method(x) for x in names if tiny_method(x).calibrated], n, text, 1
                        )
                    m_cpu.prepare(cpu, n, cal if m_cpu.calibrated else None)
                    m_dev.prepare(dev, n, cal if m_dev.calibrated else None)
                    ref = method_logits(cpu, m_cpu, ids, steps)
                    if flex_on_cpu:
                        from attnlab.llm.execution.cpu_backend import CpuBackend
                        from attnlab.llm.execution.flex_backend import FlexBackend

                        register_backend("cpu", lambda: FlexBackend(tile=64))
                    try:
                        got = method_logits(dev, m_dev, ids, steps)
                    finally:
                        if flex_on_cpu:
                            register_backend("cpu", CpuBackend)
                except Exception as err:  # a method that cannot run here says so in one line
                    print(f"  {name:24s} | cannot run: {failed(err, f'logits {label} {name}')}", flush=True)
                    continue
                rel = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
                top1 = float((got.argmax(-1) == ref.argmax(-1)).float().mean())
                print(
                    f"  {name:24s} | {rel:.2e} | {100 * top1:5.1f} % | "
                    f"{'ok' if rel <= BF16_TOL else 'ABOVE TOLERANCE'}",
                    flush=True,
                )
                if rel > BF16_TOL:
                    FAILURES.append(f"logits {label} {name}: {rel:.2e} above {BF16_TOL}")


# ---- (c) speed ------------------------------------------------------------------------------------------------------
def beta_heads(H: int, n: int, beta: float, dynamic: int = 64, blocked_every: int = 4, K: int = 8):
    """HeadPlans at β of the causal entries: band w_h (the widest that fits), 4 sinks, ``dynamic`` per-input columns,
    every ``blocked_every``-th head also K key blocks per query block (``plan.entries_of``)."""
    from attnlab.llm.plans.plan import HeadPlan, entries_of
    from attnlab.support import Support

    heads = []
    for h in range(H):
        blocks = K if h % blocked_every == 0 else 0
        lo, hi = 0, n - 2
        while lo < hi:  # the widest band whose entries fit β · n(n+1)/2
            mid = (lo + hi + 1) // 2
            lo, hi = (
                (mid, hi) if entries_of(mid, 4, dynamic, n, blocks=blocks) <= beta * n * (n + 1) / 2 else (lo, mid - 1)
            )
        heads.append(HeadPlan(Support(w=int(lo), columns=np.arange(4)), dynamic=dynamic, blocks=blocks))
    return heads


def attention_alone(lengths, device, smoke: bool) -> None:
    from torch.nn.attention.flex_attention import create_block_mask

    from attnlab.llm.execution.attention import LayerRunner
    from attnlab.llm.execution.flex_backend import FlexBackend
    from attnlab.nn.mechanisms.flex import flex_attention_compiled

    H, H_kv, d = (8, 2, 32) if smoke else (32, 8, 128)
    dtype = torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16
    print(
        f"attention alone, {H} query / {H_kv} KV heads of {d}, {dtype}, β = {BETA:.0%}, "
        f"median of {REPS} after {2 if REPS > 1 else 1} warm-up calls"
    )
    print(
        "| n | SDPA causal | flex band + 64 sinks | its mask built | flex, mask each call | attnlab plan (selection + "
        "masks + flex + gathered parts) | attnlab plan, all in the BlockMask | speed-up band+sinks | "
        "speed-up attnlab | all in the BlockMask |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in lengths:
        try:
            g = torch.Generator(device=device).manual_seed(0)
            q = torch.randn(1, H, n, d, device=device, dtype=dtype, generator=g)
            k, v = (torch.randn(1, H_kv, n, d, device=device, dtype=dtype, generator=g) for _ in range(2))
            scale = d**-0.5
            t_sdpa = timed(
                lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, scale=scale), device
            )
            w = max(0, int(BETA * (n + 1) / 2) - 64)  # band + 64 sinks ≈ β of the causal entries

            def band_sinks(b, h, i, j):
                return (j <= i) & ((i - j <= w) | (j < 64))

            tile = 64 if smoke else 128
            make = lambda: create_block_mask(
                band_sinks, None, None, n, n, device=device, BLOCK_SIZE=tile, _compile=True
            )  # noqa: E731
            bm = make()
            t_band = timed(lambda: flex_attention_compiled(q, k, v, bm, scale=scale, enable_gqa=True), device)
            t_mask = timed(make, device)
            t_both = timed(lambda: flex_attention_compiled(q, k, v, make(), scale=scale, enable_gqa=True), device)
            cells = []
            for gather in (True, False):  # per-input keys gathered beside the band, or all in the BlockMask
                try:
                    backend = FlexBackend(gather=gather, tile=64 if smoke else 128)
                    runner = LayerRunner(beta_heads(H, n, BETA), 0, H_kv, backend=backend)
                    t_plan = timed(lambda: runner.prefill(q, k, v, scale), device)
                    cells.append((f"{1e3 * t_plan:.3f} ms", f"{t_sdpa / t_plan:.2f}×"))
                except Exception as err:  # the plan's failure said; the baselines' row stays
                    cells.append(
                        (f"cannot run: {failed(err, f'attention alone, attnlab plan (gather={gather}), n = {n}')}", "–")
                    )
            print(
                f"| {n:,} | {1e3 * t_sdpa:.3f} ms | {1e3 * t_band:.3f} ms | {1e3 * t_mask:.3f} ms | "
                f"{1e3 * t_both:.3f} ms | "
                f"{cells[0][0]} | {cells[1][0]} | {t_sdpa / t_band:.2f}× | {cells[0][1]} | {cells[1][1]} |",
                flush=True,
            )
            del q, k, v, bm
        except torch.OutOfMemoryError:
            print(f"| {n:,} | out of device memory |")
            FAILURES.append(f"attention alone, n = {n}: out of device memory")
        except Exception as err:
            print(f"| {n:,} | cannot run: {failed(err, f'attention alone, n = {n}')} |", flush=True)
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()


def model_of(shape: str, n: int, smoke: bool):
    """A random-weight causal LM of SmolLM2-135M's or Gemma-3-270M's shape (``smoke``: 2 layers, narrow)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    layers = 2 if smoke else None
    if shape == "smollm2-135m":
        return LlamaForCausalLM(
            LlamaConfig(
                vocab_size=49152,
                hidden_size=576,
                intermediate_size=1536,
                num_hidden_layers=layers or 30,
                num_attention_heads=9,
                num_key_value_heads=3,
                max_position_embeddings=max(n, 8192),
                tie_word_embeddings=True,
            )
        ).eval()
    L = layers or 18
    return Gemma3ForCausalLM(
        Gemma3TextConfig(
            vocab_size=262144,
            hidden_size=640,
            intermediate_size=2048,
            num_hidden_layers=L,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=256,
            sliding_window=128 if smoke else 512,
            layer_types=["full_attention" if (l + 1) % 6 == 0 or l == L - 1 else "sliding_attention" for l in range(L)],
            max_position_embeddings=max(n, 8192),
        )
    ).eval()


def plan_method(model, n: int, folder: Path):
    """attnlab's plan at β for ``model`` (``beta_heads`` per layer, a sliding layer's heads capped to its window), as a
    plan-file method."""
    from attnlab.llm.methods.attnlab_plan import PlanFile
    from attnlab.llm.plans.plan import Plan, cap_to_window, model_shape

    s = model_shape(model)
    windows = s["windows"] or [None] * s["num_layers"]
    heads = [
        [cap_to_window(h, windows[l]) for h in beta_heads(s["num_heads"], n, BETA)] for l in range(s["num_layers"])
    ]
    path = folder / f"plan-{n}.json"
    Plan(heads, s["num_kv_heads"], "attnlab", BETA, n, windows=s["windows"]).save(path)
    return PlanFile(path)


def prefill_and_decode(model, m, n: int, ids, device, steps: int = 32):
    """(prefill seconds, KV bytes held after the prefill, decoding tokens/s over ``steps`` greedy steps) of ``model``
    under ``m``."""
    from attnlab.llm.eval.greedy import kv_bytes

    m.prepare(model, n, None)
    with torch.no_grad(), m.applied(model):
        t = timed(lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1), device, reps=3, warmup=1)
        cache = m.new_cache(model)
        out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        cache = getattr(out, "cache", None) or out.past_key_values
        held = kv_bytes(cache)
        y = out.logits[0, -1].argmax().view(1, 1)
        model(input_ids=y, cache=cache, use_cache=True)  # the first step (compilations) untimed
        sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            y = model(input_ids=y, cache=cache, use_cache=True).logits[0, -1].argmax().view(1, 1)
        sync(device)
        return t, held, steps / (time.perf_counter() - t0)


@contextmanager
def backend_swapped(device, backend):
    """The seam's backend of ``device``'s type replaced by ``backend`` for the block (None: unchanged)."""
    from attnlab.llm.execution.backend import backend_for, register_backend

    kind = torch.device(device).type
    before = backend_for(device)
    if backend is not None:
        register_backend(kind, lambda: backend)
    try:
        yield
    finally:
        register_backend(kind, lambda: before)


def compiled_layer(n: int, device, smoke: bool) -> None:
    """One layer's prefill compiled whole (selection, index lists, BlockMask, FlexAttention in one graph) against the
    same layer eager: its time on CUDA (Inductor), its output and choice everywhere.  On the CPU the graph runs through
    AOT autograd's eager backend (Inductor's CPU FlexAttention template refuses a BlockMask built in the same graph)."""
    from attnlab.llm.execution.attention import LayerRunner
    from attnlab.llm.execution.flex_backend import FlexBackend

    H, H_kv, d = (8, 2, 32) if smoke else (32, 8, 128)
    cuda = torch.device(device).type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(1, H, n, d, device=device, dtype=dtype, generator=g)
    k, v = (torch.randn(1, H_kv, n, d, device=device, dtype=dtype, generator=g) for _ in range(2))
    runner = LayerRunner(beta_heads(H, n, BETA), 0, H_kv, backend=FlexBackend(gather=False, tile=64 if smoke else 128))
    scale = d**-0.5
    eager, state = runner.prefill(q, k, v, scale)   # the output and the input's state (its decoding columns)
    chosen = state.decode_columns.clone()
    torch._dynamo.reset()
    layer = torch.compile(
        lambda q, k, v: runner.prefill(q, k, v, scale), fullgraph=True, **({} if cuda else {"backend": "aot_eager"})
    )
    t0 = time.perf_counter()
    out, compiled_state = layer(q, k, v)
    sync(device)
    t_compile = time.perf_counter() - t0
    err = float((out.float() - eager.float()).norm() / eager.float().norm().clamp_min(1e-30))
    same = bool(torch.equal(compiled_state.decode_columns, chosen))
    line = f"compiled in {t_compile:.1f} s; ‖Δ‖/‖eager‖ = {err:.1e}; the same columns chosen: {'yes' if same else 'NO'}"
    if cuda:
        t_eager = timed(lambda: runner.prefill(q, k, v, scale), device)
        t_comp = timed(lambda: layer(q, k, v), device)
        line += f"; eager {1e3 * t_eager:.3f} ms, compiled {1e3 * t_comp:.3f} ms ({t_eager / t_comp:.2f}×)"
    print(f"one layer compiled whole, n = {n:,}, {H} / {H_kv} heads of {d}, {dtype}: {line}", flush=True)
    if err > (BF16_TOL if cuda else 1e-5) or not same:
        FAILURES.append(f"compiled layer, n = {n}: ‖Δ‖/‖eager‖ = {err:.1e}, same columns: {same}")


def decode_alone(lengths, device, smoke: bool) -> None:
    """The attention of one decoding step at L cached keys: SDPA over every key against the page table's slots read
    by index (``page_table.read_by_index``: band w + 64 columns a head, β of the keys), Llama-3.1-8B's heads."""
    from attnlab.llm.execution.flex_backend import FlexBackend
    from attnlab.llm.execution.page_table import PageTable

    H, H_kv, d = (8, 2, 32) if smoke else (32, 8, 128)
    dtype = torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16
    print(
        f"\none decoding step's attention, {H} query / {H_kv} KV heads of {d}, {dtype}: every key (SDPA) against "
        f"{BETA:.0%} of them by index (band + 64 columns a head)"
    )
    print("| L | SDPA, every key | by index | speed-up | slots read a head |")
    print("|---|---|---|---|---|")
    backend = FlexBackend()
    for L in lengths:
        try:
            g = torch.Generator(device=device).manual_seed(0)
            q = torch.randn(1, H, 1, d, device=device, dtype=dtype, generator=g)
            k, v = (torch.randn(1, H_kv, L, d, device=device, dtype=dtype, generator=g) for _ in range(2))
            S = max(65, int(BETA * L))
            band = torch.arange(L - (S - 64), L, device=device)
            cols = (
                torch.randperm(L - (S - 64), generator=torch.Generator().manual_seed(1))[:64].sort().values.to(device)
            )
            slots = torch.cat([cols, band]).expand(1, H_kv, H // H_kv, 1, S)
            table = PageTable(slots)
            t_full = timed(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True, scale=d**-0.5), device)
            t_idx = timed(lambda: backend.decode(q, k, v, d**-0.5, table), device)
            print(
                f"| {L:,} | {1e3 * t_full:.3f} ms | {1e3 * t_idx:.3f} ms | {t_full / t_idx:.2f}× | {S:,} |", flush=True
            )
        except Exception as err:
            print(f"| {L:,} | cannot run: {failed(err, f'decoding step alone, L = {L}')} |", flush=True)


def profile_prefill(model, m, n: int, ids, label: str, device) -> None:
    """One prefill of ``model`` under ``m`` under torch.profiler: per layer, each part's kernels and device time (the
    ranges of ``execution.profile_ranges``), the copies among them, and the gaps (the layer's wall time the device
    spent idle); then the kernels by device time."""
    from torch.profiler import ProfilerActivity, profile

    from attnlab.llm.execution.profile_ranges import RANGES

    cuda = torch.device(device).type == "cuda"
    m.prepare(model, n, None)
    with torch.no_grad(), m.applied(model):
        model(input_ids=ids, use_cache=False, logits_to_keep=1)
        sync(device)
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]) as prof:
            model(input_ids=ids, use_cache=False, logits_to_keep=1)
            sync(device)
        wall = time.perf_counter() - t0
    events = prof.events()
    layers = max(1, sum(e.name == "attnlab.layer" for e in events))

    def device_kernels(e):  # every device kernel launched under e (its own and its children's)
        own = [x for x in getattr(e, "kernels", [])]
        own += [c for c in e.cpu_children if c.device_type != torch.autograd.DeviceType.CPU]
        return own + [
            x for c in e.cpu_children if c.device_type == torch.autograd.DeviceType.CPU for x in device_kernels(c)
        ]

    def duration(x):
        return getattr(x, "duration", None) or getattr(x, "device_time", 0.0) or 0.0

    rows = {}
    for name in RANGES:
        evs = [e for e in events if e.name == name]
        ks = [x for e in evs for x in device_kernels(e)]
        copies = [x for x in ks if "copy" in x.name.lower() or "memcpy" in x.name.lower()]
        rows[name] = (
            sum(e.cpu_time_total for e in evs),
            sum(duration(x) for x in ks),
            len(ks),
            len(copies),
            sum(duration(x) for x in copies),
        )
    cpu_l, dev_l, k_l = rows["attnlab.layer"][:3]
    parts = [r for r in RANGES if r != "attnlab.layer"]
    other = (
        cpu_l - sum(rows[r][0] for r in parts),
        dev_l - sum(rows[r][1] for r in parts),
        k_l - sum(rows[r][2] for r in parts),
    )
    print(
        f"\nprofile of one prefill, {label}: {1e3 * wall:.1f} ms wall under the profiler, {layers} layer calls; "
        "per layer"
        f"{'' if cuda else ' (CPU: host time only, no device kernels)'}:"
    )
    print("| part | host ms | device ms | kernels | copies (kernels, device ms) |")
    print("|---|---|---|---|---|")
    for name in RANGES:
        c, dv, kn, nc, dc = rows[name]
        print(
            f"| {name.removeprefix('attnlab.')} | {c / 1e3 / layers:.3f} | {dv / 1e3 / layers:.3f} | "
            f"{kn / layers:.1f} | "
            f"{nc / layers:.1f}, {dc / 1e3 / layers:.3f} |"
        )
    print(
        f"| other (layer − its parts) | {other[0] / 1e3 / layers:.3f} | {other[1] / 1e3 / layers:.3f} | "
        f"{other[2] / layers:.1f} | |"
    )
    gaps = max(0.0, cpu_l - dev_l) if cuda else float("nan")
    print(f"| gaps (layer's host time the device was idle) | | {gaps / 1e3 / layers:.3f} | | |", flush=True)
    if cuda:
        for key in ("self_device_time_total", "self_cuda_time_total"):
            try:
                print(prof.key_averages().table(sort_by=key, row_limit=14, max_name_column_width=60), flush=True)
                break
            except Exception:  # the key's name differs between torch versions
                continue


def window_baseline(model, n: int, folder: Path):
    """The fair baseline of a model with sliding layers: every head full, run through attnlab's seam — its full layers
    one SDPA call (FlashAttention), its sliding layers FlexAttention's sliding-window kernel (band w = window − 1, its
    BlockMask built once)."""
    from attnlab.llm.methods.attnlab_plan import PlanFile
    from attnlab.llm.plans.plan import HeadPlan, Plan, cap_to_window, model_shape

    s = model_shape(model)
    windows = s["windows"] or [None] * s["num_layers"]
    heads = [[cap_to_window(HeadPlan.full(), w) for _ in range(s["num_heads"])] for w in windows]
    path = folder / f"window-{n}.json"
    Plan(heads, s["num_kv_heads"], "attnlab", 1.0, n, windows=s["windows"]).save(path)
    return PlanFile(path)


def whole_model(n: int, device, smoke: bool, profile: bool = False) -> None:
    from attnlab.llm import methods
    from attnlab.llm.execution.flex_backend import FlexBackend
    from attnlab.llm.models.device import place_model

    cuda = torch.device(device).type == "cuda"
    print(
        f"\nwhole-model prefill (logits of the last position) and eager decoding ({4 if smoke else 32} steps after one "
        f"untimed), n = {n:,}, random weights, median of {1 if smoke else 3}"
    )
    print("| shape | method | prefill | speed-up | KV bytes after prefill | decode tokens/s |")
    print("|---|---|---|---|---|---|")
    flex = None if cuda else FlexBackend(tile=64)  # on the CPU (smoke) the device side is the flex backend too
    for shape in ("smollm2-135m", "gemma3-270m"):
        try:
            model = place_model(model_of(shape, n, smoke), device)
            ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(0)).to(device)
        except Exception as err:  # out of memory: said, the table goes on
            print(f"| {shape} | cannot run: {failed(err, f'whole model {shape}')} |", flush=True)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            base = None
            times = {}
            rows = [("full (SDPA)", lambda: methods.get("full"), None)]
            if shape == "gemma3-270m":  # sliding layers: the fair baseline is a sliding-window kernel
                rows.append(
                    (
                        "full, sliding layers as a window (SDPA + flex window)",
                        lambda: window_baseline(model, n, Path(tmp)),
                        flex,
                    )
                )
            rows += [
                ("streaming-llm", lambda: methods.get("streaming-llm", BETA), flex),
                ("attnlab plan", lambda: plan_method(model, n, Path(tmp)), flex),
                (
                    "attnlab plan, all in the BlockMask",
                    lambda: plan_method(model, n, Path(tmp)),
                    FlexBackend(gather=False, tile=128 if cuda else 64),
                ),
            ]
            for label, make, backend in rows:
                try:
                    with backend_swapped(device, backend):
                        t, held, tps = prefill_and_decode(model, make(), n, ids, device, 4 if smoke else 32)
                except Exception as err:  # a shape FlexAttention refuses, out of memory: said, the table goes on
                    print(
                        f"| {shape} | {label} | cannot run: {failed(err, f'whole model {shape} {label}')} | | | |",
                        flush=True,
                    )
                    continue
                base = base or t
                times[label] = t
                print(
                    f"| {shape} | {label} | {1e3 * t:.1f} ms | {base / t:.2f}× | {held / 2**20:.1f} MiB | {tps:.1f} |",
                    flush=True,
                )
            window = times.get("full, sliding layers as a window (SDPA + flex window)")
            if window is not None:
                against = ", ".join(
                    f"{x} {window / times[x]:.2f}×" for x in ("streaming-llm", "attnlab plan") if x in times
                )
                print(f"{shape} against its sliding-window baseline ({1e3 * window:.1f} ms): {against}", flush=True)
            if profile:
                for label, make in (
                    ("streaming-llm", lambda: methods.get("streaming-llm", BETA)),
                    ("attnlab plan", lambda: plan_method(model, n, Path(tmp))),
                ):
                    try:
                        with backend_swapped(device, flex):
                            profile_prefill(model, make(), n, ids, f"{shape}, {label}", device)
                    except Exception as err:
                        print(f"profile {label}: {failed(err, f'profile {shape} {label}')}", flush=True)
        del model
        if cuda:
            torch.cuda.empty_cache()
    print(
        "decoding from static caches under CUDA graphs: not implemented (both sides decode eagerly, Python-bound)",
        flush=True,
    )


SECTIONS = ("tests", "logits", "speed")


def positive_list(text: str, flag: str, low: int) -> list[int]:
    """A comma list of integers ≥ ``low`` (ASCII digits only), or a one-line error naming ``flag``."""
    items = text.split(",")
    if not all(x.isascii() and x.isdigit() for x in items):
        raise SystemExit(f"{flag} {text}: expected a comma list of integers ≥ {low} (digits only)")
    values = [int(x) for x in items]
    if any(x < low for x in values):
        raise SystemExit(f"{flag} {text}: every value must be an integer ≥ {low}")
    return values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--lengths", default="8192,32768,65536,131072", help="comma list of n for the attention-alone table"
    )
    ap.add_argument("--prefill-n", type=int, default=32768, help="n of the whole-model prefill (≥ 64)")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: tests, logits, speed")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes; runs on the CPU too (no speed claim)")
    ap.add_argument("--test-timeout", type=int, default=240, help="seconds for the CUDA tests (≥ 1)")
    ap.add_argument(
        "--profile", action="store_true", help="also each part of a layer's prefill: kernels and device time"
    )
    ap.add_argument(
        "--errors", type=Path, default=None, help="a file the whole traceback of every caught failure is appended to"
    )
    a = ap.parse_args(argv)
    import warnings

    warnings.filterwarnings(
        "ignore", category=DeprecationWarning
    )  # create_block_mask(_compile=True): the anchor's mask at 128K
    global ERRORS
    lengths = positive_list(a.lengths, "--lengths", 64)
    if a.prefill_n < 64:
        raise SystemExit(f"--prefill-n {a.prefill_n}: must be an integer ≥ 64")
    if a.test_timeout < 1:
        raise SystemExit(f"--test-timeout {a.test_timeout}: must be a number of seconds ≥ 1")
    skip = {x.strip() for x in a.skip.split(",") if x.strip()}
    if skip - set(SECTIONS):
        raise SystemExit(f"--skip {a.skip}: choose among {', '.join(SECTIONS)}")
    if a.errors is not None and (a.errors.is_dir() or not a.errors.parent.is_dir()):
        why = "is a folder" if a.errors.is_dir() else f"its folder {a.errors.parent} does not exist"
        raise SystemExit(f"--errors {a.errors}: {why} (a file the tracebacks are appended to)")
    if not torch.cuda.is_available() and not a.smoke:
        raise SystemExit("no CUDA device here: run with --smoke (tiny sizes on the CPU, no speed claim)")
    global REPS
    ERRORS, REPS = a.errors, (1 if a.smoke else 5)
    FAILURES.clear()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU (smoke: no speed claim)"
    lengths, prefill_n = ([256], 256) if a.smoke else (lengths, a.prefill_n)
    print(
        f"attnlab GPU check on {name}; commit {commit()}; torch {torch.__version__}"
        + (f", CUDA {torch.version.cuda}" if device.type == "cuda" else "")
    )
    t0 = time.time()
    sections = [
        ("tests", "(a) CUDA tests", lambda: cuda_tests(a.test_timeout)),
        ("logits", "(b) every method's logits on the device against the CPU", lambda: logits_check(a.smoke, device)),
        ("speed", f"(c) speed on {name}", lambda: speed(lengths, prefill_n, device, a.smoke, a.profile)),
    ]
    for key, title, run in sections:
        if key in skip:
            continue
        print(f"\n## {title}", flush=True)
        try:
            run()
        except Exception as err:  # a section that breaks: said in one line, the others still run
            print(f"section {key} failed: {failed(err, f'section {key}')}", flush=True)
    print(f"\ntotal {time.time() - t0:.0f} s; commit {commit()}", flush=True)
    if FAILURES:
        print(f"{len(FAILURES)} failed:\n" + "\n".join(f"  {x}" for x in FAILURES), flush=True)
        return 1
    print("every section passed", flush=True)
    return 0


def speed(lengths, prefill_n: int, device, smoke: bool, profile: bool) -> None:
    """Section (c): attention alone, one layer compiled whole, one decoding step, the whole models."""
    attention_alone(lengths, device, smoke)
    try:
        compiled_layer(lengths[0] if smoke else min(lengths), device, smoke)
    except Exception as err:
        print(f"one layer compiled whole: cannot run: {failed(err, 'compiled layer')}", flush=True)
    decode_alone(lengths, device, smoke)
    whole_model(prefill_n, device, smoke, profile)


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

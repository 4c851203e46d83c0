"""attnlab on one CUDA GPU, in one go: (a) the CUDA tests, (b) every method's logits on CUDA against the CPU,
(c) the speed table of the issue "attnlab on the GPU" — all measured in this one run, on the GPU it names.

    python benchmarks/gpu_check.py [--lengths 8192,32768,65536,131072] [--skip a,b,c] [--smoke]

Needs, beyond the image's PyTorch with CUDA: attnlab's own requirements (transformers, numpy, typer, rich; pytest
and hypothesis for (a)); no internet: every model is a random-weight model of a real model's shape (speed does not
depend on the weights).  Fits in 8 minutes on one H100 (compiling FlexAttention included).  ``--smoke``: tiny sizes,
runs on the CPU too (the "device" side is then the FlexAttention backend on the CPU, float32): it proves the script
end to end; its times are no speed claim.

(b) tolerance: the CUDA side runs in bfloat16 (8-bit mantissa, ≈ 0.4 % per rounding), the CPU side in float32; a
method passes when ‖logits_cuda − logits_cpu‖ / ‖logits_cpu‖ ≤ BF16_TOL over the prefill's positions and 4 decoding
steps (teacher-forced on the CPU's tokens).  A method whose per-input choice (columns, blocks) flips on a near tie
may differ more: the top-1 agreement is printed beside.
(c) attention alone at Llama-3.1-8B's head shape (32 query / 8 KV heads of 128, random q, k, v, bf16), β = 10 %:
SDPA causal (FlashAttention) vs FlexAttention band + 64 sinks (its BlockMask built once, and rebuilt) vs attnlab's
plan with its per-input parts (every head: band, 4 sinks, 64 vertical lines from the last queries; a quarter of
the heads also 8 key blocks per query block), selection and mask building included; then whole-model prefill at
32K on SmolLM2-135M's and Gemma-3-270M's shapes (SDPA vs streaming-llm vs the same plan per layer), and decoding.
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
CUDA_TEST_FILES = ["tests/test_kernel.py", "tests/test_kernel_flex.py", "tests/test_flex_backend.py", "tests/test_gathered_parts.py",
                   "tests/test_device_option.py"]


ERRORS: Path | None = None   # --errors: every caught failure's whole traceback is appended there


def failed(err: BaseException, where: str) -> str:
    """One line for the table (the whole traceback to ``--errors``, when given)."""
    if ERRORS is not None:
        with ERRORS.open("a") as f:
            f.write(f"\n=== {where}\n{''.join(traceback.format_exception(err))}")
    return " ".join(f"{type(err).__name__}: {err}".split())[:160]


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, reps: int = 5, warmup: int = 2) -> float:
    """Median seconds of ``fn()`` over ``reps`` calls after ``warmup`` (compilation) calls."""
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


# ---- (a) the CUDA tests -----------------------------------------------------------------------------------------------
def cuda_tests(timeout: int) -> None:
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:warnings", "-p", "no:cacheprovider", "-p", "no:logging",
           "-rfEs", "--tb=line", "-k", "cuda", *CUDA_TEST_FILES]
    print(f"$ {' '.join(cmd[2:])}", flush=True)
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        print("\n".join((r.stdout + r.stderr).strip().splitlines()[-30:]) + f"\n(pytest exit code {r.returncode})", flush=True)
    except subprocess.TimeoutExpired:
        print(f"the CUDA tests did not finish in {timeout} s", flush=True)


# ---- (b) every method's logits on the device against the CPU ----------------------------------------------------------
def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, max_position_embeddings=4096)).eval()


def tiny_gemma3():
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=16, sliding_window=64, layer_types=["sliding_attention", "full_attention"],
                           max_position_embeddings=4096)
    return Gemma3ForCausalLM(cfg).eval()


def method_logits(model, method, ids, steps):
    """The prefill's logits (n, V) and those of the decoding steps fed ``steps`` (len(steps), V), float32 on the host."""
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

    methods.names()   # the registry, discovered
    base, values = (methods.PRESETS[name].base, dict(methods.PRESETS[name].values)) if name in methods.PRESETS else (name, {})
    if "retrieval_heads" in methods.method_class(base).options:
        values["retrieval_heads"] = 2
    return methods.get(base, budget, **values)


def logits_check(smoke: bool, device) -> None:
    from char_model_folder import save_with_char_tokenizer

    from attnlab.llm import methods
    from attnlab.llm.eval.eval_grid import build_calibration
    from attnlab.llm.execution.backend import register_backend
    from attnlab.llm.models.device import place_model
    from attnlab.llm.models.loading import load_causal_lm

    n = 512 if smoke else 1024
    names = ["full", "streaming-llm", "attnlab", "minference", "snapkv", "quest"] if smoke else [*methods.names(), *methods.preset_names()]
    flex_on_cpu = torch.device(device).type == "cpu"   # smoke without CUDA: the device side is the flex backend on the CPU
    print(f"tolerance: ‖Δlogits‖ / ‖logits_cpu‖ ≤ {BF16_TOL} ({'float32 flex backend on the CPU' if flex_on_cpu else 'bfloat16 on ' + str(device)})")
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "text.txt"
        rng = np.random.default_rng(0)
        text.write_text(" ".join("".join(rng.choice(list("abcdefghij"), 4)) for _ in range(3 * n)) + "\n")
        for label, make in (("Llama (tiny, random)", tiny_llama), ("Gemma-3 (tiny, random, sliding layers)", tiny_gemma3)):
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
                        cal, _ = build_calibration(cpu, tok, [tiny_method(x) for x in names if tiny_method(x).calibrated], n, text, 1)
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
                except Exception as err:   # a method that cannot run here says so in one line
                    print(f"  {name:24s} | cannot run: {failed(err, f'logits {label} {name}')}", flush=True)
                    continue
                rel = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
                top1 = float((got.argmax(-1) == ref.argmax(-1)).float().mean())
                print(f"  {name:24s} | {rel:.2e} | {100 * top1:5.1f} % | {'ok' if rel <= BF16_TOL else 'ABOVE TOLERANCE'}", flush=True)


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
        while lo < hi:   # the widest band whose entries fit β · n(n+1)/2
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if entries_of(mid, 4, dynamic, n, blocks=blocks) <= beta * n * (n + 1) / 2 else (lo, mid - 1)
        heads.append(HeadPlan(Support(w=int(lo), columns=np.arange(4)), dynamic=dynamic, blocks=blocks))
    return heads


def attention_alone(lengths, device, smoke: bool) -> None:
    from torch.nn.attention.flex_attention import create_block_mask

    from attnlab.llm.execution.attention import LayerRunner
    from attnlab.llm.execution.flex_backend import FlexBackend
    from attnlab.nn.mechanisms.flex import flex_attention_compiled

    H, H_kv, d = (8, 2, 32) if smoke else (32, 8, 128)
    dtype = torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16
    print(f"attention alone, {H} query / {H_kv} KV heads of {d}, {dtype}, β = {BETA:.0%}, median of 5 after 2 warm-up calls")
    print("| n | SDPA causal | flex band + 64 sinks | its mask built | flex, mask each call | attnlab plan (selection + masks + flex + "
          "gathered parts) | attnlab plan, all in the BlockMask | speed-up band+sinks | speed-up attnlab | all in the BlockMask |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in lengths:
        try:
            g = torch.Generator(device=device).manual_seed(0)
            q = torch.randn(1, H, n, d, device=device, dtype=dtype, generator=g)
            k, v = (torch.randn(1, H_kv, n, d, device=device, dtype=dtype, generator=g) for _ in range(2))
            scale = d ** -0.5
            t_sdpa = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, scale=scale), device)
            w = max(0, int(BETA * (n + 1) / 2) - 64)      # band + 64 sinks ≈ β of the causal entries

            def band_sinks(b, h, i, j):
                return (j <= i) & ((i - j <= w) | (j < 64))

            tile = 64 if smoke else 128
            make = lambda: create_block_mask(band_sinks, None, None, n, n, device=device, BLOCK_SIZE=tile, _compile=True)   # noqa: E731
            bm = make()
            t_band = timed(lambda: flex_attention_compiled(q, k, v, bm, scale=scale, enable_gqa=True), device)
            t_mask = timed(make, device)
            t_both = timed(lambda: flex_attention_compiled(q, k, v, make(), scale=scale, enable_gqa=True), device)
            cells = []
            for gather in (True, False):   # per-input keys gathered beside the band, or all in the BlockMask
                try:
                    backend = FlexBackend(gather=gather, tile=64 if smoke else 128)
                    runner = LayerRunner(beta_heads(H, n, BETA), 0, H_kv, backend=backend)
                    t_plan = timed(lambda: runner.prefill(q, k, v, scale), device)
                    cells.append((f"{1e3 * t_plan:.3f} ms", f"{t_sdpa / t_plan:.2f}×"))
                except Exception as err:   # the plan's failure said; the baselines' row stays
                    cells.append((f"cannot run: {failed(err, f'attention alone, attnlab plan (gather={gather}), n = {n}')}", "–"))
            print(f"| {n:,} | {1e3 * t_sdpa:.3f} ms | {1e3 * t_band:.3f} ms | {1e3 * t_mask:.3f} ms | {1e3 * t_both:.3f} ms | "
                  f"{cells[0][0]} | {cells[1][0]} | {t_sdpa / t_band:.2f}× | {cells[0][1]} | {cells[1][1]} |", flush=True)
            del q, k, v, bm
        except torch.OutOfMemoryError:
            print(f"| {n:,} | out of device memory |")
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
        return LlamaForCausalLM(LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers or 30,
                                            num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=max(n, 8192),
                                            tie_word_embeddings=True)).eval()
    L = layers or 18
    return Gemma3ForCausalLM(Gemma3TextConfig(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=L,
                                              num_attention_heads=4, num_key_value_heads=1, head_dim=256, sliding_window=512,
                                              layer_types=["full_attention" if (l + 1) % 6 == 0 or l == L - 1 else "sliding_attention" for l in range(L)],
                                              max_position_embeddings=max(n, 8192))).eval()


def plan_method(model, n: int, folder: Path):
    """attnlab's plan at β for ``model`` (``beta_heads`` per layer, a sliding layer's heads capped to its window), as a
    plan-file method."""
    from attnlab.llm.methods.attnlab_plan import PlanFile
    from attnlab.llm.plans.plan import Plan, cap_to_window, model_shape

    s = model_shape(model)
    windows = s["windows"] or [None] * s["num_layers"]
    heads = [[cap_to_window(h, windows[l]) for h in beta_heads(s["num_heads"], n, BETA)] for l in range(s["num_layers"])]
    path = folder / f"plan-{n}.json"
    Plan(heads, s["num_kv_heads"], "attnlab", BETA, n, windows=s["windows"]).save(path)
    return PlanFile(path)


def prefill_and_decode(model, m, n: int, ids, device):
    """(prefill seconds, KV bytes held after the prefill, decoding tokens/s over 32 greedy steps) of ``model`` under ``m``."""
    from attnlab.llm.eval.greedy import kv_bytes

    m.prepare(model, n, None)
    with torch.no_grad(), m.applied(model):
        t = timed(lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1), device, reps=3, warmup=1)
        cache = m.new_cache(model)
        out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        cache = getattr(out, "cache", None) or out.past_key_values
        held = kv_bytes(cache)
        y = out.logits[0, -1].argmax().view(1, 1)
        model(input_ids=y, cache=cache, use_cache=True)   # the first step (compilations) untimed
        sync(device)
        t0 = time.perf_counter()
        for _ in range(32):
            y = model(input_ids=y, cache=cache, use_cache=True).logits[0, -1].argmax().view(1, 1)
        sync(device)
        return t, held, 32 / (time.perf_counter() - t0)


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


def profile_prefill(model, m, n: int, ids, label: str) -> None:
    """The kernels of one prefill of ``model`` under ``m`` on the device, the most device time first (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    m.prepare(model, n, None)
    with torch.no_grad(), m.applied(model):
        model(input_ids=ids, use_cache=False, logits_to_keep=1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            model(input_ids=ids, use_cache=False, logits_to_keep=1)
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    launches = sum(e.count for e in events if e.key.startswith("cuda") and "Launch" in e.key)
    print(f"\nprofile of one prefill, {label}: {1e3 * wall:.1f} ms wall under the profiler, {launches} kernel launches", flush=True)
    for key in ("self_device_time_total", "self_cuda_time_total"):
        try:
            print(events.table(sort_by=key, row_limit=14, max_name_column_width=60), flush=True)
            break
        except Exception:   # the key's name differs between torch versions
            continue


def whole_model(n: int, device, smoke: bool, profile: bool = False) -> None:
    from attnlab.llm import methods
    from attnlab.llm.models.device import place_model

    print(f"\nwhole-model prefill (logits of the last position) and decoding (32 steps after one untimed), n = {n:,}, random weights, median of 3")
    print("| shape | method | prefill | speed-up | KV bytes after prefill | decode tokens/s |")
    print("|---|---|---|---|---|---|")
    for shape in ("smollm2-135m", "gemma3-270m"):
        try:
            model = place_model(model_of(shape, n, smoke), device)
            ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(0)).to(device)
        except Exception as err:   # out of memory: said, the table goes on
            print(f"| {shape} | cannot run: {failed(err, f'whole model {shape}')} |", flush=True)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            base = None
            rows = [("full (SDPA)", lambda: methods.get("full"), None), ("streaming-llm", lambda: methods.get("streaming-llm", BETA), None),
                    ("attnlab plan", lambda: plan_method(model, n, Path(tmp)), None)]
            if torch.device(device).type == "cuda":
                from attnlab.llm.execution.flex_backend import FlexBackend

                rows.append(("attnlab plan, all in the BlockMask", lambda: plan_method(model, n, Path(tmp)), FlexBackend(gather=False)))
            for label, make, backend in rows:
                try:
                    with backend_swapped(device, backend):
                        t, held, tps = prefill_and_decode(model, make(), n, ids, device)
                except Exception as err:   # a shape FlexAttention refuses, out of memory: said, the table goes on
                    print(f"| {shape} | {label} | cannot run: {failed(err, f'whole model {shape} {label}')} | | | |", flush=True)
                    continue
                base = base or t
                print(f"| {shape} | {label} | {1e3 * t:.1f} ms | {base / t:.2f}× | {held / 2**20:.1f} MiB | {tps:.1f} |", flush=True)
            if profile and shape == "smollm2-135m" and torch.device(device).type == "cuda":
                for label, make in (("streaming-llm", lambda: methods.get("streaming-llm", BETA)), ("attnlab plan", lambda: plan_method(model, n, Path(tmp)))):
                    try:
                        profile_prefill(model, make(), n, ids, f"{shape}, {label}")
                    except Exception as err:
                        print(f"profile {label}: {failed(err, f'profile {shape} {label}')}", flush=True)
        del model
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default="8192,32768,65536,131072", help="comma list of n for the attention-alone table")
    ap.add_argument("--prefill-n", type=int, default=32768, help="n of the whole-model prefill")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: tests, logits, speed")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes; runs on the CPU too (no speed claim)")
    ap.add_argument("--test-timeout", type=int, default=240, help="seconds for the CUDA tests")
    ap.add_argument("--profile", action="store_true", help="also the kernels of one whole-model prefill (SmolLM2's shape), by device time")
    ap.add_argument("--errors", type=Path, default=None, help="a file the whole traceback of every caught failure is appended to")
    a = ap.parse_args()
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning)   # create_block_mask(_compile=True): the anchor's mask at 128K
    global ERRORS
    ERRORS = a.errors
    try:
        lengths = [int(x) for x in a.lengths.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--lengths {a.lengths}: expected a comma list of integers")
    skip = {x.strip() for x in a.skip.split(",") if x.strip()}
    if skip - {"tests", "logits", "speed"}:
        ap.error(f"--skip {a.skip}: choose among tests, logits, speed")
    if not torch.cuda.is_available() and not a.smoke:
        ap.error("no CUDA device here: run with --smoke (tiny sizes on the CPU, no speed claim)")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU (smoke: no speed claim)"
    if a.smoke:
        lengths, prefill_n = [256, 512], 512
    else:
        prefill_n = a.prefill_n
    print(f"attnlab GPU check on {name}; torch {torch.__version__}" + (f", CUDA {torch.version.cuda}" if device.type == "cuda" else ""))
    t0 = time.time()
    if "tests" not in skip:
        print("\n## (a) CUDA tests")
        cuda_tests(a.test_timeout)
    if "logits" not in skip:
        print("\n## (b) every method's logits on the device against the CPU")
        logits_check(a.smoke, device)
    if "speed" not in skip:
        print(f"\n## (c) speed on {name}")
        attention_alone(lengths, device, a.smoke)
        whole_model(prefill_n, device, a.smoke, a.profile)
    print(f"\ntotal {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    from attnlab.errors import main_guard

    main_guard(main)

"""The decoding cache of each method, on dev text: resident KV per (layer, KV head) and the perplexity of decoding.

The prefill's β bounds what a method computes; what it keeps for decoding is another budget.  For each method this
prefills the first n − s tokens of a window of ``--text`` (dev text: a setting is chosen there), then decodes the
last s tokens one at a time, teacher-forced, through the method's own cache, and reports

    KV_l        keys held per KV head of layer l after the s steps (mean over KV heads), and their mean over layers
                (and over the sliding-window layers and the global ones apart, for a model that has both: Gemma-3)
    bytes       the cache's bytes as allocated (read-back page summaries included, the store of evicted keys apart)
    ppl_decode  exp(−(1/s) Σ_{t=n−s}^{n−1} log p(x_{t+1} | cache)) — the cost of what the cache dropped, which the
                perplexity of a prefill cannot see (a prefill reads the prefill's support, not the decoding cache)

beside full attention's (the model's own cache: a sliding layer keeps its window).  One JSON line per method
(``--json``) or a line of text.  The calibration (one window of the train text) is made into ``--out/calibration-N.npz``
once and reused.

    python benchmarks/kv_budget.py --hf gemma3-270m --n 8192 --steps 128 \\
        --methods attnlab,attnlab:group_vote=1:decode_band=192 --json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlab.errors import UserError  # noqa: E402
from attnlab.script_guard import main_guard  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "shakespeare"


def decode_run(model, method, ids: list[int], steps: int):
    """(per-layer keys held per KV head, bytes, decoding perplexity) of ``method`` (None: full attention, the model's
    own cache) on ``ids``: prefill ids[:n − steps], then ``steps`` teacher-forced decoding steps."""
    import torch

    from attnlab.llm import methods
    from attnlab.llm.execution.kv_cache import PlanLayer, kv_bytes

    method = method or methods.get("full")
    n = len(ids)
    nll = 0.0
    with torch.no_grad(), method.applied(model):
        cache = method.new_cache(model)
        logits = model(input_ids=torch.tensor([ids[: n - steps]]), cache=cache, use_cache=True,
                       logits_to_keep=1).logits
        for t in range(n - steps, n):
            nll -= float(torch.log_softmax(logits[0, -1].float(), -1)[ids[t]])
            if t + 1 < n:
                logits = model(input_ids=torch.tensor([[ids[t]]]), cache=cache, use_cache=True).logits
    per = [layer.tokens() if isinstance(layer, PlanLayer) else float(layer.keys.shape[2]) for layer in cache.layers]
    return per, kv_bytes(cache), math.exp(nll / steps)


def whole(option: str):
    """An argparse type: a canonical integer (ASCII digits), the option named when it is not."""
    from attnlab.option_values import number

    return lambda text: number(text, int, option)


def fraction(option: str):
    """An argparse type: a canonical finite number, the option named when it is not."""
    from attnlab.option_values import number

    return lambda text: number(text, float, option)


def check_arguments(a) -> tuple[list[str], list]:
    """(the method specs, the methods) once every argument is checked, before any model loads: the ranges, the methods
    (each once, canonical), --text and --calibrate UTF-8 text files long enough for one window of --n tokens in any
    tokenizer (``before_model``), --out a folder, --hf a model attnlab can find."""
    from attnlab.llm import methods
    from attnlab.llm.eval.before_model import check_method_inputs
    from attnlab.llm.eval.eval_settings import check_methods, parse_method
    from attnlab.llm.eval.eval_inputs import check_input_file
    from attnlab.llm.methods.method_specs import method_list
    from attnlab.llm.models.loading import check_length, resolve_spec
    from attnlab.option_paths import output_folder
    from attnlab.textfile import read_text_file

    if a.n < 64:
        raise UserError(f"--n: must be at least 64 tokens, got {a.n}")
    if not 1 <= a.steps < a.n:
        raise UserError(f"--steps: must satisfy 1 ≤ --steps < --n ({a.n}), got {a.steps}")
    if not 0 < a.budget <= 1:
        raise UserError(f"--budget: must be a fraction in (0, 1], got {a.budget}")
    specs = check_methods(method_list(a.methods, "--methods"))   # unknown, an empty or repeated item: named
    made = [methods.get(name, a.budget, **opts) for name, opts in map(parse_method, specs)]
    check_method_inputs(specs)                             # a method's own files (a gate file) present
    texts = [("--text", a.text)] + [("--calibrate", a.calibrate)] * any(m.calibrated for m in made)
    for option, path in texts:
        check_input_file(option, path)                     # missing, a folder, a FIFO, empty, binary, not UTF-8
        have = len(read_text_file(path).encode("utf-8"))
        if have < a.n - 1:                                 # a token covers at least one byte
            raise UserError(f"{option} {path}: {have} bytes of text, shorter than the window of {a.n} tokens (--n)")
    output_folder("--out", a.out)                          # a file, a FIFO, an unwritable place: named
    resolve_spec(a.hf)                                     # an unknown model: one line, no download tried
    check_length(a.hf, a.n, "--n")
    return specs, made


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hf", default="gemma3-270m", help="model (attnlab's name, a folder, a .gguf)")
    p.add_argument("--n", type=whole("--n"), default=8192,
                   help="tokens of the window (prefill n − steps, then steps decoded)")
    p.add_argument("--steps", type=whole("--steps"), default=128,
                   help="s: tokens decoded one at a time, teacher-forced")
    p.add_argument("--methods", default="attnlab", help="comma list of methods (full attention is always measured)")
    p.add_argument("--budget", type=fraction("--budget"), default=0.1, help="β")
    p.add_argument("--text", type=Path, default=DATA / "dev.txt.gz", help="text of the window (dev text: to choose by)")
    p.add_argument("--calibrate", type=Path, default=DATA / "train.txt.gz", help="calibration text (never --text)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "kv-budget-dev", help="folder of the calibration")
    p.add_argument("--json", action="store_true", help="one JSON line per method")
    a = p.parse_args()
    specs, made = check_arguments(a)                       # every argument, before the model loads

    from attnlab.llm.calibration.build import calibration_file
    from attnlab.llm.models.loading import load_causal_lm
    from attnlab.llm.models.text_windows import token_windows

    model, tok = load_causal_lm(a.hf)
    kinds = list(getattr(model.config, "layer_types", None) or [])      # per layer: sliding_attention | full_attention
    (window,) = token_windows(tok, a.text, a.n, 1)
    ids = [int(x) for x in window.reshape(-1)]
    cal = None
    if any(m.calibrated for m in made):
        a.out.mkdir(parents=True, exist_ok=True)
        cal = calibration_file(model, tok, made, a.n, a.out / f"calibration-{a.n}.npz", a.calibrate, 1)
    full_per, full_bytes, full_ppl = decode_run(model, None, ids, a.steps)
    full_kv = sum(full_per) / len(full_per)
    for name, m in [("full", None)] + list(zip(specs, made)):
        t0 = time.perf_counter()
        if m is not None:
            m.prepare(model, a.n, cal)
        per, nbytes, ppl = (full_per, full_bytes, full_ppl) if m is None else decode_run(model, m, ids, a.steps)
        kv = sum(per) / len(per)
        split = {}
        if "sliding_attention" in kinds and "full_attention" in kinds:
            for kind, key in (("sliding_attention", "kv_sliding"), ("full_attention", "kv_global")):
                mine = [x for x, t in zip(per, kinds) if t == kind]
                split[key] = round(sum(mine) / len(mine), 1)
        row = {"model": a.hf, "n": a.n, "steps": a.steps, "text": a.text.name, "method": name,
               "kv_tokens": round(kv, 1), **split, "kv_x_smaller": round(full_kv / kv, 2), "kv_bytes": nbytes,
               "bytes_x_smaller": round(full_bytes / nbytes, 2), "ppl_decode": round(ppl, 3),
               "ppl_decode_full": round(full_ppl, 3), "vs_full_pct": round(100 * (ppl / full_ppl - 1), 2),
               "seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps(row) if a.json else
              f"{name}: KV {row['kv_tokens']} keys a (layer, KV head) ({row['kv_x_smaller']}× fewer than full's "
              f"{full_kv:.1f}), {nbytes / 2**20:.1f} MiB ({row['bytes_x_smaller']}× smaller); decoding perplexity "
              f"{row['ppl_decode']} ({row['vs_full_pct']:+.2f} % over full's {row['ppl_decode_full']})", flush=True)


if __name__ == "__main__":
    main_guard(main)

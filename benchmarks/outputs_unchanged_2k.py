"""Outputs unchanged at 2K on SmolLM2-135M: the methods' prefill logits, kept keys and greedy decoding of one checkout
against another's, as tests/test_outputs_unchanged.py does on the tiny models (the same ``outputs``, one thread).

    PYTHONPATH=/path/to/reference/checkout .venv/bin/python benchmarks/outputs_unchanged_2k.py --out ref.safetensors
    .venv/bin/python benchmarks/outputs_unchanged_2k.py --out new.safetensors --against ref.safetensors

The calibration is measured by each checkout (2 windows of 2,048 tokens of the train plays, the retrieval scores on 6
needle prompts of 512 tokens, seed 7, and read-back's page ranking at K = 16, as ``attnlab eval`` makes them); the
prompt is the first 2,048 tokens of the dev plays; β = 0.1.  Prints, per method, whether every tensor is equal.

Run once (2026-12-07, one thread each): the reference baefbff (before the default was composed of parts) against the
working tree of 983b131 — every method equal, all of its tensors (65 a method; 35 for full and quest, whose caches
keep every key):

    full, streaming-llm, snapkv, quest, minference-mass, attnlab-band, attnlab-retrieval, attnlab, attnlab-bound,
    attnlab-other-blocks, attnlab-key-blocks: equal
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from attnlab.errors import UserError  # noqa: E402
from attnlab.script_guard import main_guard  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "shakespeare"
N, BUDGET = 2048, 0.1
METHODS = ("full", "streaming-llm", "snapkv", "quest", "minference-mass", "attnlab-band", "attnlab-retrieval",
           "attnlab", "attnlab-bound", "attnlab-other-blocks", "attnlab-key-blocks")


def measure(model, tokenizer) -> dict[str, torch.Tensor]:
    from attnlab.llm import methods
    from attnlab.llm.calibration.page_ranking import add_page_ranking
    from attnlab.llm.calibration.statistics import calibrate
    from attnlab.llm.heads.head_scan import retrieval_scores
    from attnlab.llm.models.text_windows import token_windows
    from attnlab.llm.plans.plan import model_shape

    sys.path.insert(0, str(ROOT / "tests"))
    from test_outputs_unchanged import outputs

    got = [methods.get(name, BUDGET) for name in METHODS]
    windows = token_windows(tokenizer, DATA / "train.txt.gz", N, 2)
    cands = sorted({c for m in got for c in m.calibration_candidates(model_shape(model), N) or ()})
    cal = calibrate(model, windows, cands or None)
    cal.retrieval = retrieval_scores(model, tokenizer, n=512, count=6, seed=7)
    add_page_ranking(cal, model, tokenizer, DATA / "train.txt.gz", N, 16)
    ids = token_windows(tokenizer, DATA / "dev.txt.gz", N, 1)[0]
    every = {}
    for m in got:
        t0 = time.perf_counter()
        m.prepare(model, N, cal if m.calibrated else None)
        every.update({f"{m.name}/{key}": value for key, value in outputs(model, m, ids).items()})
        print(f"{m.name}: {time.perf_counter() - t0:.1f} s", flush=True)
    return every


def main() -> int:
    from safetensors.torch import load_file, save_file

    import attnlab
    from attnlab.llm.models.loading import load_causal_lm
    from attnlab.option_paths import input_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="safetensors file of this checkout's outputs")
    ap.add_argument("--against", help="a reference file: print whether each method's outputs are equal")
    args = ap.parse_args()
    if args.against:
        input_file("--against", args.against)   # a missing reference refused before the model loads
    if Path(args.out).is_dir():
        raise UserError(f"--out {args.out}: a folder; give the safetensors file to write")
    torch.set_num_threads(1)
    model, tokenizer = load_causal_lm("smollm2-135m")
    every = measure(model, tokenizer)
    save_file(every, args.out, metadata={"code": str(Path(attnlab.__file__).parent)})
    changed = 0
    if args.against:
        ref = load_file(args.against)
        for name in METHODS:
            keys = sorted(k for k in every if k.startswith(name + "/"))
            same = keys == sorted(k for k in ref if k.startswith(name + "/")) and all(
                torch.equal(every[k], ref[k]) for k in keys)
            print(f"{name:<22} {len(keys)} tensors  {'equal' if same else 'CHANGED'}")
            changed += not same
    return 1 if changed else 0   # a method whose outputs changed: the script says so by its exit status


if __name__ == "__main__":
    main_guard(main)

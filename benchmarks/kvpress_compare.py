"""attnlab's SnapKV / StreamingLLM kept positions against a kvpress run (``kvpress_reference.py``'s JSON).

    PYTHONPATH=. .venv/bin/python benchmarks/kvpress_compare.py runs/kvpress/kept-2048.json

Prints, per (method, compression ratio), how many (layer, KV head) keep the same positions and how many
positions differ.
"""

import argparse
import json

import torch

from attnlab.llm import methods
from attnlab.llm.models.loading import load_causal_lm


def attnlab_kept(model, method: str, compression: float, ids: list[int]) -> list[list[list[int]]]:
    """kept[layer][kv_head] = sorted positions attnlab's method keeps after prefilling ``ids``."""
    m = methods.get(method, compression=compression)
    m.prepare(model, len(ids))
    with m.applied(model), torch.no_grad():
        cache = m.new_cache(model)
        model(torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return [[sorted(p for p in layer.positions[0, g].tolist() if p >= 0) for g in range(layer.positions.shape[1])]
            for layer in cache.layers]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kept", help="the JSON of kvpress_reference.py (runs/kvpress/kept-N.json)")
    with open(ap.parse_args(argv).kept, encoding="utf-8") as f:
        ref = json.load(f)
    model = load_causal_lm("smollm2-135m")[0]
    for method, by in ref["kept"].items():
        for ratio, want in by.items():
            got = attnlab_kept(model, method, float(ratio), ref["ids"])
            pairs = [(a, b) for gl, wl in zip(got, want) for a, b in zip(gl, wl)]
            same = sum(a == b for a, b in pairs)
            diff = sum(len(set(a) ^ set(b)) for a, b in pairs) // 2
            print(f"{method} c={ratio} n={len(ref['ids'])}: {same}/{len(pairs)} (layer, KV head) identical; positions differing: {diff} of {sum(len(b) for _, b in pairs)}")


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

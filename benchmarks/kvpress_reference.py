"""NVIDIA kvpress as the reference for attnlab's SnapKV and StreamingLLM: which key positions its presses keep.

kvpress pins an older transformers than attnlab, so it lives in its own environment::

    python benchmarks/kvpress_reference.py --setup          # creates .venv-kvpress (the same as `make reference-env`)
    .venv-kvpress/bin/python benchmarks/kvpress_reference.py --model ~/.cache/attnlab/models/smollm2-135m \\
        --text shared/data/shakespeare/train.txt.gz --tokens 512 --out kept.json

The second command runs inside that environment and imports nothing from attnlab.  For each press
(``SnapKVPress`` with its defaults window 64 / kernel 5, ``StreamingLLMPress`` with 4 sinks) and each
compression ratio it prefills the prompt under the press and finds, for every layer and KV head,
the positions of the keys left in the cache by matching them to the keys of an uncompressed prefill
(the presses compress after a layer's attention, so later layers and their keys are unchanged).
The JSON holds the prompt's token ids and ``kept[press][ratio][layer][kv_head]`` = sorted positions.
``tests/test_llm_kvpress_reference.py`` runs attnlab's methods on the same ids and compares.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
from pathlib import Path

VENV = ".venv-kvpress"
PACKAGES = ["torch==2.13.0", "transformers>=4.56,<5.3", "kvpress==0.5.5", "gguf", "sentencepiece", "accelerate"]
RATIOS = (0.25, 0.5, 0.75)


def setup(root: Path) -> Path:
    """Create ``root/.venv-kvpress`` with kvpress and its pinned transformers; returns its python."""
    venv = root / VENV
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *PACKAGES], check=True)
    return py


def prompt_ids(tokenizer, text: Path, tokens: int) -> list[int]:
    """The first ``tokens`` token ids of a (gzipped) text file."""
    opener = gzip.open if text.suffix == ".gz" else open
    with opener(text, "rt", encoding="utf-8") as f:
        chunk = f.read(tokens * 8)
    ids = tokenizer(chunk)["input_ids"][:tokens]
    if len(ids) < tokens:
        raise SystemExit(f"--text: {text} has fewer than {tokens} tokens")
    return ids


def kept_positions(full_keys, kept_keys) -> list[list[int]]:
    """Per KV head the sorted positions of ``kept_keys`` (1, H_kv, k, d) among ``full_keys`` (1, H_kv, n, d)."""
    import torch

    out = []
    for g in range(full_keys.shape[1]):
        d = torch.cdist(kept_keys[0, g].double(), full_keys[0, g].double(),
                        compute_mode="donot_use_mm_for_euclid_dist")                    # (k, n), exact 0 for a copy
        best = d.min(-1)
        if float(best.values.max()) > 1e-6:
            raise RuntimeError(f"a kept key matches no key of the full prefill (distance {float(best.values.max()):.3g})")
        out.append(sorted(best.indices.tolist()))
    return out


def run(model_dir: str, text: Path, tokens: int, out: Path, ratios=RATIOS) -> None:
    import torch
    from kvpress import SnapKVPress, StreamingLLMPress
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

    import kvpress
    import transformers

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = prompt_ids(tok, text, tokens)
    x = torch.tensor([ids])
    with torch.no_grad():
        full = DynamicCache()
        model(x, past_key_values=full, use_cache=True)
        result = {"model": model_dir, "tokens": tokens, "ids": ids, "kvpress": kvpress.__version__ if hasattr(kvpress, "__version__") else "0.5.5",
                  "transformers": transformers.__version__, "kept": {}}
        for name, make in (("snapkv", lambda c: SnapKVPress(compression_ratio=c)),
                           ("streaming-llm", lambda c: StreamingLLMPress(compression_ratio=c))):
            result["kept"][name] = {}
            for c in ratios:
                cache = DynamicCache()
                with make(c)(model):
                    model(x, past_key_values=cache, use_cache=True)
                result["kept"][name][str(c)] = [kept_positions(full.layers[l].keys, cache.layers[l].keys)
                                                for l in range(len(cache.layers))]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out)
    print(f"kvpress {result['kvpress']}: kept positions of {len(ratios)} ratios × 2 presses at n = {tokens} → {out}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--setup", action="store_true", help=f"create {VENV} (kvpress and its transformers) and exit")
    ap.add_argument("--model", help="a HF model folder (attnlab's converted SmolLM2: ~/.cache/attnlab/models/smollm2-135m)")
    ap.add_argument("--text", type=Path, default=Path("../shared/data/shakespeare/train.txt.gz"))
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--out", type=Path, default=Path("runs/kvpress/kept.json"))
    ap.add_argument("--ratios", type=float, nargs="+", default=list(RATIOS), help="compression ratios (fractions evicted)")
    a = ap.parse_args(argv)
    if a.setup:
        print(setup(Path(__file__).resolve().parent.parent))
        return
    if not a.model:
        ap.error("--model is required (or --setup)")
    run(a.model, a.text, a.tokens, a.out, tuple(a.ratios))


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

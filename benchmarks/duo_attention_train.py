"""Train DuoAttention's gates for a model on multi-passkey prompts in Shakespeare (``attnlab.llm.duo_training``).

    python benchmarks/duo_attention_train.py --hf smollm2-135m --steps 20 --tokens 1024 \\
        --text ../shared/data/shakespeare/train.txt.gz --out runs/duo/smollm2-135m.safetensors

then ``methods.get("duo-attention", budget=β, gates="runs/duo/smollm2-135m.safetensors")``.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

from attnlab.errors import UserError


def main(argv=None) -> int:
    from attnlab.llm.duo_training import GateTraining, save_gates, train_gates
    from attnlab.llm.loading import load_causal_lm

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf", default="smollm2-135m")
    ap.add_argument("--text", type=Path, default=Path("../shared/data/shakespeare/train.txt.gz"))
    ap.add_argument("--out", type=Path, required=True)
    d = GateTraining()
    for k, v in d.__dict__.items():
        ap.add_argument(f"--{k.replace('_', '-')}", type=type(v), default=v)
    a = ap.parse_args(argv)
    cfg = GateTraining(**{k: getattr(a, k) for k in d.__dict__})
    try:
        opener = gzip.open if a.text.suffix == ".gz" else open
        with opener(a.text, "rt", encoding="utf-8") as f:
            text = f.read(400_000)
        model, tok = load_causal_lm(a.hf)
        t0 = time.time()
        gates = train_gates(model, tok, text, cfg, log=lambda s: print(s, flush=True))
    except (UserError, OSError) as e:
        print(f"duo_attention_train: error: {e}", file=sys.stderr)
        return 2
    save_gates(a.out, gates, a.hf, cfg)
    order = gates.flatten().argsort(descending=True)[:10].tolist()
    top = ", ".join(f"L{o // gates.shape[1]}.{o % gates.shape[1]}={gates.flatten()[o]:.2f}" for o in order)
    print(f"{cfg.steps} steps in {time.time() - t0:.0f} s → {a.out}; gates mean {gates.mean():.3f}, "
          f"> 0.5: {int((gates > 0.5).sum())}/{gates.numel()}; top: {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

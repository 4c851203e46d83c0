"""Train DuoAttention's gates for a model on multi-passkey prompts in Shakespeare (``attnlab.llm.plans.duo_training``).

    python benchmarks/duo_attention_train.py --hf smollm2-135m --steps 20 --tokens 1024 \\
        --text ../shared/data/shakespeare/train.txt.gz --out runs/duo/smollm2-135m.safetensors

then ``methods.get("duo-attention", budget=β, gates="runs/duo/smollm2-135m.safetensors")`` (``--method
duo-attention:gates=FILE``).  The files attnlab ships (attnlab/gates/MODEL.safetensors, read when ``gates`` is not
given) are made by benchmarks/recipes/duo-gates.sh with this script; docs/records/duo-gates/README.md has the rate.

``--minutes M`` stops after the step that reaches M minutes of training (then saves, ``steps`` in the
file's metadata = the steps done); every ``--checkpoint`` steps the gates are saved to ``--out`` and
added to ``<out>.history.safetensors`` (tensors ``step_0010``, … of shape (layers, KV heads)), so a
stopped run leaves its last checkpoint and the ranking of heads can be followed over training.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import sys
import time
from pathlib import Path

from attnlab.errors import UserError


def main(argv=None) -> int:
    from attnlab.llm.models.loading import load_causal_lm
    from attnlab.llm.plans.duo_training import GateTraining, save_gates, train_gates

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf", default="smollm2-135m")
    ap.add_argument("--text", type=Path, default=Path("../shared/data/shakespeare/train.txt.gz"))
    ap.add_argument("--out", type=Path, required=True)
    d = GateTraining()
    for k, v in d.__dict__.items():
        ap.add_argument(f"--{k.replace('_', '-')}", type=type(v), default=v)
    ap.add_argument("--minutes", type=float, default=0.0, help="stop after this many minutes of training (0: no limit)")
    ap.add_argument("--checkpoint", type=int, default=10,
                    help="save the gates every this many steps (0: only at the end)")
    a = ap.parse_args(argv)
    if a.minutes < 0 or a.checkpoint < 0 or a.steps < 1:
        ap.error("--minutes and --checkpoint must be >= 0, --steps >= 1")
    cfg = GateTraining(**{k: getattr(a, k) for k in d.__dict__})
    history: dict = {}
    done = [0]
    history_path = a.out.with_name(a.out.name.removesuffix(".safetensors") + ".history.safetensors")

    def checkpoint(step, gates, final=False):
        done[0] = step
        if final or (a.checkpoint and step % a.checkpoint == 0):
            from safetensors.torch import save_file

            history[f"step_{step:04d}"] = gates.float().clone()
            save_gates(a.out, gates, a.hf, dataclasses.replace(cfg, steps=step))
            tmp = history_path.with_name(history_path.name + ".tmp")
            save_file(history, str(tmp), metadata={"model": a.hf})
            tmp.replace(history_path)
    try:
        opener = gzip.open if a.text.suffix == ".gz" else open
        with opener(a.text, "rt", encoding="utf-8") as f:
            text = f.read(400_000)
        model, tok = load_causal_lm(a.hf)
        t0 = time.time()
        until = time.monotonic() + 60 * a.minutes if a.minutes else None
        gates = train_gates(model, tok, text, cfg, log=lambda s: print(f"{s}  ({time.time() - t0:.0f} s)", flush=True),
                            until=until, on_step=checkpoint)
    except (UserError, OSError) as e:
        print(f"duo_attention_train: error: {e}", file=sys.stderr)
        return 2
    checkpoint(done[0], gates, final=True)
    order = gates.flatten().argsort(descending=True)[:10].tolist()
    top = ", ".join(f"L{o // gates.shape[1]}.{o % gates.shape[1]}={gates.flatten()[o]:.2f}" for o in order)
    print(f"{done[0]} steps in {time.time() - t0:.0f} s → {a.out}; gates mean {gates.mean():.3f}, "
          f"> 0.5: {int((gates > 0.5).sum())}/{gates.numel()}; top: {top}")
    return 0


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

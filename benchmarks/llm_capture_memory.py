"""Peak memory and time of attention capture on a real LLM: eager (n×n per layer) vs attnlab's streamed statistics.

    python benchmarks/llm_capture_memory.py --model smollm2-135m --eager 1024,2048,4096 --streamed 2048,4096,8192

Each measurement runs in a fresh Python process (``ru_maxrss`` is that
process's peak resident memory, model loading included) on the first n tokens
of ``../shared/data/shakespeare/test.txt.gz``:

* eager: ``attnlab.llm.heads.hf_capture.capture_hf`` (``output_attentions=True``, every
  layer's weights returned and copied into an ``AttentionMaps``) — what attnlab
  did before this issue;
* streamed: ``attnlab.llm.heads.long_capture.capture_long`` (every head's statistics,
  nothing n×n).

Before an eager run its peak is estimated (``attnlab.llm.models.memory.estimate_eager``,
×2 for the copy into AttentionMaps); a run whose estimate exceeds the memory
available is not started and the row says so (the estimate is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT / ".." / "shared" / "data" / "shakespeare" / "test.txt.gz"

CHILD = r"""
import json, resource, sys, time, torch
from attnlab.llm.models.text_windows import read_text
mode, spec, n, text_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
text = read_text(text_path)
t0, c0 = time.perf_counter(), time.process_time()
if mode == "eager":
    from attnlab.llm.heads.hf_capture import capture_hf, load_hf
    from attnlab.llm.models.loading import fetch_model, resolve_spec
    kind, path, _ = resolve_spec(spec)
    hf = load_hf(str(fetch_model(path)) if kind == "known" else path)
    ids = hf.tokenizer(text)["input_ids"][:n]
    sentence = hf.tokenizer.decode(ids, skip_special_tokens=True)
    hf.max_len = None
    t1, c1 = time.perf_counter(), time.process_time()
    maps = capture_hf(hf, [sentence], truncate=False)
    n_got = len(maps[0].tokens["tgt"])
else:
    from attnlab.llm.models.loading import load_causal_lm
    from attnlab.llm.heads.long_capture import capture_long
    model, tok = load_causal_lm(spec)
    t1, c1 = time.perf_counter(), time.process_time()
    res = capture_long(model, text, tokenizer=tok, max_tokens=n, memory_limit=None)
    n_got = res.n
print(json.dumps({"mode": mode, "n": n_got, "seconds": time.perf_counter() - t1, "cpu_seconds": time.process_time() - c1,
                  "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "threads": torch.get_num_threads()}))
"""


def _ints(text: str) -> list[int]:
    """A comma list of token counts: canonical integers, no empty or repeated item (``option_values.numbers``)."""
    from attnlab.option_values import numbers

    return numbers(text, int, "token counts")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--eager", default="1024,2048,4096", help="token counts for the eager capture")
    ap.add_argument("--streamed", default="2048,4096,8192", help="token counts for the streamed capture")
    ap.add_argument("--text", default=str(TEXT))
    args = ap.parse_args()

    from attnlab.llm.models.loading import load_causal_lm
    from attnlab.llm.models.memory import available_bytes, estimate_eager, estimate_streamed, gib
    from attnlab.llm.heads.long_capture import default_block_rows

    model, _ = load_causal_lm(args.model)
    H = model.config.num_attention_heads
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows = []
    for mode, ns in (("eager", _ints(args.eager)), ("streamed", _ints(args.streamed))):
        for n in ns:
            est = estimate_eager(model, n) if mode == "eager" else estimate_streamed(model, n, default_block_rows(H, n))
            need = est.total + (est.attention if mode == "eager" else 0)  # eager: weights copied into AttentionMaps
            avail = available_bytes()
            if avail is not None and need > avail:
                rows.append({"mode": mode, "n": n, "estimate": gib(need), "peak": f"not run: needs ~{gib(need)}, {gib(avail)} available"})
                print(json.dumps(rows[-1]), flush=True)
                continue
            out = subprocess.run([sys.executable, "-c", CHILD, mode, args.model, str(n), args.text], capture_output=True, text=True, env=env)
            if out.returncode != 0:
                last = (out.stderr.strip().splitlines() or ["?"])[-1]
                rows.append({"mode": mode, "n": n, "estimate": gib(need), "peak": f"failed: {last[:160]}"})
            else:
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append({"mode": mode, "n": r["n"], "estimate": gib(need), "peak": gib(r["peak_bytes"]),
                             "seconds": round(r["seconds"], 1), "cpu_seconds": round(r["cpu_seconds"], 1), "threads": r["threads"]})
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.model}: attention capture, peak resident memory of the process (model loading included)")
    print(f"{'mode':>9} {'tokens':>7} {'estimate':>10} {'peak':>12} {'wall s':>8} {'cpu s':>8}")
    for r in rows:
        print(f"{r['mode']:>9} {r['n']:>7} {r['estimate']:>10} {r['peak']:>12} {r.get('seconds', ''):>8} {r.get('cpu_seconds', ''):>8}")


if __name__ == "__main__":
    from attnlab.script_guard import main_guard

    main_guard(main)

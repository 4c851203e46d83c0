"""benchmarks/kv_budget.py: the decoding cache a method keeps and the perplexity of decoding through it."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_full_attention_decodes_the_perplexity_of_one_forward_and_a_window_cache_keeps_its_window():
    """Teacher-forced decoding through full attention's cache scores the last s tokens as one forward pass over the
    window does; StreamingLLM's cache holds its sinks and window, and its decoding perplexity is its own."""
    from tiny_llama import tiny_model

    import kv_budget
    from attnlab.llm import methods

    model = tiny_model()
    n, s = 80, 12
    ids = torch.randint(0, 100, (n,), generator=torch.Generator().manual_seed(2)).tolist()
    per, nbytes, ppl = kv_budget.decode_run(model, None, ids, s)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    want = math.exp(-sum(float(lp[t - 1, ids[t]]) for t in range(n - s, n)) / s)
    assert abs(ppl - want) < 1e-3 * want and per == [n - 1.0] * len(per) and nbytes > 0
    m = methods.get("streaming-llm", 0.1, compression="0.8")
    m.prepare(model, n)
    per_m, bytes_m, ppl_m = kv_budget.decode_run(model, m, ids, s)
    assert max(per_m) < n - 1 and bytes_m < nbytes and ppl_m > 0 and ppl_m != ppl


def test_bad_input_is_one_line_exit_2_before_the_model_loads(tmp_path):
    script = ROOT / "benchmarks" / "kv_budget.py"
    for args, words in ((["--steps", "0"], "--steps"), (["--n", "64", "--steps", "64"], "--steps < --n"),
                        (["--text", str(tmp_path / "none.txt")], "none.txt: no such file"),
                        (["--methods", "attnlab:no_such=1"], "no_such")):
        r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode == 2 and len(lines) == 1 and words in lines[0] and "Traceback" not in r.stderr, (args, r.stderr)

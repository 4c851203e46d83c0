"""benchmarks/gpu_records.py: the tables a GPU run printed, read back as JSON lines, each figure as printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_records  # noqa: E402

LOG = """attnlab GPU check on NVIDIA H200; torch 2.11.0+cu130, CUDA 13.0
| n | SDPA causal | flex band + 64 sinks | its mask built | flex, mask each call | attnlab plan (selection + masks + flex + gathered parts) | attnlab plan, all in the BlockMask | speed-up band+sinks | speed-up attnlab | all in the BlockMask |
|---|---|---|---|---|---|---|---|---|---|
| 32,768 | 13.970 ms | 2.886 ms | 3.601 ms | 7.428 ms | 19.737 ms | 29.289 ms | 4.84× | 0.71× | 0.48× |
| 131,072 | out of device memory |
| shape | method | prefill | speed-up | KV bytes after prefill | decode tokens/s |
| smollm2-135m | attnlab plan | 244.2 ms | 0.51× | 42.3 MiB | 18.9 |
| gemma3-270m | attnlab plan | cannot run: OutOfMemoryError: x | | | |

Llama (tiny, random), n = 1024:  method | rel. error | top-1 agreement | verdict
  attnlab-band             | 1.33e-02 |  97.2 % | ok
  duo-attention            | cannot run: UserError: --option gates: duo-attention needs a gate file (train one: python x.py)
  full                     | 4.93e-03 |  98.6 % | ok
  quest                    | 3.50e-02 |  90.0 % | ABOVE TOLERANCE
2 failed, 6 passed, 5 skipped, 47 deselected in 30.28s
contiguous sinks flex 4.33 flex+lse 4.103
contiguous sinks gathered (column part + merge) 1.559
"""


def test_every_table_row_is_read_back_as_printed():
    got = gpu_records.records(LOG, "NVIDIA H200")
    (att,) = got["gpu-attention.jsonl"]                              # the out-of-memory row is no table row
    assert att["n"] == 32768 and att["SDPA causal ms"] == 13.97 and att["attnlab plan ms"] == 19.737 and att["× SDPA attnlab"] == 0.71
    model = got["gpu-model.jsonl"]
    assert model[0] == {"gpu": "NVIDIA H200", "shape": "smollm2-135m", "method": "attnlab plan", "prefill ms": 244.2, "× SDPA": 0.51,
                        "KV MiB after prefill": 42.3, "decode tokens/s": 18.9}
    assert model[1]["prefill ms"].startswith("cannot run")
    (logits,) = got["gpu-logits.jsonl"]
    assert logits["methods within tolerance"] == 2 and logits["largest rel. error"] == 3.5e-2 and logits["smallest top-1 agreement %"] == 90.0
    assert logits["cannot run"] == "duo-attention: UserError: --option gates: duo-attention needs a gate file"
    assert got["gpu-tests.jsonl"] == [{"gpu": "NVIDIA H200", "CUDA tests": "2 failed, 6 passed, 5 skipped, 47 deselected"}]
    assert [r["ms"] for r in got["gpu-columns.jsonl"]] == [4.33, 1.559]


def test_the_script_writes_one_file_per_table_and_refuses_a_log_without_one(tmp_path):
    log, empty = tmp_path / "speed.log", tmp_path / "other.log"
    log.write_text(LOG, encoding="utf-8")
    empty.write_text("nothing measured here\n", encoding="utf-8")
    run = [sys.executable, str(ROOT / "benchmarks" / "gpu_records.py"), "--gpu", "NVIDIA H200", "--out"]
    r = subprocess.run([*run, str(tmp_path / "out"), str(log)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in (tmp_path / "out" / "gpu-attention.jsonl").read_text().splitlines()]
    assert rows[0]["log"] == "speed.log" and rows[0]["gpu"] == "NVIDIA H200"
    r = subprocess.run([*run, str(tmp_path / "out2"), str(empty)], capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "other.log" in r.stderr
    assert not (tmp_path / "out2").exists()

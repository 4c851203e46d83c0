"""The optimiser of a run: AdamW, or Muon for the hidden matrices and AdamW for the rest.

AdamW (Loshchilov & Hutter 2019), decoupled weight decay λ on matrices only:

    m ← β₁m + (1−β₁)g,  v ← β₂v + (1−β₂)g²,  θ ← θ − η(m̂ / (√v̂ + ε) + λθ)

Muon (Jordan et al. 2024, ``torch.optim.Muon``) for a hidden weight matrix
W ∈ R^{A×B}: Nesterov momentum, then the update is replaced by the nearest
semi-orthogonal matrix (5 Newton–Schulz iterations approximate U Vᵀ of the
momentum's SVD U Σ Vᵀ), scaled by √max(1, A/B) ("original" adjustment):

    B ← μB + g,   O = NS₅(g + μB) ≈ U Vᵀ,   W ← W − η_μ λ W − η_μ √max(1, A/B) O

Muon takes the weights of the ``nn.Linear`` layers (Q, K, V, W_O, the FFN, …),
never the embedding tables nor the output head (tied or not): those, the
biases and the LayerNorm gains keep AdamW at ``lr`` — Keller Jordan's recipe.

``MuonAdamW`` joins the two so the loop and the checkpoints see one
optimiser: its ``param_groups`` are Muon's then AdamW's, ``peak_lrs`` their
peak rates (each scaled by the schedule), and its ``state_dict`` numbers the
parameters Muon's first, so a checkpoint (safetensors, ``attnlab.train.checkpoint``)
restores both exactly.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlab.config import TrainConfig
from attnlab.errors import UserError

OPTIMIZERS = ("adamw", "muon")


def hidden_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The weights of the model's ``nn.Linear`` layers except the output head ``out`` and any weight tied to another
    module."""
    seen: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):  # a tied weight is met once per module that holds it
        seen[id(p)] = seen.get(id(p), 0) + 1
    out = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and name.split(".")[-1] != "out" and seen[id(module.weight)] == 1:
            out.append(module.weight)
    return out


def _adamw_groups(params: list[nn.Parameter], weight_decay: float) -> list[dict]:
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return [g for g in ({"params": decay, "weight_decay": weight_decay},
                        {"params": no_decay, "weight_decay": 0.0}) if g["params"]]


class MuonAdamW:
    """Muon on ``hidden_matrices(model)`` at ``muon_lr``, AdamW on every other parameter at ``lr``;
    one optimiser to the loop."""

    def __init__(self, model: nn.Module, lr: float, muon_lr: float, betas: tuple[float, float], weight_decay: float):
        hidden = hidden_matrices(model)
        ids = {id(p) for p in hidden}
        rest = [p for p in model.parameters() if id(p) not in ids]
        self.muon = torch.optim.Muon(hidden, lr=muon_lr, weight_decay=weight_decay)
        self.adamw = torch.optim.AdamW(_adamw_groups(rest, weight_decay), lr=lr, betas=betas)
        self.peak_lrs = [muon_lr] * len(self.muon.param_groups) + [lr] * len(self.adamw.param_groups)

    @property
    def param_groups(self) -> list[dict]:
        return self.muon.param_groups + self.adamw.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.muon.step()
        self.adamw.step()

    def state_dict(self) -> dict:
        """{"state": {i: …}, "param_groups": […]}: Muon's parameters 0 … k−1, AdamW's k, k+1, … ."""
        a, b = self.muon.state_dict(), self.adamw.state_dict()
        k = sum(len(g["params"]) for g in a["param_groups"])
        state = dict(a["state"]) | {i + k: s for i, s in b["state"].items()}
        groups = [dict(g, optimizer="muon") for g in a["param_groups"]]
        groups += [dict(g, params=[i + k for i in g["params"]], optimizer="adamw") for g in b["param_groups"]]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, sd: dict) -> None:
        groups = sd["param_groups"]
        if [g.get("optimizer") for g in groups] != [g.get("optimizer") for g in self.state_dict()["param_groups"]]:
            raise UserError("checkpoint: its optimiser state is not Muon + AdamW with these parameter groups")
        k = sum(len(g["params"]) for g in groups if g["optimizer"] == "muon")
        strip = lambda g: {key: v for key, v in g.items() if key != "optimizer"}  # noqa: E731
        self.muon.load_state_dict({"state": {i: s for i, s in sd["state"].items() if i < k},
                                   "param_groups": [strip(g) for g in groups if g["optimizer"] == "muon"]})
        self.adamw.load_state_dict({"state": {i - k: s for i, s in sd["state"].items() if i >= k},
                                    "param_groups": [dict(strip(g), params=[i - k for i in g["params"]])
                                                     for g in groups if g["optimizer"] == "adamw"]})


def build_optimizer(model: nn.Module, tc: TrainConfig):
    """AdamW (``tc.optimizer == "adamw"``) or ``MuonAdamW``."""
    if tc.optimizer == "adamw":
        return torch.optim.AdamW(_adamw_groups(list(model.parameters()), tc.weight_decay), lr=tc.lr,
                                 betas=tuple(tc.betas))
    if tc.optimizer == "muon":
        return MuonAdamW(model, tc.lr, tc.muon_lr, tuple(tc.betas), tc.weight_decay)
    raise UserError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {tc.optimizer!r}")


def peak_lrs(optimizer, tc: TrainConfig) -> list[float]:
    """The peak learning rate of each of ``optimizer.param_groups`` (the schedule multiplies them)."""
    return list(getattr(optimizer, "peak_lrs", [tc.lr] * len(optimizer.param_groups)))

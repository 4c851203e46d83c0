"""Head surgery: a trained full-attention model's heads replaced by their structured fits.

For head h with budget (w_h, num_pos_h) (chosen per head by
``attnlab.analysis.budget.choose_budget``), the weights used at inference are

    A      = softmax(QKᵀ/√d_k + M)                      the head's full weights
    S_h    = {(i, j) : |i − j| ≤ w_h}  ∪  {(i, j) : j ∈ T_h}
    T_h    = the num_pos_h key columns with the most off-band mass Σ_{i : |i−j| > w_h} a_ij > 0
    Â_ij   = a_ij [(i, j) ∈ S_h] / Σ_{j'} a_ij' [(i, j') ∈ S_h]  (rows renormalised)

i.e. the optimal band + columns fit of ``attnlab.analysis.structured_fit``
(without the sparse residual: s = 0), made row-stochastic again.  A row that
keeps no entry (a target position beyond the end of the source band, with
no column kept) falls back to its full weights, and all of its entries count
as kept.  ``w_h = -1`` leaves head h untouched (no budget reached the
target).  The fraction of attention entries kept, Σ|S_h ∩ allowed| / Σ|allowed|,
is counted over every call, per attention, so that the cost of the structured
model can be reported beside its BLEU.

The surgery computes the full weights first (it measures the *quality* of
the structured approximation of a trained model, not its speed: the speed of
band + columns is the ``structured`` mechanism's business).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn

from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.base import Mechanism
from attnlab.support import FULL, Support, check_num_pos, check_w, top_columns

__all__ = ["StructuredSurgery", "attention_modules", "apply_surgery", "remove_surgery", "surgery", "kept_fraction"]

UNTOUCHED = FULL  # w_h = -1: the head keeps its full weights


class StructuredSurgery(Mechanism):
    """The structured fit (band w_h + num_pos_h key columns, renormalised) of each head of ``inner``."""

    name = "surgery"

    def __init__(self, inner: Mechanism, w: Sequence[int], num_pos: Sequence[int]):
        super().__init__()
        if len(w) != len(num_pos):
            raise ValueError(f"w, num_pos: one value per head each, got {len(w)} and {len(num_pos)}")
        w = [int(x) if int(x) == UNTOUCHED else check_w(int(x)) for x in w]  # −1: an untouched head
        num_pos = [check_num_pos(int(x)) for x in num_pos]
        self.inner = inner
        self.register_buffer("w", torch.tensor([int(x) for x in w], dtype=torch.long), persistent=False)
        self.register_buffer("num_pos", torch.tensor([int(x) for x in num_pos], dtype=torch.long), persistent=False)
        self.kept = 0.0   # Σ kept entries over the calls
        self.total = 0.0  # Σ allowed entries over the calls

    def support(self, a: Tensor, mask: Mask) -> Tensor:
        """S_h ∩ allowed: (B, H, n, m) bool."""
        # a: (B, H, n, m) full weights
        B, H, n, m = a.shape
        if self.w.numel() != H:
            raise ValueError(f"w: {self.w.numel()} heads in the surgery, the attention has {H}")
        # the fit's support of each head (attnlab.support): band B_{w_h}, then the num_pos_h columns with the
        # most off-band mass (zero-mass columns store nothing and are not kept, as in structured_fit)
        band = Support(w=self.w).band(n, m)[None]  # (1, H, n, m); w_h = FULL (−1) keeps the whole row
        cols = top_columns((a * ~band).sum(-2), self.num_pos)  # (B, H, max num_pos), −1: no column
        keep = Support(w=self.w[None], columns=cols).dense(n, m)  # (B, H, n, m)
        allowed = mask.allowed(n, m, a.device)
        return keep if allowed is None else keep & allowed

    def weights(self, q: Tensor, k: Tensor, mask: Mask) -> Tensor:
        # q: (B, H, n, d_k), k: (B, H, m, d_k) → Â: (B, H, n, m)
        a = self.inner.weights(q, k, mask)  # (B, H, n, m)
        keep = self.support(a, mask)
        x = a * keep
        row = x.sum(-1, keepdim=True)  # (B, H, n, 1)
        empty = row <= 0
        untouched = (self.w == UNTOUCHED)[None, :, None, None]  # (1, H, 1, 1): full weights, exactly
        a_hat = torch.where(empty | untouched, a, x / torch.where(empty, torch.ones_like(row), row))
        allowed = mask.allowed(q.shape[-2], k.shape[-2], q.device)
        allowed = torch.ones_like(keep) if allowed is None else allowed.expand_as(keep)
        self.kept += float(torch.where(empty, allowed, keep).sum())
        self.total += float(allowed.sum())
        return a_hat

    def extra_repr(self) -> str:
        return f"w={self.w.tolist()}, num_pos={self.num_pos.tolist()}"


def attention_modules(model: nn.Module) -> dict[tuple[str, int], nn.Module]:
    """(kind, layer) → the MultiHeadAttention module of a Seq2SeqTransformer (kinds encoder/decoder/cross)."""
    out: dict[tuple[str, int], nn.Module] = {}
    for l, block in enumerate(getattr(model, "encoder", [])):
        out[("encoder", l)] = block.self_attn
    for l, block in enumerate(getattr(model, "decoder", [])):
        out[("decoder", l)] = block.self_attn
        if getattr(block, "cross_attn", None) is not None:
            out[("cross", l)] = block.cross_attn
    if not out:
        raise ValueError(f"model: {type(model).__name__} has no encoder/decoder attention modules to operate on")
    return out


def apply_surgery(
    model: nn.Module, choices: Mapping[tuple[str, int], tuple[Sequence[int], Sequence[int]]],
) -> dict[tuple[str, int], StructuredSurgery]:
    """Swap ``module.mechanism`` for a ``StructuredSurgery`` at each (kind, layer) of ``choices``.

    ``choices[(kind, layer)] = (w per head, num_pos per head)``.  Returns the new mechanisms.
    """
    modules = attention_modules(model)
    unknown = sorted(set(choices) - set(modules))
    if unknown:
        raise ValueError(f"choices: no attention {unknown[0]} in this model (it has {sorted(modules)})")
    out = {}
    for key, (w, num_pos) in choices.items():
        module = modules[key]
        inner = module.mechanism.inner if isinstance(module.mechanism, StructuredSurgery) else module.mechanism
        module.mechanism = out[key] = StructuredSurgery(inner, w, num_pos).to(next(model.parameters()).device)
    return out


def remove_surgery(model: nn.Module) -> None:
    """Put back the original mechanisms."""
    for module in attention_modules(model).values():
        if isinstance(module.mechanism, StructuredSurgery):
            module.mechanism = module.mechanism.inner


@contextmanager
def surgery(model: nn.Module, choices) -> Iterator[dict[tuple[str, int], StructuredSurgery]]:
    """``with surgery(model, choices) as mechs: ...`` — the structured model inside, the original after."""
    mechs = apply_surgery(model, choices)
    try:
        yield mechs
    finally:
        remove_surgery(model)


def kept_fraction(mechs: Mapping[tuple[str, int], StructuredSurgery]) -> dict[str, float]:
    """Fraction of attention entries kept, per kind and ``"all"``, over the calls made so far."""
    by_kind: dict[str, list[float]] = {}
    for (kind, _), m in mechs.items():
        acc = by_kind.setdefault(kind, [0.0, 0.0])
        acc[0] += m.kept
        acc[1] += m.total
    out = {kind: (k / t if t else float("nan")) for kind, (k, t) in by_kind.items()}
    kept, total = sum(v[0] for v in by_kind.values()), sum(v[1] for v in by_kind.values())
    out["all"] = kept / total if total else float("nan")
    return out

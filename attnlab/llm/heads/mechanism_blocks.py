"""The attention of an attnlab language model computed one block of query rows at a time, shown to an observer.

The counterpart of ``attnlab.llm.heads.block_attention`` (Hugging Face models) for
``attnlab.nn.lm.DecoderLM`` runs: within ``streaming_lm(model, observer, r)``
every layer's mechanism is wrapped so that, for each block of rows I = i0:i1,

    s_Ij = score(q_I, k_j)                      (the mechanism's own scorer; + G_Ij for learned columns)
    p_Ij = softmax_j(s_Ij)  over j ∈ S(I) ∧ j ≤ i
    o_I  = p_I · v

where S is the mechanism's support, read from the mechanism itself and never
re-derived here:

* ``full``:                    every key (causal);
* ``band``/``global``/``bigbird``: ``mechanism.pattern(n, m)`` (a ``MaskMod``),
  evaluated on rows i0:i1 only (``MaskMod.rows``);
* ``structured``:              ``attnlab.support.Support(w, offset, columns)`` with the
  mechanism's columns (``key_columns``: fixed, or learned with their gate
  G_ij = log σ(r_j) off the band), drawn through ``Support.mask_mod()``.

These are exactly ``mechanism.weights(q, k, mask)`` row by row (tested); the
observer gets ``observer(layer, i0, j0, p, allowed, entropy)`` as from
``block_attention``, with p of shape (1, H, r, j1 − j0) over the keys the block
may read at all (a band layer reads a window).  Peak memory O(H·r·n) per
block, never n×n.  Mechanisms whose weights are not a softmax over a support
(linear, taylor, linformer) or depend on every score (structured's residual)
are refused in one line.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch
from torch import Tensor, nn

from attnlab.errors import UserError
from attnlab.llm.heads.block_attention import key_range, softmax_rows
from attnlab.nn.mask import Mask
from attnlab.nn.mechanisms.base import Mechanism
from attnlab.nn.mechanisms.full import Full
from attnlab.nn.mechanisms.mask_mods import MaskMod, causal, padding
from attnlab.nn.mechanisms.sparse import SparsePattern, scaled_scores
from attnlab.nn.mechanisms.structured import Structured
from attnlab.support import Support

__all__ = ["BlockRows", "block_scores", "check_streamable", "streaming_lm"]

STREAMABLE = "full, band, global, bigbird and structured (without a residual)"


def check_streamable(mechanism: Mechanism) -> None:
    """``UserError`` (one line) unless the mechanism's weights can be computed on a block of rows."""
    name = getattr(mechanism, "name", type(mechanism).__name__)
    if isinstance(mechanism, Structured) and mechanism.sparse > 0:
        raise UserError(f"attention structured with sparse = {mechanism.sparse}: "
                        "the residual is chosen from every score of a row; "
                        f"--file streams {STREAMABLE}")
    if not isinstance(mechanism, (Full, SparsePattern, Structured)):
        raise UserError(f"attention {name}: its weights are not a softmax over a support of keys; "
                        f"--file streams {STREAMABLE}")


def block_scores(mechanism: Mechanism, q: Tensor, k: Tensor, mask: Mask, i0: int, n: int) -> tuple[Tensor, Tensor]:
    """Scores (with −∞ off the support) and allowed keys of query rows i0:i0+r, as ``mechanism.weights`` defines them.

    q holds rows i0:i0+r only; k every key.  Returns s (B, H, r, m) float32 and allowed (B, 1|H, r, m) bool.
    """
    # q: (B, H, r, d_k), k: (B, H, m, d_k)
    check_streamable(mechanism)
    B, H, r, _ = q.shape
    m = k.shape[-2]
    i1 = i0 + r
    pattern: MaskMod | None = None
    gate_on = None
    if isinstance(mechanism, Full):
        s = mechanism.scoring(q, k)  # (B, H, r, m)
    elif isinstance(mechanism, Structured):
        cols, gate = mechanism.key_columns(k, mask)  # (B|1, H|1, g), (B, H, g) or None
        S = Support(w=mechanism.w, offset=mechanism.offset, columns=cols if gate is not None else cols.view(-1))
        pattern = S.mask_mod()
        s = scaled_scores(q, k)
        if gate is not None:  # G_ij = log σ(r_j) on the column entries off the band
            in_band = Support(w=mechanism.w, offset=mechanism.offset).mask_mod().rows(1, 1, i0, i1, m, q.device)
            is_col = S.column_mask(m)[..., None, :]  # (B, H, 1, m)
            g_dense = torch.zeros(B, H, m, dtype=s.dtype, device=q.device).scatter(-1, cols, gate)[..., None, :]
            gate_on = torch.where(is_col & ~in_band, g_dense, torch.zeros((), dtype=s.dtype, device=q.device))
    elif isinstance(mechanism, SparsePattern):
        pattern = mechanism.pattern(n, m)
        s = scaled_scores(q, k)
    else:
        raise AssertionError("unreachable: check_streamable refused it")
    if gate_on is not None:
        s = s + gate_on
    allowed = None
    if mask.causal:
        allowed = causal().rows(1, 1, i0, i1, m, q.device)  # (1, 1, r, m)
    if mask.key_keep is not None:
        keep = padding(mask.key_keep).rows(B, 1, i0, i1, m, q.device)
        allowed = keep if allowed is None else allowed & keep
    if pattern is not None:
        on = pattern.rows(B, H, i0, i1, m, q.device)
        allowed = on if allowed is None else allowed & on
    if allowed is None:
        allowed = torch.ones(1, 1, r, m, dtype=torch.bool, device=q.device)
    return s.float().masked_fill(~allowed, float("-inf")), allowed


class BlockRows(nn.Module):
    """A mechanism that runs ``inner``'s weights block of rows by block of rows and shows each block to an observer."""

    def __init__(self, inner: Mechanism, layer: int, observer: Callable | None, block_rows: int):
        super().__init__()
        self.inner, self.layer, self.observer, self.block_rows = inner, layer, observer, int(block_rows)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask, need_weights: bool = False) -> tuple[Tensor, None]:
        # q: (B, H, n, d_k), k: (B, H, m, d_k), v: (B, H, m, d_v) → (B, H, n, d_v), None
        B, H, n, _ = q.shape
        out = torch.empty(B, H, n, v.shape[-1], dtype=v.dtype, device=v.device)
        for i0 in range(0, n, self.block_rows):
            i1 = min(n, i0 + self.block_rows)
            s, allowed = block_scores(self.inner, q[:, :, i0:i1], k, mask, i0, n)  # (B, H, r, m)
            j0, j1 = key_range(allowed)
            s, allowed = s[..., j0:j1], allowed[..., j0:j1]
            p, entropy = softmax_rows(s, allowed, self.observer is not None)  # (B, H, r, m')
            del s
            out[:, :, i0:i1] = p.to(v.dtype) @ v[:, :, j0:j1]
            if self.observer is not None:
                self.observer(self.layer, i0, j0, p, allowed, entropy)
            del p
        return out, None


@contextlib.contextmanager
def streaming_lm(model, observer: Callable | None, block_rows: int = 256):
    """Within the block, every self-attention of ``model`` (a ``DecoderLM``) runs ``BlockRows``
    (rows of ``block_rows``)."""
    if block_rows < 1:
        raise ValueError(f"block_rows: expected an integer >= 1, got {block_rows!r}")
    attns = [block.self_attn for block in model.blocks]
    for a in attns:
        check_streamable(a.mechanism)
    before = [a.mechanism for a in attns]
    try:
        for layer, a in enumerate(attns):
            a.mechanism = BlockRows(before[layer], layer, observer, block_rows)
        yield model
    finally:
        for a, mech in zip(attns, before):
            a.mechanism = mech

"""Attention of a Hugging Face model computed one block of query rows at a time, its rows shown to an observer.

For each block of rows I = i0:i1 of each layer and head (GQA: query head h
reads key head h // (H / H_kv)):

    s_Ij = (q_I · k_j) · scaling                 (softcap: s ← c · tanh(s / c))
    p_Ij = softmax_j(s_Ij + mask_Ij)            mask: the model's own (LazyMask), −∞ where not allowed
    o_I  = p_I · v

q and k are the tensors the model hands to its attention function, so they
are taken after rotary embeddings (and Gemma-3's q/k norms); the mask is the
model's own predicate (causal, sliding window, padding).  Only keys the
block's mask allows anywhere are read (a sliding layer reads a window, not
the whole row).  The block of probabilities ``p`` — ``(B, H, i1 − i0, j1 − j0)``
— is the only n-wide object and lives for one block: peak memory O(H·r·n),
never O(n²).

``streaming(model, observer, block_rows)`` switches the model's attention to
this function (registered with transformers' ``AttentionInterface`` and
``AttentionMaskInterface`` as ``"attnlab_blocks"``; no model code is forked)
and calls ``observer(layer, i0, j0, p, allowed, entropy)`` for every block
(``entropy``: (B, H, r) row entropies −Σ_j p ln p, from the logits).
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from attnlab.llm.heads.lazy_mask import LazyMask, lazy_mask

__all__ = ["IMPLEMENTATION", "block_attention", "key_range", "register", "softmax_rows", "streaming"]

IMPLEMENTATION = "attnlab_blocks"

# the capture in progress: (observer, block_rows); one at a time (the CLI and the API run one model at a time)
_ACTIVE: dict = {"observer": None, "block_rows": 256}


def key_range(allowed: torch.Tensor) -> tuple[int, int]:
    """First and one-past-last key column any row of the block may read."""
    cols = allowed.any(dim=(0, 1, 2)).nonzero()
    if cols.numel() == 0:
        return 0, 0
    return int(cols[0]), int(cols[-1]) + 1


_key_range = key_range  # the name block_attention calls (tests replace it)


def softmax_rows(s: torch.Tensor, allowed: torch.Tensor,
                 with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """p = softmax_j(s) of masked scores (−∞ where not allowed; ``s`` is overwritten) and, if asked, each row's entropy.

    The softmax written out, to get the entropy from the logits:
        s' = s − max_j s,  p = exp(s') / z,  H = −Σ p ln p = ln z − Σ_j p_j s'_j
    A row with no allowed key gives p = 0 and H = 0.
    """
    # s: (B, H, r, m') float, allowed: (B, 1|H, r, m') → p (B, H, r, m'), entropy (B, H, r) or None
    entropy = None
    if not with_entropy:
        p = torch.softmax(s, dim=-1)  # (B, H, r, m'); a row with no allowed key is NaN
    else:
        s_max = s.amax(-1, keepdim=True)
        s = s.sub_(torch.where(torch.isfinite(s_max), s_max, torch.zeros_like(s_max))).clamp_(min=-1e4)
        p = torch.exp(s)  # not allowed: exp(−1e4) = 0
        z = p.sum(-1, keepdim=True)
        p = p.div_(z)
        entropy = torch.log(z[..., 0]) - torch.einsum("bhrm,bhrm->bhr", p, s)  # (B, H, r)
    if not bool(allowed.any(-1).all()):
        p = torch.nan_to_num(p, nan=0.0)
        entropy = None if entropy is None else torch.nan_to_num(entropy, nan=0.0)
    return p, entropy


def block_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask,
                    dropout: float = 0.0, scaling: float | None = None, softcap: float | None = None, **kwargs):
    """A transformers attention function (same signature as ``eager_attention_forward``); returns ``(o, None)``."""
    # query: (B, H, n, d_k)   key, value: (B, H_kv, m, d_k)
    B, H, n, d_k = query.shape
    H_kv, m = key.shape[1], key.shape[2]
    g = H // H_kv  # query heads per key head
    scaling = d_k ** -0.5 if scaling is None else scaling
    if attention_mask is None:
        from transformers.masking_utils import causal_mask_function

        attention_mask = LazyMask(causal_mask_function, B, n, m, m - n, 0, query.device)
    elif not isinstance(attention_mask, LazyMask):  # a dense mask (bool, or additive float)
        dense = (attention_mask if attention_mask.dtype == torch.bool
                 else attention_mask > torch.finfo(attention_mask.dtype).min / 2)
        attention_mask = _DenseRows(dense)
    observer, r = _ACTIVE["observer"], _ACTIVE["block_rows"]
    layer = getattr(module, "layer_idx", None)
    out = torch.empty(B, n, H, value.shape[-1], dtype=query.dtype, device=query.device)
    for i0 in range(0, n, r):
        i1 = min(n, i0 + r)
        allowed = attention_mask.rows(i0, i1)  # (B, 1, r, m)
        j0, j1 = _key_range(allowed)
        allowed = allowed[..., j0:j1]
        q = query[:, :, i0:i1].reshape(B, H_kv, g, i1 - i0, d_k)  # (B, H_kv, g, r, d_k)
        k = key[:, :, None, j0:j1]  # (B, H_kv, 1, m', d_k)
        s = torch.matmul(q, k.transpose(-1, -2)).reshape(B, H, i1 - i0, j1 - j0) * scaling  # (B, H, r, m')
        if softcap is not None:
            s = torch.tanh(s / softcap) * softcap
        s = s.float().masked_fill(~allowed, float("-inf"))
        p, entropy = softmax_rows(s, allowed, observer is not None)
        del s
        # (B, H_kv, g, r, d_v)
        o = torch.matmul(p.reshape(B, H_kv, g, i1 - i0, j1 - j0).to(value.dtype), value[:, :, None, j0:j1])
        out[:, i0:i1] = o.reshape(B, H, i1 - i0, -1).transpose(1, 2)
        if observer is not None:
            observer(layer, i0, j0, p, allowed, entropy)
        del p, o
    return out, None


class _DenseRows:
    """A materialised mask (someone else built it) read with the LazyMask interface."""

    def __init__(self, dense: torch.Tensor):
        self.dense = dense  # (B, 1, n, m)

    def rows(self, i0: int, i1: int) -> torch.Tensor:
        return self.dense[:, :, i0:i1]


def register() -> None:
    """Register ``block_attention`` and ``lazy_mask`` with transformers under ``IMPLEMENTATION`` (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(IMPLEMENTATION, block_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, lazy_mask)


@contextlib.contextmanager
def streaming(model, observer: Callable | None, block_rows: int = 256):
    """Within the block, ``model`` runs ``block_attention`` (rows of ``block_rows``) and shows them to ``observer``."""
    if block_rows < 1:
        raise ValueError(f"block_rows: expected an integer >= 1, got {block_rows!r}")
    register()
    before = model.config._attn_implementation
    model.set_attn_implementation(IMPLEMENTATION)
    _ACTIVE.update(observer=observer, block_rows=int(block_rows))
    try:
        yield model
    finally:
        _ACTIVE.update(observer=None, block_rows=256)
        model.set_attn_implementation(before)

"""Softmax over the allowed keys only.

    α_ij = exp(s_ij) / Σ_{j' allowed} exp(s_ij')   for allowed (i, j), else 0

Masked scores are set to −∞ before the softmax (Vaswani et al. 2017, §3.2.3).
A row with no allowed key at all (a query that may see nothing) gives zeros,
never NaN: its scores are replaced by 0 before the softmax and its weights
are multiplied by the mask afterwards, so no NaN appears in the forward pass
nor in the gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor


def masked_softmax(s: Tensor, allowed: Tensor | None) -> Tensor:
    """softmax of the scores s over the last axis, restricted to ``allowed``.

    s: (..., n, m) scores; allowed: bool, broadcastable to s, True where the
    query may attend to the key.  Returns weights of the shape of s.
    """
    if allowed is None:
        return torch.softmax(s, dim=-1)
    any_allowed = allowed.any(dim=-1, keepdim=True)  # (..., n, 1)
    s = s.masked_fill(~allowed, float("-inf")).masked_fill(~any_allowed, 0.0)
    return torch.softmax(s, dim=-1) * allowed

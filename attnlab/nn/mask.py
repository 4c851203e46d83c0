"""Which keys a query may see: padding and causality, kept symbolic.

A ``Mask`` is not an n×m tensor: it keeps the key-padding vector and the
causal flag, so that efficient mechanisms (band, linear, …) can apply them
without ever forming the n×m matrix; ``allowed(n, m)`` builds the dense
boolean matrix for the reference path.

    allowed_ij = keep_j ∧ (j ≤ i  if causal)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.masks import causal as is_causal


@dataclass(frozen=True)
class Mask:
    key_keep: Tensor | None = None  # (B, m) bool, True = a real (non-padding) key
    causal: bool = False

    def allowed(self, n: int, m: int, device: torch.device | None = None) -> Tensor | None:
        """Dense boolean mask, broadcastable to (B, H, n, m); None when nothing is masked."""
        out = None
        if self.causal:
            i = torch.arange(n, device=device)[:, None]
            j = torch.arange(m, device=device)[None, :]
            out = is_causal(i, j)[None, None]  # (1, 1, n, m)
        if self.key_keep is not None:
            keep = self.key_keep[:, None, None, :]  # (B, 1, 1, m)
            out = keep if out is None else out & keep
        return out


def padding_keep(x: Tensor, pad_id: int) -> Tensor | None:
    """keep_j = (x_j ≠ pad); None when the batch has no padding (saves work)."""
    # x: (B, n) token ids
    keep = x != pad_id
    return None if bool(keep.all()) else keep

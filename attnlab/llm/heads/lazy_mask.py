"""The model's own attention mask, kept as a predicate and evaluated one block of rows at a time.

transformers builds every mask from an index predicate
``mask_function(b, h, q_idx, kv_idx) -> bool`` (causal ``kv_idx <= q_idx``;
Gemma-3's sliding layers ``and`` the window ``kv_idx > q_idx - sliding_window``;
padding ``and`` the 2-D attention mask) and then materialises it as an
``(B, 1, n, m)`` tensor — n×m booleans per mask type, 2 GiB for two masks at
32K tokens.  attnlab registers a mask function under its attention
implementation's name that returns this ``LazyMask`` instead: the same
predicate, evaluated by ``rows(i0, i1)`` on ``(B, 1, i1 - i0, m)`` only.
"""

from __future__ import annotations

from typing import Callable

import torch

__all__ = ["LazyMask", "lazy_mask"]


class LazyMask:
    """``allowed[b, 0, i, j] = mask_function(b, 0, q_offset + i, kv_offset + j)``, one block of rows at a time."""

    def __init__(self, mask_function: Callable, batch_size: int, q_length: int, kv_length: int,
                 q_offset: int = 0, kv_offset: int = 0, device="cpu"):
        self.mask_function = mask_function
        self.batch_size, self.q_length, self.kv_length = batch_size, q_length, kv_length
        self.q_offset, self.kv_offset, self.device = q_offset, kv_offset, device

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch_size, 1, self.q_length, self.kv_length)

    def rows(self, i0: int, i1: int, j0: int = 0, j1: int | None = None) -> torch.Tensor:
        """Allowed keys of query rows ``i0:i1`` (keys ``j0:j1``): bool ``(B, 1, i1 - i0, j1 - j0)``."""
        j1 = self.kv_length if j1 is None else j1
        b = torch.arange(self.batch_size, device=self.device)[:, None, None, None]
        h = torch.zeros(1, dtype=torch.long, device=self.device)[None, :, None, None]
        q = (torch.arange(i0, i1, device=self.device) + self.q_offset)[None, None, :, None]
        kv = (torch.arange(j0, j1, device=self.device) + self.kv_offset)[None, None, None, :]
        allowed = self.mask_function(b, h, q, kv)
        return torch.as_tensor(allowed, device=self.device).expand(self.batch_size, 1, i1 - i0, j1 - j0)

    def dense(self) -> torch.Tensor:
        """The whole mask (tests and small inputs only): bool ``(B, 1, n, m)``."""
        return self.rows(0, self.q_length)


def lazy_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0,
              mask_function: Callable | None = None, attention_mask: torch.Tensor | None = None,
              device="cpu", **kwargs) -> LazyMask:
    """A transformers mask interface (``AttentionMaskInterface``) that builds nothing n×m."""
    from transformers.masking_utils import and_masks, causal_mask_function, padding_mask_function, prepare_padding_mask

    mask_function = causal_mask_function if mask_function is None else mask_function
    padding = prepare_padding_mask(attention_mask, kv_length, kv_offset) if attention_mask is not None else None
    if padding is not None and not bool(padding.all()):
        mask_function = and_masks(mask_function, padding_mask_function(padding))
    return LazyMask(mask_function, batch_size, q_length, kv_length, q_offset, kv_offset, device)

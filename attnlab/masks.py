"""The mask predicates, defined once: which key j a query i may read.

    causal(i, j)          j ≤ i
    in_window(i, j, W)    i − j < W                      (a sliding-window layer; W = None: every key)
    visible(i, j, W)      j ≤ i  ∧  i − j < W            (a causal LM's own mask, sliding window included)
    hidden(i, j, W)       ¬visible(i, j, W)              (the entries a softmax fills with −∞)
    near(i, j, w)         i − j ≤ w                      (within w of the diagonal, looking back: a causal band)
    in_band(i, j, w, o)   |j − i − o| ≤ w                (the band B_{w,o} of ``attnlab.support``)

``i`` and ``j`` are integer tensors or arrays that broadcast (``i[:, None]``, ``j[None, :]``: an
(n, m) grid); ``w``, ``o`` integers or arrays broadcasting with them.  Only operations numpy and
torch share are used, so the same lines serve both, and FlexAttention's vmap.

``MaskMod`` names such a predicate in FlexAttention's convention ``mask_mod(b, h, q_idx, kv_idx)``
and composes it with ``|`` and ``&`` (the patterns are in ``attnlab.nn.mechanisms.mask_mods``).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

NEG_INF = -1e30  # finite "−∞": exp underflows to 0, and 0·NEG_INF stays finite in gradients (the kernel's masked logit)

__all__ = ["NEG_INF", "MaskMod", "Predicate", "causal", "hidden", "in_band", "in_window", "near", "visible"]


def causal(i, j):
    """j ≤ i: key j is not in query i's future."""
    return j <= i


def in_window(i, j, window: int | None):
    """i − j < W: key j is within the sliding window W of query i (True everywhere when W is None)."""
    return (j == j) if window is None else i - j < window


def visible(i, j, window: int | None = None):
    """j ≤ i ∧ i − j < W: the model's own mask (causal; sliding window W when the layer has one)."""
    return causal(i, j) if window is None else causal(i, j) & in_window(i, j, window)


def hidden(i, j, window: int | None = None):
    """j > i ∨ i − j ≥ W: what the model's own mask hides (``~visible``)."""
    return ~visible(i, j, window)


def near(i, j, w):
    """i − j ≤ w: key j is at most w positions before query i (with ``causal``: the causal band B_w)."""
    return i - j <= w


def in_band(i, j, w, offset=0):
    """|j − i − o| ≤ w: the band of half-width w around the diagonal shifted by o."""
    return abs(j - i - offset) <= w


Predicate = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


class MaskMod:
    """A named predicate ``(b, h, q_idx, kv_idx) -> bool`` with ``|`` and ``&``."""

    def __init__(self, fn: Predicate, name: str):
        self.fn = fn
        self.name = name

    def __call__(self, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return self.fn(b, h, q_idx, kv_idx)

    def __or__(self, other: "MaskMod") -> "MaskMod":
        f, g = self.fn, other.fn
        return MaskMod(lambda b, h, q, kv: f(b, h, q, kv) | g(b, h, q, kv), f"({self.name} | {other.name})")

    def __and__(self, other: "MaskMod") -> "MaskMod":
        f, g = self.fn, other.fn
        return MaskMod(lambda b, h, q, kv: f(b, h, q, kv) & g(b, h, q, kv), f"({self.name} & {other.name})")

    def __repr__(self) -> str:
        return f"MaskMod({self.name})"

    def dense(self, B: int, H: int, n: int, m: int, device: torch.device | str | None = None) -> Tensor:
        """The boolean matrix allowed[b, h, i, j] = mask_mod(b, h, i, j), shape (B, H, n, m)."""
        b = torch.arange(B, device=device)[:, None, None, None]
        h = torch.arange(H, device=device)[None, :, None, None]
        q_idx = torch.arange(n, device=device)[None, None, :, None]
        kv_idx = torch.arange(m, device=device)[None, None, None, :]
        return self.fn(b, h, q_idx, kv_idx).expand(B, H, n, m)

    def rows(self, B: int, H: int, i0: int, i1: int, m: int, device: torch.device | str | None = None) -> Tensor:
        """Rows i0:i1 of ``dense(B, H, n, m)`` without the others: (B, H, i1 − i0, m) (block-wise capture)."""
        b = torch.arange(B, device=device)[:, None, None, None]
        h = torch.arange(H, device=device)[None, :, None, None]
        q_idx = torch.arange(i0, i1, device=device)[None, None, :, None]
        kv_idx = torch.arange(m, device=device)[None, None, None, :]
        return self.fn(b, h, q_idx, kv_idx).expand(B, H, i1 - i0, m)

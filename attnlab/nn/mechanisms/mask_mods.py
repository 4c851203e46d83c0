"""Sparse attention patterns as composable predicates ``mask_mod(b, h, q_idx, kv_idx)``.

The convention of PyTorch FlexAttention: a pattern is a function that says
whether query ``q_idx`` of batch ``b``, head ``h`` may attend to key
``kv_idx``.  Patterns combine with ``|`` (union) and ``&`` (intersection):

    band(w)            |i − j| ≤ w                       (sliding window)
    band(w, dilation=δ) j − i ∈ {−wδ, …, −δ, 0, δ, …, wδ}  (dilated window, Longformer)
    global_(g)         j < g                             (g global key columns)
    global_rows(g)     i < g                             (g global queries see every key)
    random_(R, c)      j ∈ R_{⌊i/c⌋}                     (r random keys per query block, BigBird)
    causal()           j ≤ i

The predicates themselves (causal, window, band) and ``MaskMod`` are ``attnlab.masks``.
The structured support (band with offset ∪ key columns, per head) is
``attnlab.support.Support(...).mask_mod()``: ``band(w)`` is built from it, and
the ``global``, ``bigbird`` and ``structured`` mechanisms draw their band ∪ key
columns as a ``Support`` (``global_(g)`` remains for columns without a band).

    pattern = band(w) | global_(g) | random_(R, c)

The same object builds the dense boolean matrix (``dense(B, H, n, m)``, for
``weights()`` and tests) and FlexAttention's block mask
(``create_block_mask(pattern, B, H, n, m, device=...)``): the predicates are
written with tensor operations only, so they broadcast over index grids and
also run element by element under FlexAttention's vmap.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.masks import MaskMod, Predicate, in_band
from attnlab.masks import causal as is_causal
from attnlab.support import Support, check_num_pos, check_w

__all__ = ["MaskMod", "Predicate", "band", "causal", "global_", "global_rows", "padding", "random_", "random_table"]

def band(w: int, dilation: int = 1) -> MaskMod:
    """|i − j| ≤ w·δ and δ divides j − i (δ = dilation; δ = 1 is the plain band)."""
    w = check_w(w)
    if dilation < 1:
        raise ValueError(f"dilation: must be >= 1, got {dilation}")
    if dilation == 1:
        return MaskMod(Support(w=w).mask_mod().fn, f"band({w})")  # S = B_w
    return MaskMod(
        lambda b, h, q, kv: in_band(q, kv, w * dilation) & ((q - kv).remainder(dilation) == 0),
        f"band({w}, dilation={dilation})",
    )


def global_(g: int) -> MaskMod:
    """j < g: the first g keys are global columns every query sees."""
    g = check_num_pos(g, name="g")
    return MaskMod(lambda b, h, q, kv: kv < g, f"global({g})")  # = Support(columns=range(g)) without the band


def global_rows(g: int) -> MaskMod:
    """i < g: the first g queries (global tokens) see every key (BigBird/Longformer)."""
    if g < 0:
        raise ValueError(f"g: number of global tokens must be >= 0, got {g}")
    return MaskMod(lambda b, h, q, kv: q < g, f"global_rows({g})")


def random_(table: Tensor, block: int) -> MaskMod:
    """j ∈ R_{⌊i/c⌋}: the r random keys of query block ⌊i/c⌋; table: (n_blocks, r) long."""
    # table: (n_blocks, r)
    return MaskMod(lambda b, h, q, kv: (table[q // block] == kv[..., None]).any(-1),
                   f"random({table.shape[-1]}, c={block})")


def random_table(n: int, m: int, r: int, block: int, seed: int) -> Tensor:
    """r key positions in [0, m) for each of the ⌈n/c⌉ query blocks, drawn from ``seed``.

    Deterministic in (n, m, r, c, seed); the same table serves the dense
    weights and the efficient forward.  Draws are with replacement: a key
    drawn twice (or also in the band) is still attended once.
    """
    gen = torch.Generator().manual_seed(int(seed))
    n_blocks = -(-n // block)
    return torch.randint(0, max(m, 1), (n_blocks, r), generator=gen)  # (n_blocks, r)


def causal() -> MaskMod:
    """j ≤ i."""
    return MaskMod(lambda b, h, q, kv: is_causal(q, kv), "causal")


def padding(key_keep: Tensor) -> MaskMod:
    """keep_{b, j}: j is a real (non-padding) key of batch b; key_keep: (B, m) bool."""
    # key_keep: (B, m)
    return MaskMod(lambda b, h, q, kv: key_keep[b, kv], "padding")

"""Batches by length buckets under a token budget; seeded, and shardable over DDP ranks.

A global batch ``b`` is a set of pair indices with
``|b| · max_{r∈b} ℓ_r ≤ max_tokens``, ``ℓ_r = max(|x_r|, |y_r| + 1)`` (padded tokens
per side).  Pairs are sorted by ``ℓ`` (ties broken by a seeded random key, new each
epoch), cut greedily into batches, and the batch order is shuffled with the
generator seeded by ``(seed, epoch)`` — the same batches on every machine and for
every world size.  Under DDP each rank takes its share of each *global* batch
(:func:`shard`), so ``N`` ranks see exactly the pairs of the one-process run.

A batch is ``(src (B, n), tgt_in (B, m), tgt_out (B, m))`` of token ids padded
with ``pad = 0``; ``tgt_in = [bos] + y``, ``tgt_out = y + [eos]``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from attnlab.data.encode import EncodedPairs

PAD, BOS, EOS = 0, 1, 2


def make_batches(encoded: EncodedPairs, max_tokens: int, seed: int = 0, epoch: int = 0,
                 shuffle: bool = True, min_size: int = 1) -> list[np.ndarray]:
    """Global batches (arrays of pair indices) for one epoch; each has ≥ ``min_size`` pairs."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if min_size < 1:
        raise ValueError(f"min_size must be >= 1, got {min_size}")
    # ell: (N,) padded length of each pair
    ell = np.maximum(encoded.src.lengths, encoded.tgt.lengths + 1)
    rng = np.random.default_rng([seed, epoch])
    tie = rng.random(len(ell)) if shuffle else np.arange(len(ell))
    order = np.lexsort((tie, ell))
    ell_sorted = ell[order]
    batches: list[np.ndarray] = []
    start, n = 0, len(order)
    while start < n:
        # largest B with B · ell_sorted[start + B − 1] ≤ max_tokens (ell_sorted is non-decreasing)
        window = ell_sorted[start:start + max_tokens]
        fits = np.arange(1, len(window) + 1) * window <= max_tokens
        size = max(int(np.argmin(fits)) if not fits.all() else len(window), min_size, 1)
        batches.append(order[start:start + size])
        start += size
    if len(batches) > 1 and len(batches[-1]) < min_size:  # too small a tail joins its neighbour
        batches[-2] = np.concatenate([batches[-2], batches.pop()])
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def shard(batch: np.ndarray, rank: int, world_size: int, encoded: EncodedPairs | None = None) -> np.ndarray:
    """The share of ``rank`` in a global batch: every ``world_size``-th pair (by length if given)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    if encoded is not None:  # deal longest first, so the ranks get similar token counts
        ell = np.maximum(encoded.src.lengths[batch], encoded.tgt.lengths[batch] + 1)
        batch = batch[np.argsort(-ell, kind="stable")]
    return batch[rank::world_size]


def collate(encoded: EncodedPairs, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad pairs ``idx`` into ``(src (B, n), tgt_in (B, m), tgt_out (B, m))``, pad = 0."""
    B = len(idx)
    src_len = encoded.src.lengths[idx]
    tgt_len = encoded.tgt.lengths[idx] + 1
    n, m = int(src_len.max(initial=1)), int(tgt_len.max(initial=1))
    src = np.full((B, n), PAD, dtype=np.int64)
    tgt_in = np.full((B, m), PAD, dtype=np.int64)
    tgt_out = np.full((B, m), PAD, dtype=np.int64)
    for b, r in enumerate(idx):  # one row copy per pair
        x, y = encoded[int(r)]
        src[b, :len(x)] = x
        tgt_in[b, 0] = BOS
        tgt_in[b, 1:len(y) + 1] = y
        tgt_out[b, :len(y)] = y
        tgt_out[b, len(y)] = EOS
    return torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out)


def iterate_batches(encoded: EncodedPairs, max_tokens: int, seed: int = 0, epoch: int = 0,
                    rank: int = 0, world_size: int = 1, shuffle: bool = True, skip: int = 0
                    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Yield this rank's ``(src, tgt_in, tgt_out)`` for each global batch of the epoch.

    ``skip`` global batches are passed over (to resume mid-epoch).  With ``world_size > 1``
    every global batch holds ≥ ``world_size`` pairs, so no rank is ever empty.
    """
    for batch in make_batches(encoded, max_tokens, seed, epoch, shuffle, min_size=world_size)[skip:]:
        yield collate(encoded, shard(batch, rank, world_size, encoded))

"""A KV cache that keeps, per KV head, only the keys its query heads can still read: O(w + g) per planned head.

    keep(j) = j ∈ T_h  ∨  j ≥ t − w_h     for some query head h of the KV head (t: the next position)
            = everything                  if one of them is full

After the prefill, and then every ``EVICT_EVERY`` decoding steps, each layer of a planned model
(``attention.apply_plan``) drops the cached keys and values no future query can attend to (in
between, keys that left a window stay cached but masked: at most ``EVICT_EVERY`` extra slots per
KV head, and no compaction copy per token); what stays is stored compacted, ``(B, H_kv, L, d)``
with the absolute position of every slot in ``positions`` ``(B, H_kv, L)`` (−1: an empty slot,
when KV heads keep different numbers of keys).  ``seen`` counts the tokens processed, so the
model's positions (RoPE) continue as with a full cache.

    cache = PlanCache(model)            # after apply_plan(model, plan)
    model.generate(ids, past_key_values=cache, ...)
    cache.nbytes()                       # bytes of keys + values held

Read-back (``Plan.pages`` > 0, ``attnlab.llm.pages``): the slots an eviction drops are appended to the
layer's *store* (``store_keys``/``store_values``/``store_pos``, compacted the same way) instead of being
lost — the off-device copy Quest and InfiniGen keep in host memory; a decoding step joins them after the
resident slots (``joined``) and its planned heads read the pages their bound chooses.  Accounting keeps
the two apart: ``kv_bytes`` is the resident cache plus the page summaries (2·d_k values per page and KV
head), ``store_bytes`` the stored keys and values, ``read_tokens`` the stored tokens fetched per step.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

__all__ = ["EVICT_EVERY", "PlanCache", "PlanLayer", "kv_bytes", "read_tokens", "store_bytes", "store_tokens"]

EVICT_EVERY = 32  # decoding steps between compactions


class PlanLayer(DynamicLayer):
    """One layer's compacted keys and values with their positions."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.positions = None  # (B, H_kv, L) long
        self.flags = None      # (B, H_kv, r, L) bool: slot is a column of query head g·r + ρ (set after the prefill)
        self.seen = 0
        self.evicted_at = None  # ``seen`` at the last compaction
        self.page = None        # read-back: tokens per page (None: evicted keys are dropped)
        self.store_keys = self.store_values = self.store_pos = None   # (B, H_kv, S, ·), (B, H_kv, S): evicted slots
        self.fetched = self.steps = 0   # stored tokens read per (batch row, KV head), summed over decoding steps; steps

    def update(self, key_states, value_states, *args, **kwargs):
        # key_states: (B, H_kv, n, d) → all cached keys (B, H_kv, L + n, d)
        B, H_kv, n, _ = key_states.shape
        new = torch.arange(self.seen, self.seen + n, device=key_states.device).expand(B, H_kv, n)
        self.positions = new.clone() if self.positions is None else torch.cat([self.positions, new], dim=-1)
        self.seen += n
        if self.flags is not None:  # new tokens are no columns (columns are chosen at the prefill)
            self.flags = torch.cat([self.flags, self.flags.new_zeros(*self.flags.shape[:3], n)], dim=-1)
        return super().update(key_states, value_states, *args, **kwargs)

    def due(self) -> bool:
        """Time to compact: right after the prefill, then every ``EVICT_EVERY`` tokens."""
        return self.evicted_at is None or self.seen - self.evicted_at >= EVICT_EVERY

    def evict(self, keep, store: bool = False):
        """Drop the slots with ``keep`` False (B, H_kv, L); KV heads keeping fewer keys are padded with −1 positions.

        ``store``: the dropped slots go to the store (read-back) instead of being lost."""
        self.evicted_at = self.seen
        if bool(keep.all()):
            return
        if store:
            self._store(~keep & (self.positions >= 0))
        order, ok, self.keys, self.values, self.positions = self._gather(keep)
        if self.flags is not None:
            L = order.shape[-1]
            self.flags = torch.gather(self.flags, -1, order[:, :, None, :].expand(*self.flags.shape[:3], L)) & ok[:, :, None, :]

    def _gather(self, take):
        """The slots with ``take`` True (B, H_kv, L), compacted in order: (order, ok, keys, values, positions), each KV head
        padded to the longest with empty slots (ok False, position −1); order (B, H_kv, L') the source slots."""
        L = int(take.sum(-1).max())
        order = torch.sort((~take).to(torch.int8), dim=-1, stable=True).indices[..., :L]  # taken slots first, in order
        ok = torch.gather(take, -1, order)
        pos = torch.where(ok, torch.gather(self.positions, -1, order), torch.full_like(order, -1))
        idx = order[..., None]
        k = torch.gather(self.keys, 2, idx.expand(*idx.shape[:3], self.keys.shape[-1]))
        v = torch.gather(self.values, 2, idx.expand(*idx.shape[:3], self.values.shape[-1]))
        return order, ok, k, v, pos

    def _store(self, drop):
        """Append the slots with ``drop`` True (B, H_kv, L) to the store, compacted (−1: empty)."""
        _, _, k, v, pos = self._gather(drop)
        if self.store_keys is None:
            self.store_keys, self.store_values, self.store_pos = k, v, pos
        else:
            self.store_keys = torch.cat([self.store_keys, k], 2)
            self.store_values = torch.cat([self.store_values, v], 2)
            self.store_pos = torch.cat([self.store_pos, pos], -1)

    def joined(self):
        """Resident ∪ stored slots for a read-back step: keys, values (B, H_kv, L + S, ·), positions (B, H_kv, L + S),
        column flags (B, H_kv, r, L + S) (a stored key is no column), and which slots are stored (B, H_kv, L + S)."""
        L, S = self.keys.shape[2], self.store_keys.shape[2]
        flags = torch.cat([self.flags, self.flags.new_zeros(*self.flags.shape[:3], S)], -1)
        stored = torch.arange(L + S, device=self.keys.device).expand(*self.positions.shape[:2], L + S) >= L
        return (torch.cat([self.keys, self.store_keys], 2), torch.cat([self.values, self.store_values], 2),
                torch.cat([self.positions, self.store_pos], -1), flags, stored)

    def count_read(self, fetched) -> None:
        """One decoding step's stored slots read (B, H_kv, L + S) bool (None: none)."""
        self.steps += 1
        if fetched is not None:
            self.fetched += float(fetched.sum()) / (fetched.shape[0] * fetched.shape[1])

    def get_seq_length(self) -> int:
        return self.seen

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.seen + query_length, 0

    def reset(self) -> None:
        super().reset()
        self.positions, self.flags, self.seen, self.evicted_at = None, None, 0, None
        self.page, self.store_keys, self.store_values, self.store_pos, self.fetched, self.steps = None, None, None, None, 0, 0

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("PlanCache cannot be cropped (evicted keys are gone)")


class PlanCache(Cache):
    """``Cache`` of ``PlanLayer`` s, one per layer of a planned model (``attention.apply_plan``)."""

    def __init__(self, model):
        from attnlab.llm.attention import attach_cache, attention_modules

        n_layers = len(attention_modules(model))
        super().__init__(layers=[PlanLayer() for _ in range(n_layers)])
        attach_cache(model, self)

    def nbytes(self) -> int:
        return kv_bytes(self)


def kv_bytes(cache) -> int:
    """Bytes of the keys and values a transformers cache holds on the device (any Cache with ``layers``), with a
    read-back layer's page summaries: 2·d_k values per page of its ``seen`` positions and (batch row, KV head)."""
    total = 0
    for layer in cache.layers:
        for x in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(x, torch.Tensor):
                total += x.numel() * x.element_size()
        if getattr(layer, "page", None) and isinstance(layer.keys, torch.Tensor):
            B, H_kv, _, d = layer.keys.shape
            total += B * H_kv * -(-layer.seen // layer.page) * 2 * d * layer.keys.element_size()
    return total


def store_bytes(cache) -> int:
    """Bytes of the evicted keys and values kept in the read-back stores (off-device)."""
    return sum(x.numel() * x.element_size() for layer in cache.layers
               for x in (getattr(layer, "store_keys", None), getattr(layer, "store_values", None)) if isinstance(x, torch.Tensor))


def store_tokens(cache) -> float:
    """Mean stored tokens per (layer, KV head) (0 for a layer without a store)."""
    counts = [float((p >= 0).sum()) / (p.shape[0] * p.shape[1]) if isinstance(p := getattr(layer, "store_pos", None), torch.Tensor) else 0.0
              for layer in cache.layers]
    return sum(counts) / len(counts) if counts else 0.0


def read_tokens(cache) -> float:
    """Mean stored tokens fetched per decoding step and (layer, KV head) (0 for a layer without read-back)."""
    counts = [layer.fetched / layer.steps if getattr(layer, "steps", 0) else 0.0 for layer in cache.layers]
    return sum(counts) / len(counts) if counts else 0.0

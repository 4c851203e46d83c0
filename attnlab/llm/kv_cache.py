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
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

__all__ = ["EVICT_EVERY", "PlanCache", "PlanLayer", "kv_bytes"]

EVICT_EVERY = 32  # decoding steps between compactions


class PlanLayer(DynamicLayer):
    """One layer's compacted keys and values with their positions."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.positions = None  # (B, H_kv, L) long
        self.flags = None      # (B, H_kv, r, L) bool: slot is a column of query head g·r + ρ (set after the prefill)
        self.seen = 0
        self.evicted_at = None  # ``seen`` at the last compaction

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

    def evict(self, keep):
        """Drop the slots with ``keep`` False (B, H_kv, L); KV heads keeping fewer keys are padded with −1 positions."""
        self.evicted_at = self.seen
        if bool(keep.all()):
            return
        L = int(keep.sum(-1).max())
        order = torch.sort((~keep).to(torch.int8), dim=-1, stable=True).indices[..., :L]  # kept slots first, in order
        ok = torch.gather(keep, -1, order)
        self.positions = torch.where(ok, torch.gather(self.positions, -1, order), torch.full_like(order, -1))
        if self.flags is not None:
            self.flags = torch.gather(self.flags, -1, order[:, :, None, :].expand(*self.flags.shape[:3], L)) & ok[:, :, None, :]
        idx = order[..., None]
        self.keys = torch.gather(self.keys, 2, idx.expand(*idx.shape[:3], self.keys.shape[-1]))
        self.values = torch.gather(self.values, 2, idx.expand(*idx.shape[:3], self.values.shape[-1]))

    def get_seq_length(self) -> int:
        return self.seen

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.seen + query_length, 0

    def reset(self) -> None:
        super().reset()
        self.positions, self.flags, self.seen, self.evicted_at = None, None, 0, None

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
    """Bytes of the keys and values a transformers cache holds (any Cache with ``layers``)."""
    total = 0
    for layer in cache.layers:
        for x in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(x, torch.Tensor):
                total += x.numel() * x.element_size()
    return total

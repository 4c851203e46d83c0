"""A KV cache that keeps, per KV head, only the keys its query heads can still read: O(w + g) per planned head.

    keep(j) = j ∈ C_h  ∨  j ≥ t − w_h     for some query head h of the KV head (t: the next position; C_h: the
                                          input's decoding columns, ``input_state``)
            = everything                  if one of them is full (or reads its whole cache: a retrieval tail)

After the prefill, and then every ``EVICT_EVERY`` decoding steps, each layer of a planned model
(``attention.apply_plan``) drops the cached keys and values no future query can attend to (in
between, keys that left a window stay cached but masked: at most ``EVICT_EVERY`` extra slots per
KV head, and no compaction copy per token); what stays is stored compacted, ``(B, H_p, L, d)``
with the absolute position of every slot in ``positions`` ``(B, H_p, L)`` (−1: an empty slot,
when KV heads keep different numbers of keys).  ``seen`` counts the tokens processed, so the
model's positions (RoPE) continue as with a full cache.

Ragged by KV head where it matters: a KV head one of whose query heads reads everything keeps every
key, the others w + g.  Padding them to one length would hold the whole context for every KV head of
such a layer, so at the first compaction a layer whose KV heads keep different numbers of keys splits
(``split``) into *slabs* (``Slab``): its whole KV heads in one that is never compacted, each other KV head
in one of its own.  ``parts()`` gives each
slab's keys for one decoding step (the attention runs slab by slab); an unsplit layer is one slab.

Appending a token writes into spare room kept after the last slot (``EVICT_EVERY`` slots, the
appends between two compactions), not a concatenation of the whole cache per step: ``keys`` is a
view of the first L slots of a larger buffer, and ``kv_bytes`` counts the buffers as allocated.

    cache = PlanCache(model)            # after apply_plan(model, plan)
    model.generate(ids, past_key_values=cache, ...)
    cache.nbytes()                       # bytes of keys + values held

Read-back (``Plan.pages`` > 0, ``attnlab.llm.execution.pages``): the slots an eviction drops are appended to the
layer's *store* (``store_keys``/``store_values``/``store_pos``, compacted the same way) instead of being lost (on the
cache's device, as Quest keeps them; InfiniGen's host copy is not built); a decoding step joins them after the
resident slots (``parts``) and its planned heads read the pages their bound chooses.  Accounting keeps the two apart:
``kv_bytes`` is the resident cache plus the page summaries (2·d_k values per page and KV head — 3·d_k with the mean
key's sums — and per page a query head's columns touch, ``summaries``: made after the prefill, folded as keys arrive),
``store_bytes`` the stored keys and values, ``read_tokens`` the stored tokens fetched per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, DynamicLayer

from attnlab.llm.execution.pages import fold_keys

__all__ = ["EVICT_EVERY", "Part", "PlanCache", "PlanLayer", "Slab", "kv_bytes", "read_tokens", "store_bytes",
           "store_tokens"]

EVICT_EVERY = 32  # decoding steps between compactions (and the spare slots kept after the last one)


def _append(x, new, dim: int):
    """``x`` followed by ``new`` along ``dim``, written into the spare room of x's buffer when x is the first L slots
    of one (a view this function made) with room for ``new``; else into a new buffer with min(``EVICT_EVERY``,
    ⌈(L + t)/16⌉) empty slots after the last (≤ 1/16 more memory; a copy every ≥ L/16 appends).  x None: ``new``
    alone.  Returns the view of the filled slots."""
    L, t = (0 if x is None else x.shape[dim]), new.shape[dim]
    buf = None if x is None else x._base
    if (buf is None or buf.dim() != x.dim() or x.storage_offset() != 0 or buf.stride() != x.stride()
            or buf.shape[dim] < L + t):
        shape = list(new.shape)
        shape[dim] = L + t + min(EVICT_EVERY, -(-(L + t) // 16))
        buf = new.new_empty(shape)
        if L:
            buf.narrow(dim, 0, L).copy_(x)
    buf.narrow(dim, L, t).copy_(new)
    return buf.narrow(dim, 0, L + t)


def _allocated(x) -> int:
    """Bytes allocated for ``x``: its buffer's, spare room included."""
    return x.untyped_storage().nbytes()


@dataclass
class Part:
    """One decoding step's view of some KV heads ``kv`` (H_s,) of a layer: keys, values (B, H_s, L, ·), positions
    (B, H_s, L) (−1: empty), column flags (B, H_s, r, L), which slots come from the read-back store (None: none),
    and whether they are every key in order (a whole slab)."""

    kv: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    positions: torch.Tensor
    flags: torch.Tensor | None
    stored: torch.Tensor | None = None
    whole: bool = False      # every key 0 … seen − 1 in order, none evicted
    store: "Slab | None" = None   # ``PlanLayer.merged``: the resident slots alone, the store beside them
                                  # (read-back's step)


class Slab:
    """Some KV heads ``kv`` (H_s,) of a layer, padded to one length: keys, values (B, H_s, L, d) (views with spare
    room), positions (B, H_s, L) (−1: empty), column flags (B, H_s, r, L), and the read-back store of their evicted
    slots.  ``whole``: they keep every key (never compacted)."""

    def __init__(self, kv, keys, values, positions, flags=None, whole: bool = False):
        (self.kv, self.keys, self.values, self.positions,
         self.flags, self.whole) = kv, keys, values, positions, flags, whole
        self.store_keys = self.store_values = self.store_pos = None   # (B, H_s, S, ·), (B, H_s, S): evicted slots
        self._slots = None   # ``store_slots``: position → store slot

    def append(self, key_states, value_states, seen: int):
        """The new tokens of these KV heads (B, H_s, n, ·) at positions seen … seen + n − 1; no new token is a
        column."""
        B, H_s, n, _ = key_states.shape
        new = torch.arange(seen, seen + n, device=key_states.device).expand(B, H_s, n)
        self.positions = _append(self.positions, new, 2)
        if self.flags is not None:
            self.flags = _append(self.flags, self.flags.new_zeros(*self.flags.shape[:3], n), 3)
        self.keys = _append(self.keys, key_states, 2)
        self.values = _append(self.values, value_states, 2)

    def take(self, idx, whole: bool = False) -> "Slab":
        """The KV heads at indices ``idx`` of this slab (before any eviction), as a slab of their own."""
        i = idx.to(self.keys.device)
        return Slab(self.kv[idx], self.keys[:, i], self.values[:, i], self.positions[:, i],
                    None if self.flags is None else self.flags[:, i], whole)

    def evict(self, keep, store: bool = False):
        """Drop the slots with ``keep`` False (B, H_s, L); KV heads keeping fewer keys are padded with −1 positions.

        ``store``: the dropped slots go to the store (read-back) instead of being lost."""
        if bool(keep.all()):
            return
        if store:
            self._store(~keep & (self.positions >= 0))
        order, ok, self.keys, self.values, self.positions = self._gather(keep)
        if self.flags is not None:
            L = order.shape[-1]
            self.flags = (torch.gather(self.flags, -1, order[:, :, None, :].expand(*self.flags.shape[:3], L))
                          & ok[:, :, None, :])

    def _gather(self, take):
        """The slots with ``take`` True (B, H_s, L), compacted in order: (order, ok, keys, values, positions), each KV
        head padded to the longest with empty slots (ok False, position −1); order (B, H_s, L') the source slots."""
        L = int(take.sum(-1).max())
        order = torch.sort((~take).to(torch.int8), dim=-1, stable=True).indices[..., :L]  # taken slots first, in order
        ok = torch.gather(take, -1, order)
        pos = torch.where(ok, torch.gather(self.positions, -1, order), torch.full_like(order, -1))
        B, H_s = order.shape[:2]
        b, h = (torch.arange(B, device=order.device).view(B, 1, 1),
                torch.arange(H_s, device=order.device).view(1, H_s, 1))
        # whole rows of d (a gather with its index over d: slower)
        k, v = self.keys[b, h, order], self.values[b, h, order]
        return order, ok, k, v, pos

    def _store(self, drop):
        """Append the slots with ``drop`` True (B, H_s, L) to the store, compacted (−1: empty)."""
        _, _, k, v, pos = self._gather(drop)
        self._slots = None
        if self.store_keys is None:
            self.store_keys, self.store_values, self.store_pos = k, v, pos
        else:
            self.store_keys = torch.cat([self.store_keys, k], 2)
            self.store_values = torch.cat([self.store_values, v], 2)
            self.store_pos = torch.cat([self.store_pos, pos], -1)

    def store_slots(self):
        """(B, H_s, J + 1) the store's slot of each position 0 … J (J: the last stored; −1: not stored), remade after
        each eviction."""
        if self._slots is None:
            B, H_s, S = self.store_pos.shape
            J = int(self.store_pos.max()) + 1
            slots = torch.full((B, H_s, J + 1), -1, dtype=torch.long, device=self.store_pos.device)   # [J]: empty slots
            at = torch.arange(S, device=self.store_pos.device).expand(B, H_s, S)
            self._slots = slots.scatter_(-1, torch.where(self.store_pos >= 0, self.store_pos, J), at)[..., :J]
        return self._slots

    def part(self) -> Part:
        """What a decoding step reads: the resident slots, joined with the store's (its slots last; a stored key is no
        column) when there is one."""
        if self.store_keys is None:
            return Part(self.kv, self.keys, self.values, self.positions, self.flags, whole=self.whole)
        L, S = self.keys.shape[2], self.store_keys.shape[2]
        flags = (None if self.flags is None
                 else torch.cat([self.flags, self.flags.new_zeros(*self.flags.shape[:3], S)], -1))
        stored = torch.arange(L + S, device=self.keys.device).expand(*self.positions.shape[:2], L + S) >= L
        return Part(self.kv, torch.cat([self.keys, self.store_keys], 2), torch.cat([self.values, self.store_values], 2),
                    torch.cat([self.positions, self.store_pos], -1), flags, stored)


def _slots_to(x, size: int, dim: int, value=0):
    """x padded with ``value`` along its slot axis ``dim`` to ``size`` slots (a slab's keys, values: 2; positions: 2;
    flags (B, H_s, r, L): 3)."""
    return F.pad(x, [0, 0] * (x.dim() - 1 - dim) + [0, size - x.shape[dim]], value=value)


def _one(name: str):
    """A PlanLayer attribute of its only slab (an unsplit layer: every KV head in one; what tests and baselines
    read)."""

    def get(self):
        return getattr(self.slabs[0], name) if self.slabs else None

    def put(self, x):
        if self.slabs:
            if len(self.slabs) > 1:
                raise AttributeError(f"a split PlanLayer has no single {name}: read its slabs")
            setattr(self.slabs[0], name, x)

    return property(get, put)


class PlanLayer(DynamicLayer):
    """One layer's compacted keys and values with their positions, in slabs of KV heads (one until ``split``)."""

    keys, values, positions, flags = _one("keys"), _one("values"), _one("positions"), _one("flags")
    store_keys, store_values, store_pos = _one("store_keys"), _one("store_values"), _one("store_pos")

    def __init__(self, **kwargs):
        self.slabs: list[Slab] = []   # every KV head in exactly one; slab 0 returned by ``update``
        super().__init__(**kwargs)
        self.num_kv_heads = 0
        self.seen = 0
        self.evicted_at = None  # ``seen`` at the last compaction
        self.page = None        # read-back: tokens per page (None: evicted keys are dropped)
        self._store = None      # read-back: the stores of the slabs stacked (``merged``), until the next eviction
        self.state = None       # the input's ``InputState`` (the decoding columns its prefill chose), made by that
                                # prefill and handed to each of its decoding steps (``decode_step.decode_step``)
        self.summaries = None   # read-back: the page summaries (pages.page_summaries: per KV head, and per query head
                                # its column pages)
        self.fetched = self.steps = 0   # stored tokens read per (batch row, KV head), summed over decoding steps; steps

    def update(self, key_states, value_states, *args, **kwargs):
        # key_states: (B, H_kv, n, d) → slab 0's cached keys and values (B, H_s, L + n, ·)
        self.is_initialized, self.device = True, key_states.device
        B, H_kv, n, _ = key_states.shape
        self.num_kv_heads = H_kv
        if not self.slabs:
            self.slabs = [Slab(torch.arange(H_kv), None, None, None)]
        for slab in self.slabs:
            i = slab.kv.to(key_states.device)
            k, v = (key_states, value_states) if len(self.slabs) == 1 else (key_states[:, i], value_states[:, i])
            slab.append(k, v, self.seen)
        if self.summaries is not None:   # the new keys folded into their pages' summaries
            self.summaries = fold_keys(self.summaries, key_states, self.seen, self.page)
        self.seen += n
        return self.slabs[0].keys, self.slabs[0].values

    def due(self) -> bool:
        """Time to compact: right after the prefill, then every ``EVICT_EVERY`` tokens."""
        return self.evicted_at is None or self.seen - self.evicted_at >= EVICT_EVERY

    def split(self, whole) -> None:
        """Ragged by KV head, before any eviction: the KV heads with ``whole`` True (H_kv,) bool in one slab that keeps
        every key, each other KV head in a slab of its own (no padding to another head's length)."""
        assert len(self.slabs) == 1 and self.evicted_at is None and self.slabs[0].store_keys is None
        (one,) = self.slabs
        w = (torch.nonzero(whole).view(-1) if bool(whole.any()) and not bool(whole.all())
             else whole.new_zeros(0, dtype=torch.long))
        self.slabs = (([one.take(w, whole=True)] if w.numel() else [])
                      + [one.take(g.view(1)) for g in torch.nonzero(~whole).view(-1)])

    def evict(self, keep, store: bool = False):
        """Compact an unsplit layer: drop the slots with ``keep`` False (B, H_kv, L) (``Slab.evict``)."""
        assert len(self.slabs) == 1, "a split layer is compacted slab by slab (compact)"
        self.evicted_at, self._store = self.seen, None
        self.slabs[0].evict(keep, store)

    def compact(self, keep_of, store: bool = False):
        """Compact every slab that does not keep everything: ``keep_of(slab)`` → its slots to keep (B, H_s, L)."""
        self.evicted_at, self._store = self.seen, None
        for slab in self.slabs:
            if not slab.whole:
                slab.evict(keep_of(slab), store)

    def parts(self, resident: bool = False) -> list[Part]:
        """What one decoding step reads, slab by slab (``Slab.part``).  ``resident``: the slabs with a store as one part
        (``merged``: their resident slots padded to one length, their stores beside them), the others as they are."""
        if not resident:
            return [slab.part() for slab in self.slabs]
        stored = [slab for slab in self.slabs if slab.store_keys is not None]
        return ([slab.part() for slab in self.slabs if slab.store_keys is None]
                + ([self.merged(stored)] if stored else []))

    def merged(self, slabs) -> Part:
        """The slabs ``slabs`` (each with a store) as one ``Part``: their resident keys, values, positions and flags
        padded to the longest (−1 / False) and stacked by KV head — this step's copy of the resident slots alone —
        with one store beside them: theirs padded and stacked once after each eviction, each slab's store then a
        view of it."""
        if len(slabs) == 1:   # one slab: its own slots and store
            (sl,) = slabs
            return Part(sl.kv, sl.keys, sl.values, sl.positions, sl.flags, store=sl)
        if self._store is None:
            S = max(sl.store_keys.shape[2] for sl in slabs)
            one = Slab(torch.cat([sl.kv for sl in slabs]), None, None, None)
            one.store_keys = torch.cat([_slots_to(sl.store_keys, S, 2) for sl in slabs], 1)  # (B, ΣH_s, S, d)
            one.store_values = torch.cat([_slots_to(sl.store_values, S, 2) for sl in slabs], 1)
            one.store_pos = torch.cat([_slots_to(sl.store_pos, S, 2, -1) for sl in slabs], 1)
            a = 0
            for sl in slabs:   # each slab's store a view of the stacked one (no second copy)
                H_s, S_i = sl.store_pos.shape[1], sl.store_pos.shape[2]
                sl.store_keys, sl.store_values = (one.store_keys[:, a : a + H_s, :S_i],
                                                  one.store_values[:, a : a + H_s, :S_i])
                sl.store_pos = one.store_pos[:, a : a + H_s, :S_i]
                a += H_s
            self._store = one
        L = max(sl.keys.shape[2] for sl in slabs)
        keys = torch.cat([_slots_to(sl.keys, L, 2) for sl in slabs], 1)
        values = torch.cat([_slots_to(sl.values, L, 2) for sl in slabs], 1)
        positions = torch.cat([_slots_to(sl.positions, L, 2, -1) for sl in slabs], 1)
        flags = (None if any(sl.flags is None for sl in slabs)
                 else torch.cat([_slots_to(sl.flags, L, 3, False) for sl in slabs], 1))
        return Part(self._store.kv, keys, values, positions, flags, store=self._store)

    def count_read(self, fetched) -> None:
        """One decoding step's count of stored slots read, summed over slabs and (batch row, KV head) (None: none)."""
        self.steps += 1
        if fetched is not None:
            self.fetched += float(fetched) / (self.batch() * self.num_kv_heads)

    def batch(self) -> int:
        return self.slabs[0].keys.shape[0]

    def tokens(self) -> float:
        """Mean filled slots per (batch row, KV head), over every slab."""
        return sum(float((s.positions >= 0).sum()) for s in self.slabs) / (self.batch() * self.num_kv_heads)

    def resident_bytes(self) -> int:
        """Bytes allocated for the resident keys and values (spare room included) with a read-back slab's page
        summaries: 2·d_k values per page of the ``seen`` positions and (batch row, KV head), 3·d_k with the mean key's
        sums, and as many per page a query head's columns touch (``pages.page_summaries``)."""
        total = sum(_allocated(x) for s in self.slabs for x in (s.keys, s.values))
        if self.summaries is not None:
            total += sum(x.numel() * x.element_size() for x in self.summaries if x is not None)   # no sums: bound alone
        return total

    def stored_bytes(self) -> int:
        return sum(x.numel() * x.element_size() for s in self.slabs for x in (s.store_keys, s.store_values)
                   if x is not None)

    def stored_tokens(self) -> float:
        return (sum(float((s.store_pos >= 0).sum()) for s in self.slabs if s.store_pos is not None)
                / (self.batch() * self.num_kv_heads))

    def get_seq_length(self) -> int:
        return self.seen

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.seen + query_length, 0

    def reset(self) -> None:
        self.slabs = []
        self.is_initialized = False
        self.seen, self.evicted_at, self.page, self.fetched, self.steps = 0, None, None, 0, 0
        self.summaries = self._store = None
        self.state = None

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("PlanCache cannot be cropped (evicted keys are gone)")


class PlanCache(Cache):
    """``Cache`` of ``PlanLayer`` s, one per layer of a planned model (``attention.apply_plan``)."""

    def __init__(self, model):
        from attnlab.llm.execution.attention import attach_cache, attention_modules

        n_layers = len(attention_modules(model))
        super().__init__(layers=[PlanLayer() for _ in range(n_layers)])
        attach_cache(model, self)

    def nbytes(self) -> int:
        return kv_bytes(self)


def kv_bytes(cache) -> int:
    """Bytes of the keys and values a transformers cache holds on the device (any Cache with ``layers``; a
    ``PlanLayer``'s buffers as allocated, with its read-back page summaries)."""
    total = 0
    for layer in cache.layers:
        if isinstance(layer, PlanLayer):
            total += layer.resident_bytes() if layer.slabs else 0
        else:
            total += sum(x.numel() * x.element_size()
                         for x in (getattr(layer, "keys", None), getattr(layer, "values", None))
                         if isinstance(x, torch.Tensor))
    return total


def store_bytes(cache) -> int:
    """Bytes of the evicted keys and values kept in the read-back stores."""
    return sum(layer.stored_bytes() for layer in cache.layers if isinstance(layer, PlanLayer) and layer.slabs)


def store_tokens(cache) -> float:
    """Mean stored tokens per (layer, KV head) (0 for a layer without a store)."""
    counts = [layer.stored_tokens() if isinstance(layer, PlanLayer) and layer.slabs else 0.0 for layer in cache.layers]
    return sum(counts) / len(counts) if counts else 0.0


def read_tokens(cache) -> float:
    """Mean stored tokens fetched per decoding step and (layer, KV head) (0 for a layer without read-back)."""
    counts = [layer.fetched / layer.steps if getattr(layer, "steps", 0) else 0.0 for layer in cache.layers]
    return sum(counts) / len(counts) if counts else 0.0

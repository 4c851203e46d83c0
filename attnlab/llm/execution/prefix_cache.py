"""Prompts that share a prefix reuse its full-attention prefill.

Under full attention, S_h(i) = {j ≤ i}, the keys and values of position j depend on x_0 … x_j only:

    K_l[:, :, :p](x) = K_l[:, :, :p](x')   and   V_l[:, :, :p](x) = V_l[:, :, :p](x')   when x_{<p} = x'_{<p}

(K_l, V_l: layer l's cache, (1, H_kv, n, d)).  ``FullPrefill`` holds the last prompt's K, V and the logits of
its last position, and

* (b) a new prompt x of n tokens keeps the longest common prefix p = lcp(x, x_prev) ≤ n − 1 of the last
  prompt's cache (cropped to p) and prefills only x_p … x_{n−1}, at positions p … n − 1 (RoPE and the causal mask
  continue from the cache's length) — when p ≥ ``MIN_SHARE`` · n.  A chunk after a cache runs attention
  with an explicit mask, every block of its t × n scores, where a fresh prefill skips the blocks above the
  diagonal (n²/2): with cost c_lin per token and c_att per score,

      chunk  = t·c_lin + t·n·c_att    <    fresh = n·c_lin + n²/2·c_att    whenever t ≤ n/2,

  whatever the two costs (smollm2-135m, 1 CPU thread, n = 2048: fresh 15.9–17.6 s, 1998 tokens after 50
  cached 21.5–22.1 s, the masked attention 8.7 s of it);
* (a) every method whose prefill is that same computation (``Method.prefill_reuse``: full, SnapKV, Quest)
  takes its cache from the last prompt's K, V (the same prompt) instead of a prefill of its own.  A method whose
  prefill also reads the queries of its last ``t = Method.reuse_tail(n)`` tokens (SnapKV's vote) is given
  the first n − t and runs those t tokens itself; t = 0: the last prompt's logits are its prefill's.

Exactness: the same sums in another grouping (a chunk of rows after a cache instead of all rows at once,
the model's attention instead of attnlab's full-plan kernel), so logits agree to float rounding and greedy
answers agree (checked against a run without reuse in tests/test_llm_prefix_cache.py).  A model with sliding
or chunked layers is not reused (``supports``): its cache drops keys that a crop would need.
"""

from __future__ import annotations

import time

import torch

__all__ = ["MIN_SHARE", "FullPrefill", "common_prefix"]

MIN_SHARE = 0.5  # the previous prompt's prefix is taken when it is at least this fraction of the prompt (see above)


def common_prefix(a: list[int] | None, b: list[int]) -> int:
    """Length of the longest common prefix of two token lists (0 when ``a`` is None)."""
    if a is None:
        return 0
    m = min(len(a), len(b))
    if a[:m] == b[:m]:
        return m
    x, y = torch.tensor(a[:m]), torch.tensor(b[:m])
    return int((x != y).nonzero()[0, 0])                               # first differing position


def _fill(cache, kv, length: int):
    """Put the first ``length`` positions of ``kv`` (per layer (K, V), (1, H_kv, n, d)) into an empty ``cache``."""
    for l, (k, v) in enumerate(kv if length > 0 else []):
        cache.update(k[:, :, :length], v[:, :, :length], l)            # a copy: the reused tensors are never written
    return cache


class FullPrefill:
    """The last prompt's full-attention prefill: its ids, K, V per layer and last-position logits."""

    def __init__(self, min_share: float = MIN_SHARE):
        self.min_share = min_share
        self.ids: list[int] | None = None
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] = []        # per layer (K, V): (1, H_kv, n, d)
        self.logits: torch.Tensor | None = None                       # (vocab,) at position n − 1
        self._supports: dict[int, bool] = {}

    def supports(self, model) -> bool:
        """Whether the model's own cache keeps every key in every layer (no sliding or chunked layer to crop)."""
        key = id(model)
        if key not in self._supports:
            from transformers import DynamicCache
            from transformers.cache_utils import DynamicLayer

            self._supports[key] = all(type(l) is DynamicLayer for l in DynamicCache(config=model.config).layers)
        return self._supports[key]

    @torch.no_grad()
    def ensure(self, model, ids: list[int]) -> tuple[bool, int, float]:
        """Hold the full-attention prefill of ``ids`` (the model as it is: no method applied).

        Returns (computed now, tokens taken from the previous prompt, seconds spent); (False, n, 0.0) for the same
        prompt again.
        """
        if self.ids == list(ids):
            return False, len(ids), 0.0
        from transformers import DynamicCache

        t0 = time.perf_counter()
        p = min(common_prefix(self.ids, ids), len(ids) - 1)            # at least one token is run: its logits
        p = p if p >= self.min_share * len(ids) else 0                 # a short prefix costs more than it saves
        cache = _fill(DynamicCache(config=model.config), self.kv, p)
        self.ids, self.kv, self.logits = None, [], None                # the old prompt's tensors go with their last use
        out = model(input_ids=torch.tensor([ids[p:]]), cache=cache, use_cache=True, logits_to_keep=1)
        self.kv = [(layer.keys, layer.values) for layer in out.cache.layers]
        self.ids, self.logits = list(ids), out.logits[0, -1].clone()
        return True, p, time.perf_counter() - t0

    @torch.no_grad()
    def resume(self, model, method, ids: list[int]):
        """Inside ``method.applied(model)``, after ``ensure(model, ids)``: (logits (vocab,), the method's cache after
        its prefill).

        The method's cache gets the last prompt's K, V of the first n − t tokens, t = ``method.reuse_tail(n)``; the
        last t run under it.
        """
        assert self.ids == list(ids), "resume() follows ensure() of the same prompt"
        n = len(ids)
        t = method.reuse_tail(n)
        cache = _fill(method.new_cache(model), self.kv, n - t)
        if t == 0:
            return self.logits, cache
        out = model(input_ids=torch.tensor([ids[n - t :]]), cache=cache, use_cache=True, logits_to_keep=1)
        return out.logits[0, -1], out.cache

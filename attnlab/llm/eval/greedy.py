"""One greedy answer under a method: the prefill policy reads the prompt, the decoding policy the cache.

    prefill:  logits_n = f(x_1 … x_n)              (one forward; only the last row of logits is made)
    decoding: y_t = argmax p(· | x, y_<t),  t = 1 … max_new,  stopping at the end-of-turn token

Timed apart (prefill seconds, decoding seconds); the cache's bytes after the prefill give the KV
tokens the decoding policy keeps, per layer and KV head, as the field states a KV budget.  A method whose
prefill is full attention may take it from a shared full-attention prefill (``prefix_cache``).  A plan with
read-back (``Plan.pages``) is stated apart, never hidden in those:

    kv_tokens / kv_bytes              the resident cache (+ page summaries): what a query reads without the store
    kv_read_tokens                    stored tokens fetched per decoding step, per (layer, KV head)
    kv_store_tokens / kv_store_bytes  the evicted keys and values kept in the read-back store (same device)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from attnlab.llm.execution.kv_cache import PlanLayer, kv_bytes, read_tokens, store_bytes, store_tokens

__all__ = ["Answer", "greedy_answer", "kv_tokens", "reusable"]


@dataclass
class Answer:
    text: str
    tokens: int
    prefill_s: float
    decode_s: float
    kv_bytes: int        # keys + values held after the prefill
    kv_tokens: float     # mean tokens kept per (layer, KV head) after the prefill
    reused: int = 0      # prompt tokens whose prefill came from another answer's (prefix_cache.FullPrefill)
    kv_read_tokens: float = 0.0   # read-back: mean stored tokens fetched per decoding step and (layer, KV head)
    kv_store_tokens: float = 0.0  # read-back: mean stored (evicted) tokens per (layer, KV head) after the prefill
    kv_store_bytes: int = 0       # read-back: bytes of the stored keys and values after the prefill


def _stop_ids(tokenizer) -> set[int]:
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    for t in ("<|im_end|>", "<end_of_turn>", "<|eot_id|>"):
        x = tokenizer.convert_tokens_to_ids(t)
        if isinstance(x, int) and x != tokenizer.unk_token_id:
            ids.add(x)
    return ids


def kv_tokens(cache) -> float:
    """Mean tokens held per (layer, KV head): a ``PlanLayer``'s filled slots, else the cached length."""
    counts = []
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        if isinstance(layer, PlanLayer):
            counts.append(layer.tokens() if layer.slabs else 0.0)
        elif isinstance(keys, torch.Tensor) and keys.dim() == 4:
            counts.append(float(keys.shape[2]))
    return sum(counts) / len(counts) if counts else 0.0


def reusable(prefixes, model, method, n: int) -> bool:
    """Whether ``method``'s prefill of an n-token prompt may come from ``prefixes`` (a ``prefix_cache.FullPrefill``)."""
    return (prefixes is not None and method.prefill_reuse and n - method.reuse_tail(n) > 0 and prefixes.supports(model))


@torch.no_grad()
def greedy_answer(model, tokenizer, method, ids: list[int], max_new: int, done=None, prefixes=None) -> Answer:
    """Greedy answer to the prompt ``ids`` with ``method`` applied (``Method.applied``).

    ``done(text) -> bool``: stop early once it holds (eval stops when every expected string is in the
    answer: string_match_all cannot fall by generating more).  ``prefixes``: a ``prefix_cache.FullPrefill``
    whose full-attention prefill stands for the method's when ``Method.prefill_reuse`` (else None: no reuse);
    ``prefill_s`` then counts what this answer spent on it (the shared prefill when this answer made it).
    """
    stop = _stop_ids(tokenizer)
    reuse = reusable(prefixes, model, method, len(ids))
    shared_s, reused = 0.0, 0
    if reuse:  # the model's own attention, before the method is applied
        made, reused, shared_s = prefixes.ensure(model, ids)
        if not made:
            reused = len(ids) - method.reuse_tail(len(ids))
    with method.applied(model):
        if reuse:
            t0 = time.perf_counter()
            logits, cache = prefixes.resume(model, method, ids)
        else:
            cache = method.new_cache(model)
            t0 = time.perf_counter()
            out = model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True, logits_to_keep=1)
            logits, cache = out.logits[0, -1], out.cache
        prefill_s = shared_s + time.perf_counter() - t0
        held, kept, stored, stored_bytes = kv_bytes(cache), kv_tokens(cache), store_tokens(cache), store_bytes(cache)
        gen: list[int] = []
        t0 = time.perf_counter()
        for _ in range(max_new):
            y = int(logits.argmax())
            if y in stop:
                break
            gen.append(y)
            if done is not None and done(tokenizer.decode(gen, skip_special_tokens=True)):
                break
            logits = model(input_ids=torch.tensor([[y]]), cache=cache, use_cache=True).logits[0, -1]
        decode_s = time.perf_counter() - t0
        read = read_tokens(cache)
    text = tokenizer.decode(gen, skip_special_tokens=True)
    return Answer(text, len(gen), prefill_s, decode_s, held, kept, reused, read, stored, stored_bytes)

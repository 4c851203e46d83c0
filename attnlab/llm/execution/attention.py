"""attnlab's attention inside Hugging Face models: each head runs its plan (``transformers.AttentionInterface``).

    out_i = Σ_{j ∈ S_h(i)} α_ij v_j,   α_ij = softmax_{j ∈ S_h(i)}(q_i·k_j · scaling),
    S_h(i) = {j ≤ i : i − j ≤ w_h} ∪ {j ≤ i : j ∈ T_h} ∪ {j ≤ i : j − i ∈ Δ_h}   (planned head; full head: {j ≤ i})

``apply_plan(model, plan)`` registers the function ``attnlab_attention`` under the name
``"attnlab"`` and switches the model to it (``model.set_attn_implementation("attnlab")``), so
``model(...)`` and ``model.generate(...)`` run every head with its plan.  Each layer's ``LayerRunner`` chooses what
its heads read (``layer_plan``, ``prefill``, ``decode_step``) and hands the softmax to the backend of the inputs'
device (``backend``: ``cpu_backend`` on the CPU, ``flex_backend`` on CUDA); on the CPU:

* prefill (no past keys): planned heads go through the chunked band + columns kernel
  (``sliding_window_attention``, O(n·(2w+1+g)) per head, heads grouped by w; with the native kernel a
  group runs in place, ``band_heads_attention``), full heads through
  ``torch.nn.functional.scaled_dot_product_attention``;
* T_h = the plan's fixed columns ∪ the ``dynamic`` keys of largest attention mass from the last
  ``LAST_Q`` queries of the input (``estimate_columns``, MInference's vertical estimate), chosen
  once per prefill and kept for the decoding that follows;
* Δ_h (``HeadPlan.slashes`` = s > 0): the s diagonals δ < −w_h of largest mass from the same last
  queries, off the keys T_h holds (MInference's slash estimate, ``attnlab.llm.plans.slash_lines``; ``choose_slashes``),
  read by the prefill only: the kernel
  takes them as per-chunk extra keys (chunks of ``SLASH_CHUNK`` queries); decoding does not read them;
* key blocks (``HeadPlan.blocks`` = K > 0): each block of ``BLOCK`` queries also reads the K blocks of ``BLOCK``
  keys of largest pooled score q̄·k̄ (``attnlab.llm.plans.key_blocks``, chosen per input); the kernel reads them per
  chunk where k, v lie (``band_heads_attention(blocks=)``); at decoding such a head reads the keys its last query block
  chose (the block keys B_h, decoding columns), and its whole cache only with a tail;
* tails (``HeadPlan.tail`` = T > 0): the last T rows read every causal key (one masked softmax for the layer's tail
  heads); at decoding the head reads its whole cache, or with a vote of size P (``HeadPlan.kept``, the option
  ``tail_keep``) its band, columns and the ⌈P/16⌉ key blocks its tail rows attended most (the voted keys V_h,
  decoding columns);
* decoding (queries after cached keys): a masked softmax over the cached keys (``decode_step.decode_step``, top to
  bottom); with ``attnlab.llm.execution.kv_cache.PlanCache`` the cache holds, per KV head, only what its query heads
  can still read (window ∪ columns), so one step costs O(w + g) per planned head;
* the state of one input (``input_state.InputState``: its decoding columns, slashes, key blocks) is made by its
  prefill and owned by its ``PlanCache`` layer, which hands it to each of its decoding steps; the runner holds the
  plan only.  Under transformers' own cache (no states) the layer's last prefill's state waits on the attention
  module (``STATE``) for the steps that follow: such a cache follows one input at a time;
* read-back (``Plan.pages`` = K > 0): a planned head's decoding query also reads the K pages of largest
  Quest bound among those holding keys its band and columns miss (``attnlab.llm.execution.pages``); the keys the
  cache evicts are kept in its store, the page summaries beside the cache, and a step gathers the chosen
  pages' keys from the store by position (``LayerRunner.decode_read_back``).

GQA: query head h reads KV head h // (H / H_kv).  The model's own causal and sliding-window
masks are applied here (transformers builds no mask for an unknown implementation); padded
batches are not supported (batch rows must be full-length).
"""


from __future__ import annotations

import weakref
from typing import Callable

import torch

from attnlab.llm.execution.decode_step import DecodeStep, compact, decode_step
from attnlab.llm.execution.layer_plan import estimate_columns
from attnlab.llm.execution.pages import page_summaries
from attnlab.llm.execution.prefill import PrefillStep
from attnlab.llm.execution.profile_ranges import span
from attnlab.llm.plans.plan import Plan
from attnlab.llm.plans.slash_lines import last_query_rows

__all__ = ["NAME", "STATE", "LayerRunner", "apply_plan", "attnlab_attention", "attention_modules", "estimate_columns",
           "last_query_rows", "plan_reference", "prefill_into_cache", "register", "remove_plan"]

NAME = "attnlab"


class LayerRunner(PrefillStep, DecodeStep):
    """The plan of one layer in executable form, attached to its attention module as ``attnlab_layer``: its static part
    (``layer_plan.LayerPlan``), its prefill (``prefill.PrefillStep``) and decoding step (``decode_step.DecodeStep``),
    each run by the seam's backend of the inputs' device (``backend``).  It holds no input's state: each prefill makes
    one (``input_state.InputState``), which the input's cache layer keeps and hands to its decoding steps.

    Attachments of the model run it serves, not of one input (``input_state``): ``caches``, the live ``PlanCache`` s
    of the model (weakly: each owns its input's state; ``attach_cache``), ``cache``, a weak reference to the latest of
    them, and ``recorder``, a calibration recorder that observes the layer's exact attention instead of running the
    plan.

    A method changes attention by subclassing it (overriding ``prefill``, ``decode``, ``decode_parts`` or ``keep``) and
    giving the subclass to ``apply_plan(model, plan, runner=...)``; it is constructed like this class, with its own
    keywords.
    """

    caches = None     # weakref.WeakSet of the model's live PlanCaches (``attach_cache``); None: none made yet
    cache = None      # weakref to the latest of them; None: transformers' own cache
    recorder = None   # a calibration recorder while calibrating (no plan runs then)


STATE = "attnlab_state"   # the attention module's attribute: its last prefill's state under a cache without states


def attnlab_attention(module, query, key, value, attention_mask=None, dropout: float = 0.0, scaling=None,
                      sliding_window=None, **kwargs):
    """transformers' attention-function signature: (B, H, n, d) q, (B, H_kv, m, d) k, v → ((B, n, H, d), None)."""
    with span("attnlab.layer"):   # the profiler's range of one layer (``profile_ranges``)
        return _layer_attention(module, query, key, value, scaling)


def _layer_attention(module, query, key, value, scaling):
    """``attnlab_attention`` of one layer: a calibration's observation, a prefill, or a decoding step, by where the
    keys come from (module docstring)."""
    # query: (B, H, n, d_k), key/value: (B, H_kv, m, ·)
    scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
    runner: LayerRunner | None = getattr(module, "attnlab_layer", None)
    if runner is None:
        raise RuntimeError(f"attnlab attention: layer {getattr(module, 'layer_idx', '?')} has no plan; "
                           "use attnlab.llm.apply_plan(model, plan)")
    n, m = query.shape[2], key.shape[2]
    if runner.recorder is not None:   # calibrating: the exact attention, observed
        if m != n:
            raise RuntimeError("calibration runs one prefill per window (no cache)")
        kv = runner.kv_of.to(key.device)
        out = runner.recorder.observe(runner.layer_idx, query, key[:, kv], value[:, kv], scaling, runner.sliding)
        return out.transpose(1, 2).contiguous(), None
    layer = _plan_layer(runner, key)
    if layer is not None and m == n == layer.seen:   # the first prefill into a PlanCache: the input's state is its own
        out = prefill_into_cache(runner, layer, query, key, value, scaling)
    elif layer is not None:                          # a decoding step over the PlanCache, with the input's own state
        out = decode_step(runner, layer, query, scaling)
    elif m == n:                                     # a prefill under transformers' own cache (or none)
        out, state = runner.prefill(query, key, value, scaling)
        setattr(module, STATE, state)                # such a cache follows one input: the layer's last prefill's
    else:                                            # queries after keys from such a cache: every key at its position
        state = getattr(module, STATE, None) or runner.new_state()
        q_pos = torch.arange(m - n, m, device=query.device)
        k_pos = torch.arange(m, device=key.device).expand(key.shape[0], key.shape[1], m)
        out = runner.decode(query, key, value, scaling, q_pos, k_pos, state)
    return out.transpose(1, 2).contiguous(), None


def _plan_layer(runner: LayerRunner, key):
    """The ``PlanLayer`` whose keys ``key`` are, of the model's live ``PlanCache`` s (None: another cache, or none):
    the latest first, then any other (inputs decoded in turn, each in its own cache)."""
    latest = runner.cache() if runner.cache is not None else None
    for cache in [latest] + [c for c in (runner.caches or ()) if c is not latest]:
        if cache is not None and runner.layer_idx < len(cache.layers) and cache.layers[runner.layer_idx].keys is key:
            return cache.layers[runner.layer_idx]
    return None


def prefill_into_cache(runner: LayerRunner, layer, q, k, v, scaling):
    """The first prefill into a ``PlanLayer``: the kernel, then the input's state handed to its cache layer (the
    decoding columns' slots as flags, read-back's page summaries) and the cache compacted (``decode_step.compact``).
    q: (B, H, n, d_k), k, v: (B, H_kv, n, ·) → (B, H, n, d_v)."""
    out, state = runner.prefill(q, k, v, scaling)
    layer.state = state                                          # this input's choice, for its steps
    layer.flags = runner.column_flags(layer.positions, state)    # the decoding columns' slots, once
    layer.page = runner.page if runner.pages else None           # read-back: a store, page summaries
    if runner.pages:   # each query head's, its own columns left out (stored sparsely); folded as keys arrive
        layer.summaries = page_summaries(k, state.decode_columns, runner.kv_of, runner.page, runner.reads,
                                         sums=runner.mean_pages > 0)   # the mean key's sums: a split choice only
    if layer.due():
        compact(runner, layer, state)
    return out


def register() -> None:
    """Register ``attnlab_attention`` with transformers as ``attn_implementation="attnlab"``."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, attnlab_attention)


def attention_modules(model):
    """The attention modules of a transformers causal LM, by layer index."""
    mods = {}
    for mod in model.modules():
        if hasattr(mod, "layer_idx") and hasattr(mod, "q_proj") and hasattr(mod, "o_proj"):
            mods[int(mod.layer_idx)] = mod
    return [mods[i] for i in sorted(mods)]


def apply_plan(model, plan: Plan, runner: Callable[..., LayerRunner] = LayerRunner, **options):
    """Run ``model`` with ``plan``: every attention head with its support; returns the model.

    ``runner``: the class (or factory) of each layer's runner, a method's subclass of ``LayerRunner``, constructed as
    ``runner(heads, layer_idx, num_kv_heads, sliding_window, pages, page, mean_pages=…, decode_band=…, group_vote=…,
    **options)``.
    Raises ``UserError`` if the plan was made for another model (layer / head counts).
    """
    plan.check(model)
    register()
    mods = attention_modules(model)
    for mod in mods:
        l = int(mod.layer_idx)
        sw = getattr(mod, "sliding_window", None)
        mod.attnlab_layer = runner(plan.heads[l], l, plan.num_kv_heads, int(sw) if sw else None,
                                   getattr(plan, "pages", 0), getattr(plan, "page", 16),
                                   mean_pages=getattr(plan, "mean_pages", 0),
                                   decode_band=getattr(plan, "decode_band", 0),
                                   group_vote=getattr(plan, "group_vote", 0), **options)
    model.set_attn_implementation(NAME)
    model.attnlab_plan = plan
    return model


def remove_plan(model) -> None:
    """Undo ``apply_plan``'s attributes: each layer's runner and the model's plan (the caller sets the implementation
    back)."""
    for mod in attention_modules(model):
        if hasattr(mod, "attnlab_layer"):
            del mod.attnlab_layer
        if hasattr(mod, STATE):
            delattr(mod, STATE)
    if hasattr(model, "attnlab_plan"):
        del model.attnlab_plan


def attach_cache(model, cache) -> None:
    """Let each layer's runner find ``cache`` (a PlanCache) to read its positions and compress it: the latest
    (``LayerRunner.cache``) and, while it lives, among the model's others (``LayerRunner.caches``)."""
    for mod in attention_modules(model):
        runner = mod.attnlab_layer
        if runner.caches is None:
            runner.caches = weakref.WeakSet()
        runner.caches.add(cache)
        runner.cache = weakref.ref(cache)


def plan_reference(runner: LayerRunner, q, k, v, scaling, state):
    """Dense masked reference of a layer under its plan for the input whose ``InputState`` is ``state`` (tests):
    (B, H, n, n) mask, masked softmax."""
    # q: (B, H, n, d_k), k, v: (B, H_kv, n, ·) → (B, H, n, d_v)
    B, H, n, _ = q.shape
    pos = torch.arange(n, device=q.device)
    return runner.decode(q, k, v, scaling, pos, pos.expand(B, runner.H_kv, n), state)


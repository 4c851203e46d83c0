"""The state of one input under a layer's plan: what its prefill chose and what its decoding steps read.

A layer's plan (``layer_plan.LayerPlan``: per head w_h, fixed columns, how many dynamic columns, slashes, key
blocks, tails, the vote's size) is the same for every input; what follows from one input is this object's:

    C_h      decode_columns  the keys a decoding step reads beside its band, C_h = T_h ∪ B_h ∪ V_h  (B, H, g), −1: empty
    Δ_h      diagonals       the slash offsets the prefill chose (read by the prefill only)         (B, H, s)
    U_h(t)   blocks          the key blocks each query block chose (read by the prefill only)       (B, H, T, K)
             page_slots      the slots the input's last decoding step read through its pages        (B, H_s, L) bool

Glossary (one name, one thing, in ``execution`` and ``methods``):

    columns T_h         the prefill's columns: the plan's fixed ones and the ``dynamic`` best of the last queries
    block keys B_h      the keys of the key blocks a head's last query block chose (``PrefillStep.last_block_keys``)
    voted keys V_h      the ⌈P_h/b⌉ blocks of keys a head's tail rows attended most (``PrefillStep.vote``); P_h is
                        the plan's ``vote_size`` — the plan file's ``kept``, the option ``tail_keep``: how many keys
                        the vote picks, not what the cache keeps
    decoding columns    C_h = T_h ∪ B_h ∪ V_h (``decode_columns``), as flags on the cache's slots (``column_flags``)
    keep                the decoding cache's eviction decision: which slots some later query still reads
                        (``DecodeStep.keep``); the slots it leaves are *resident*, the others dropped or *stored*

An ``InputState`` is made by each prefill (``PrefillStep.prefill`` returns it beside the output) and owned by the
input's cache layer (``kv_cache.PlanLayer.state``), which hands it to every decoding step of that input
(``decode_step.decode_step``): the steps read the columns their own prefill chose, whichever input the layer ran
last.  The runner holds the plan, and attachments of the model run it serves (not of one input): the model's live
``PlanCache`` s, weakly (``caches``; ``cache``: the latest), whose layers own the inputs' states
(``attention.attach_cache``), and ``recorder``, a calibration recorder that observes exact attention instead of
running the plan.  Under a cache without states
(transformers' own), the state of the layer's last prefill is kept on the attention module (``attention.STATE``):
such a cache follows one input at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["InputState"]


@dataclass
class InputState:
    """What one input chose under a layer's plan (module docstring); the runner holds the plan only."""

    decode_columns: torch.Tensor | None = None  # (B, H, g) C_h = T_h ∪ B_h ∪ V_h, −1: empty (read by decoding)
    diagonals: torch.Tensor | None = None       # (B, H, s) Δ_h, NO_DIAGONAL: empty (prefill only)
    blocks: torch.Tensor | None = None          # (B, H, T, K) U_h(t), −1: none (prefill only)
    page_slots: torch.Tensor | None = None      # (B, H_s, L) bool: slots the last step read through its pages
                                                # (their count, summed over steps: ``PlanLayer.fetched``)

"""Quest's decoding as a layer runner (``attnlab.llm.methods.quest``): each query reads the pages of largest bound.

    S(q_i) = {j ≤ i : page(j) ∈ top_K U(q_i) ∪ {page(i)}},   U_P(q) = Σ_d max(q_d · m_{P,d}, q_d · M_{P,d})

(``pages.page_upper_bound``, ``pages.quest_pages``), the first ``DENSE_LAYERS`` layers densely.  The prefill is the
full plan's (every causal key); the softmax over the chosen keys is the seam's (``backend``).
"""

from __future__ import annotations

import torch

from attnlab.llm.execution.attention import LayerRunner
from attnlab.llm.execution.page_table import table_of
from attnlab.llm.execution.pages import page_upper_bound, quest_pages  # page summary and choice, as read-back's

__all__ = ["DENSE_LAYERS", "QuestRunner"]

DENSE_LAYERS = 2  # the first layers read every cached key (Quest, section 4)


class QuestRunner(LayerRunner):
    """A full-attention layer whose decoding reads only the ``read_pages`` pages of ``page_size`` keys it chooses."""

    def __init__(self, *args, page_size: int, read_pages: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.page_size, self.read_pages = int(page_size), int(read_pages)

    def decode(self, q, k, v, scaling, q_pos, k_pos, state, flags=None, kv=None, summaries=None):
        # q: (B, H_s·r, n, d_k) at q_pos (n,); k, v: (B, H_s, L, ·) at k_pos (B, H_s, L) → (B, H_s·r, n, d_v)
        if self.layer_idx < DENSE_LAYERS:
            return super().decode(q, k, v, scaling, q_pos, k_pos, state, flags, kv, summaries)
        B, H, n, d = q.shape
        H_kv, L = k.shape[1], k.shape[2]
        r, page = H // H_kv, self.page_size
        chosen = quest_pages(page_upper_bound(q, k, k_pos, page), q_pos, page, self.read_pages)   # (B, H, n, P)
        pid = (k_pos // page).clamp(0, chosen.shape[-1] - 1)                                       # (B, H_kv, L)
        read = torch.gather(chosen.view(B, H_kv, r, n, -1), -1,
                            pid[:, :, None, None, :].expand(B, H_kv, r, n, L))                     # (B, H_kv, r, n, L)
        flags = self.column_flags(k_pos, state, kv) if flags is None else flags                      # (B, H_kv, r, L)
        return self.backend_of(q).decode(q, k, v, scaling, table_of(self.allowed(q_pos, k_pos, flags, kv) & read))

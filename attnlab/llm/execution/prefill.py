"""A layer's prefill under its plan, top to bottom: choose what each head reads, run it, hand back what decoding reads.

    1. T_h, Δ_h   columns and slashes from the last queries' rows          (``LayerPlan.choose_columns``)
    2. U_h(t)     key blocks of every query block                         (``LayerPlan.choose_blocks``)
                  (1–2 as one batch over every head, ``indexed_selection``, where the backend reads index lists:
                  ``AttentionBackend.indexed``, and the layer has no slashes)
    3. B_h        block keys: a head with key blocks reads at decoding the keys of the blocks its last query block
                  chose                                                   (``last_block_keys``)
    4. V_h        voted keys: a head with a tail and a vote of size P (``LayerPlan.vote_size``, the plan's ``kept``)
                  reads at decoding the ⌈P/b⌉ blocks of b keys its tail rows attended most:
                  m_j = Σ_{i ∈ tail} a_ij over the keys its last row's band, columns and block keys miss,
                  m_J = Σ_{j ∈ J} m_j,   V_J = Σ_{u=0…s} m_{J−u}   (s = ``vote_next``, 0: V_J = m_J)
                  V_h = top_{⌈P/b⌉} blocks by V_J    (a needle's value lies beside the key the question finds:
                  whole blocks keep both, and with s > 0 the block after them, where the value starts a new block)
                  ``group_vote``: one vote a KV group, m_j summed over its voting query heads (SnapKV's vote for
                  grouped queries, as kvpress sums a group's scores): the group reads P voted keys, not up to r·P
    5. out        the seam's backend over ``PrefillParts``                (``backend.AttentionBackend.prefill``)

``prefill`` returns the output and the input's ``InputState``: C_h = T_h ∪ B_h ∪ V_h the decoding columns
(``InputState.decode_columns``, −1: empty), Δ_h and U_h(t); a sliding layer has no columns (the model's own mask would
hide them).  Nothing of the input stays on the runner.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.llm.execution import indexed_selection
from attnlab.llm.execution.backend import tail_scores
from attnlab.llm.execution.input_state import InputState
from attnlab.llm.execution.layer_plan import LayerPlan
from attnlab.llm.execution.profile_ranges import span
from attnlab.llm.plans.key_blocks import BLOCK, block_keys
from attnlab.support import NO_DIAGONAL, column_mask

__all__ = ["PrefillStep"]


class PrefillStep(LayerPlan):
    """The prefill of one layer (``LayerRunner`` = ``PrefillStep`` + ``decode_step.DecodeStep``)."""

    def prefill(self, q, k, v, scaling):
        """q: (B, H, n, d_k), k, v: (B, H_kv, n, ·) → (out (B, H, n, d_v), the input's ``InputState``), each head
        with its support (module docstring, steps 1–5)."""
        n = q.shape[2]
        backend = self.backend_of(q)
        with span("attnlab.selection"):
            columns, diagonals, blocks, batched = self.select(q, k, scaling, n, backend)       # 1–2
            last = (indexed_selection.last_block_keys(blocks, n, BLOCK) if batched
                    else self.last_block_keys(blocks, n))                                     # 3: (B, H, K·b) B_h
            voted = self.vote(q, k, scaling, torch.cat([columns, last], -1), n)              # 4: (B, H, ⌈P/b⌉·b) V_h
            # (B, H, g + K·b + P) C_h, −1: empty; the whole state made before the kernel (in a compiled layer, a
            # state written after FlexAttention's call was lost)
            decode_columns = torch.cat([columns, last, voted], -1) if last.shape[-1] or voted.shape[-1] else columns
            state = self.new_state(decode_columns=decode_columns, diagonals=diagonals, blocks=blocks)
        return backend.prefill(self.parts(columns, diagonals, blocks, n), q, k, v, scaling), state   # 5

    def new_state(self, **chosen) -> InputState:
        """A fresh ``InputState`` of one input holding what its prefill ``chosen`` (a method's runner may make its
        own subclass, with what its prefill chooses besides)."""
        return InputState(**chosen)

    def select(self, q, k, scaling, n: int, backend):
        """Steps 1–2: (T_h (B, H, g), Δ_h (B, H, s), U_h(t) (B, H, T, K), batched) — as one batch over heads where
        the backend reads index lists and the layer has no slashes (``indexed_selection``), else head by head."""
        batched = backend.indexed and not any(self.slashes)
        if batched:
            table = self.head_table(q.device, n)
            columns = indexed_selection.choose_columns(q, k, scaling, table)               # (B, H, F + D) T_h
            diagonals = torch.full((q.shape[0], self.H, 0), NO_DIAGONAL, dtype=torch.long, device=q.device)
            blocks = indexed_selection.choose_blocks(q, k, table, n, BLOCK)                # (B, H, T, K) U_h(t)
        else:
            columns, diagonals = self.choose_columns(q, k, scaling)                       # (B, H, g) T_h, (B, H, s) Δ_h
            blocks = self.choose_blocks(q, k, n)                                           # (B, H, T, K) U_h(t)
        if self.sliding is not None:  # a sliding layer's columns would be masked by the model: band only
            columns = columns[..., :0]
        return columns, diagonals, blocks, batched

    def last_block_keys(self, blocks, n: int):
        """B_h: the keys of the blocks each head's last query block chose (B, H, K_max·b), −1: empty (read at decoding:
        the rows that ask read them in the prefill; the answer's tokens go on from there)."""
        B, H = blocks.shape[:2]
        last = torch.full((B, H, max(self.blocks, default=0) * BLOCK), -1, dtype=torch.long, device=blocks.device)
        for h in range(H):
            if self.blocks[h] and not self.is_full(h, n):
                keys = block_keys(blocks[:, h, -1, : self.blocks[h]], n)                    # (B, K_h·b)
                last[:, h, : keys.shape[-1]] = keys
        return last

    def vote(self, q, k, scaling, read, n: int):
        """V_h: the tail rows' vote of each head with a tail and a vote of size P (module docstring, step 4):
        (B, H, ⌈P/b⌉·b) key positions, −1: empty; distinct from ``read`` (B, H, ·), the keys the head reads already
        beside its band (T_h ∪ B_h, −1: empty)."""
        B, H = q.shape[:2]
        voted = torch.full((B, H, -(-max(self.vote_size, default=0) // BLOCK) * BLOCK), -1, dtype=torch.long,
                           device=q.device)
        kv_of = self.kv_of.to(k.device)
        voters: dict[int, list[int]] = {}
        for h in range(H):
            if self.tail[h] and self.vote_size[h] and not self.is_full(h, n):
                voters.setdefault(min(self.tail[h], n), []).append(h)
        for R, hs in voters.items():
            # a: (B, |hs|, R, n)
            a = torch.softmax(tail_scores(q, k, kv_of, torch.tensor(hs, device=q.device), R, scaling), -1)
            taken, mass = {}, {}
            for x, h in enumerate(hs):
                taken[h] = column_mask(read[:, h], n)                                           # (B, n): T_h ∪ B_h
                taken[h][:, max(0, n - 1 - self.w_read_at(h, n)) :] = True                       # the band holds these
                mass[h] = a[:, x].sum(-2).masked_fill(taken[h], 0.0)                            # (B, n) m_j
            if self.group_vote:   # one vote a KV group: m_j summed over its voting heads, the same blocks for each
                mass = {h: sum(mass[g] for g in hs if self.kv_of[g] == self.kv_of[h]) for h in hs}
            for h in hs:
                per_block = F.pad(mass[h], (0, -n % BLOCK)).unflatten(-1, (-1, BLOCK)).sum(-1)  # (B, ⌈n/b⌉) m_J
                per_block = sum(F.pad(per_block, (u, 0))[..., : per_block.shape[-1]]            # V_J
                                for u in range(self.vote_next[h] + 1))
                top = torch.topk(per_block, min(-(-self.vote_size[h] // BLOCK), per_block.shape[-1]), -1)
                keys = block_keys(torch.where(top.values > 0, top.indices, -1), n)              # (B, P'), −1: none
                keys = keys.masked_fill(taken[h].gather(-1, keys.clamp_min(0)), -1)             # distinct from the rest
                voted[:, h, : keys.shape[-1]] = keys
        return voted

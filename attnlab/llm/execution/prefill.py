"""A layer's prefill under its plan, top to bottom: choose what each head reads, run it, keep what decoding reads.

    1. T_h, Δ_h   columns and slashes from the last queries' rows          (``LayerPlan.choose_columns``)
    2. U_h(t)     key blocks of every query block                         (``LayerPlan.choose_blocks``)
                  (1–2 as one batch over every head, ``indexed_selection``, where the backend reads index lists:
                  ``AttentionBackend.indexed``, and the layer has no slashes)
    3. out        the seam's backend over ``PrefillParts``                (``backend.AttentionBackend.prefill``)
    4. held       a head with key blocks keeps, for decoding, the keys of the blocks its last query block chose
    5. voted      a head with a tail and ``kept`` = P keeps the ⌈P/b⌉ blocks of b keys its tail rows attended most:
                  m_j = Σ_{i ∈ tail} a_ij over the keys its last row's band, columns and held blocks miss,
                  m_J = Σ_{j ∈ J} m_j,   V_J = Σ_{u=0…s} m_{J−u}   (s = ``vote_next``, 0: V_J = m_J)
                  voted = top_{⌈P/b⌉} blocks by V_J    (a needle's value lies beside the key the question finds:
                  whole blocks keep both, and with s > 0 the block after them, where the value starts a new block)
                  ``group_vote``: one vote a KV group, m_j summed over its voting query heads (SnapKV's vote for
                  grouped queries, as kvpress sums a group's scores): the group keeps P voted keys, not up to r·P

T_h ∪ held ∪ voted are the columns the decoding reads (the input's ``InputState.columns``, −1: empty); a sliding layer
keeps none (the model's own mask would hide them).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.llm.execution import indexed_selection
from attnlab.llm.execution.backend import tail_scores
from attnlab.llm.execution.layer_plan import LayerPlan
from attnlab.llm.execution.profile_ranges import span
from attnlab.llm.plans.key_blocks import BLOCK, block_keys
from attnlab.support import NO_DIAGONAL, column_mask

__all__ = ["PrefillStep"]


class PrefillStep(LayerPlan):
    """The prefill of one layer (``LayerRunner`` = ``PrefillStep`` + ``decode_step.DecodeStep``)."""

    def prefill(self, q, k, v, scaling):
        """q: (B, H, n, d_k), k, v: (B, H_kv, n, ·) → (B, H, n, d_v), each head with its support."""
        n = q.shape[2]
        prior, backend = self.state, self.backend_of(q)
        with span("attnlab.selection"):
            columns, diagonals, blocks, batched = self.select(q, k, scaling, n, prior, backend)
            # this input's choice: a new state, never an earlier input's changed; written whole before the kernel (in
            # a compiled layer, a state written after FlexAttention's call was lost)
            self.state = prior.for_input(columns=columns, diagonals=diagonals, blocks=blocks)
            held = indexed_selection.held_keys(blocks, n, BLOCK) if batched else self.held(blocks, n)   # (B, H, K·b)
            voted = self.vote(q, k, scaling, held, n)                                      # (B, H, ⌈P/b⌉·b)
            if held.shape[-1] or voted.shape[-1]:                                       # (B, H, g + K·b + P), −1: empty
                self.state = prior.for_input(columns=torch.cat([columns, held, voted], -1), diagonals=diagonals,
                                             blocks=blocks)
        return backend.prefill(self.parts(columns, blocks, n), q, k, v, scaling)

    def select(self, q, k, scaling, n: int, prior, backend):
        """Steps 1–2: (T_h (B, H, g), Δ_h (B, H, s), U_h(t) (B, H, T, K), batched) — as one batch over heads where
        the backend reads index lists and the layer has no slashes (``indexed_selection``), else head by head."""
        batched = backend.indexed and not any(self.slashes)
        if batched:
            table = self.head_table(q.device, n)
            columns = indexed_selection.choose_columns(q, k, scaling, table)               # (B, H, F + D) T_h
            diagonals = torch.full((q.shape[0], self.H, 0), NO_DIAGONAL, dtype=torch.long, device=q.device)
            blocks = indexed_selection.choose_blocks(q, k, table, n, BLOCK)                # (B, H, T, K) U_h(t)
        else:
            self.state = prior.for_input()                                                 # Δ_h written there
            columns = self.choose_columns(q, k, scaling)                                   # (B, H, g) T_h
            diagonals = self.diagonals                                                     # (B, H, s) Δ_h
            blocks = self.choose_blocks(q, k, n)                                           # (B, H, T, K) U_h(t)
        if self.sliding is not None:  # a sliding layer's columns would be masked by the model: band only
            columns = columns[..., :0]
        return columns, diagonals, blocks, batched

    def held(self, blocks, n: int):
        """The keys of the blocks each head's last query block chose (B, H, K_max·b), −1: empty (read at decoding: the
        rows that ask read them in the prefill; the answer's tokens go on from there)."""
        B, H = blocks.shape[:2]
        held = torch.full((B, H, max(self.blocks, default=0) * BLOCK), -1, dtype=torch.long, device=blocks.device)
        for h in range(H):
            if self.blocks[h] and not self.is_full(h, n):
                keys = block_keys(blocks[:, h, -1, : self.blocks[h]], n)                    # (B, K_h·b)
                held[:, h, : keys.shape[-1]] = keys
        return held

    def vote(self, q, k, scaling, held, n: int):
        """The tail rows' vote of each head with a tail and ``kept`` = P (module docstring, step 5): (B, H, ⌈P/b⌉·b)
        key positions, −1: empty; distinct from the head's columns and held blocks."""
        B, H = q.shape[:2]
        voted = torch.full((B, H, -(-max(self.kept, default=0) // BLOCK) * BLOCK), -1, dtype=torch.long,
                           device=q.device)
        kv_of = self.kv_of.to(k.device)
        voters: dict[int, list[int]] = {}
        for h in range(H):
            if self.tail[h] and self.kept[h] and not self.is_full(h, n):
                voters.setdefault(min(self.tail[h], n), []).append(h)
        for R, hs in voters.items():
            # a: (B, |hs|, R, n)
            a = torch.softmax(tail_scores(q, k, kv_of, torch.tensor(hs, device=q.device), R, scaling), -1)
            taken, mass = {}, {}
            for x, h in enumerate(hs):
                taken[h] = column_mask(torch.cat([self.columns[:, h], held[:, h]], -1), n)      # (B, n): columns, held
                taken[h][:, max(0, n - 1 - self.w_read_at(h, n)) :] = True                       # the band holds these
                mass[h] = a[:, x].sum(-2).masked_fill(taken[h], 0.0)                            # (B, n) m_j
            if self.group_vote:   # one vote a KV group: m_j summed over its voting heads, the same blocks for each
                mass = {h: sum(mass[g] for g in hs if self.kv_of[g] == self.kv_of[h]) for h in hs}
            for h in hs:
                per_block = F.pad(mass[h], (0, -n % BLOCK)).unflatten(-1, (-1, BLOCK)).sum(-1)  # (B, ⌈n/b⌉) m_J
                per_block = sum(F.pad(per_block, (u, 0))[..., : per_block.shape[-1]]            # V_J
                                for u in range(self.vote_next[h] + 1))
                top = torch.topk(per_block, min(-(-self.kept[h] // BLOCK), per_block.shape[-1]), -1)
                keys = block_keys(torch.where(top.values > 0, top.indices, -1), n)              # (B, P'), −1: none
                keys = keys.masked_fill(taken[h].gather(-1, keys.clamp_min(0)), -1)             # distinct from the rest
                voted[:, h, : keys.shape[-1]] = keys
        return voted

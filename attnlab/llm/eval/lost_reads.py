"""What a head reads at one row: full attention's weights, and the keys a method's plan lets each head read there.

    A^full_lh[q, ·]     full attention's row q (the model's own attention up to q, then row q with the eager
                        implementation, which returns the weights)
    S^M_lh(q)           under a method M: a prompt row reads the prefill's support (``prefill_row_reads``: band,
                        columns, diagonals, key blocks, tail — ``backend.dense_support`` for one row); a decoding step
                        reads band or whole cache, columns, held blocks, voted keys and pages read back, on its own
                        cache after the method's compaction (``decode_step``), each key at its position
    rank_h(P)           a read-back page P the decoding step did not choose for head h: its rank among the candidate
                        pages C_h(i) (``pages``) by Quest's bound U_{h,P}(q_i), the order read-back chooses by (all
                        K pages, or K − k with ``mean_pages`` = k, the other k by the mean key); by
                        its best key's score max_{j ∈ P∖T_h} q_i·k_j, the order h's own attention would rank it; and
                        by its mean key q_i·k̄_P (k̄_P = mean of k_j, j ∈ P∖T_h) — a page the score ranks 1st and the
                        bound far below K is lost to the bound's looseness, not to K

The method runs as it does in ``attnlab eval`` (``Method.applied``, its cache); each layer's runner is given the
subclass ``_reading(its class)``, which keeps what the seam was asked to read (``_Capture``: the backend of the step
with its ``allowed`` kept) and runs the step unchanged.  ``method_row`` turns that into a verdict per head
(``lost_prompts`` writes them).
"""

from __future__ import annotations

import torch

from attnlab.errors import UserError
from attnlab.llm.execution.backend import AttentionBackend
from attnlab.llm.execution.page_table import allowed_of
from attnlab.llm.execution.pages import page_upper_bound
from attnlab.llm.plans.plan import FULL
from attnlab.support import column_mask

__all__ = ["full_row", "method_row", "prefill_row_reads", "role_of"]


@torch.no_grad()
def full_row(model, ids: list[int], q: int, n: int):
    """Full attention's weights of row q, (L, H, q + 1), its argmax token at row q and at row n − 1 ≤ q (the prompt's
    last row, that predicts the answer's first token): the model's own attention on ids[:q] into a cache (keeping the
    logits of rows n − 1 … q − 1), then row q alone with the eager implementation (which returns the weights; a sliding
    layer's over its window, the keys before it at 0)."""
    from transformers import DynamicCache

    if not 0 < n <= q + 1:
        raise ValueError(f"full_row: the prompt's last row n − 1 = {n - 1} must lie in 0 … q = {q}")
    x = torch.tensor([ids[: q + 1]])
    cache = DynamicCache(config=model.config)
    if q:                                                              # rows n − 1 … q − 1 (at least one) kept
        prefix = model(input_ids=x[:, :q], cache=cache, use_cache=True, logits_to_keep=max(q - n + 1, 1)).logits
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        out = model(input_ids=x[:, q:], cache=cache, use_cache=True, output_attentions=True)
    finally:
        model.set_attn_implementation(before)
    # a sliding layer's cache holds its window only: its weights are over the last keys, the earlier ones read 0
    rows = [torch.nn.functional.pad(a[0, :, -1].float(), (q + 1 - a.shape[-1], 0)) for a in out.attentions]
    at_q = int(out.logits[0, -1].argmax())
    return torch.stack(rows), at_q, (at_q if n - 1 == q else int(prefix[0, 0].argmax()))


# ---- what the method lets a head read ----------------------------------------------------------------------------
def prefill_row_reads(parts, i: int, n: int) -> dict[str, torch.Tensor]:
    """S_h(i) of a prefill's ``PrefillParts`` at row i, by part: {part: (B, H, n) bool} (band, column, diagonal, key
    block, tail), the definitions of ``backend.dense_support`` for one row."""
    B, H = parts.columns.shape[:2]
    dev = parts.columns.device
    j = torch.arange(n, device=dev)
    causal = (j <= i).view(1, 1, n)
    w = torch.tensor(parts.w, device=dev).view(1, H, 1)
    out = {"band": (((w == FULL) | (i - j <= w)) & causal).expand(B, H, n).clone()}

    def hit(index):                                       # (B, H, X) positions, −1 / out of range: none → (B, H, n)
        t = torch.zeros(B, H, n + 1, dtype=torch.bool, device=dev)
        t.scatter_(-1, torch.where((index >= 0) & (index < n), index, n), True)
        return t[..., :n] & causal

    out["column"] = hit(parts.columns)
    lines = torch.tensor([not k for k in parts.block_counts], device=dev).view(1, H, 1)
    out["diagonal"] = hit(i + parts.diagonals) & lines if parts.diagonals.shape[-1] else torch.zeros_like(out["band"])
    if parts.blocks.shape[-1]:
        K_h = torch.tensor(parts.block_counts, device=dev).view(1, H, 1)
        own = torch.arange(parts.blocks.shape[-1], device=dev).view(1, 1, -1) < K_h                      # (1, H, K)
        chosen = torch.where(own & (parts.blocks[:, :, i // parts.block] >= 0),
                             parts.blocks[:, :, i // parts.block], -1)
        blk = torch.zeros(B, H, -(-n // parts.block) + 1, dtype=torch.bool, device=dev)
        blk.scatter_(-1, torch.where(chosen >= 0, chosen, blk.shape[-1] - 1), True)
        out["key block"] = blk[..., j // parts.block] & causal
    else:
        out["key block"] = torch.zeros_like(out["band"])
    out["tail"] = ((i >= n - torch.tensor(parts.tails, device=dev)).view(1, H, 1) & causal).expand(B, H, n)
    return out


class _Capture(AttentionBackend):
    """The seam's backend of a step, with what it was asked to read kept (``allowed``)."""

    name = "capture"

    def __init__(self, inner: AttentionBackend):
        self.inner, self.allowed, self.called = inner, None, False

    def prefill(self, parts, q, k, v, scaling):
        return self.inner.prefill(parts, q, k, v, scaling)

    def decode(self, q, k, v, scaling, table=None, pages=None):
        self.allowed, self.called = None if table is None else allowed_of(table, k.shape[2]), True
        return self.inner.decode(q, k, v, scaling, table, pages)

    def decode_fused(self, *args, **kwargs):
        return self.inner.decode_fused(*args, **kwargs)


_READING: dict[type, type] = {}


def _reading(cls: type) -> type:
    """``cls`` (a method's ``LayerRunner``) that also keeps what its heads read: the prefill's parts, held and voted
    keys; while ``watch`` is set, a decoding step's keys read per query head and position (``read``, ``probs``) and
    the positions its cache holds (``resident``, ``stored``)."""
    if cls in _READING:
        return _READING[cls]

    class Reading(cls):
        watch = False

        def prefill(self, q, k, v, scaling):
            # the last row's query, the keys
            self.seen_qk = (q[:, :, -1:], k, scaling)
            return super().prefill(q, k, v, scaling)

        def parts(self, columns, diagonals, blocks, n):
            self.seen_parts = super().parts(columns, diagonals, blocks, n)
            return self.seen_parts

        def last_block_keys(self, blocks, n):
            self.seen_held = super().last_block_keys(blocks, n)
            return self.seen_held

        def vote(self, q, k, scaling, held, n):
            self.seen_voted = super().vote(q, k, scaling, held, n)
            return self.seen_voted

        def decode(self, q, k, v, scaling, q_pos, k_pos, state, flags=None, kv=None, summaries=None):
            # q: (B, H_s·r, t, d_k), k: (B, H_s, L, d_k) at k_pos (B, H_s, L)
            mine, self.backend = self.backend, _Capture(self.backend_of(q))
            try:
                out = super().decode(q, k, v, scaling, q_pos, k_pos, state, flags, kv, summaries)
                seam = self.backend
            finally:
                self.backend = mine
            # a step that did not reach the seam ran the fused native step, which reads band ∪ columns (no pages)
            flags = self.column_flags(k_pos, state, kv) if flags is None else flags
            allowed = seam.allowed if seam.called else self.allowed(q_pos, k_pos, flags, kv)
            if self.watch:
                s = self._note(q, k, scaling, k_pos, allowed, kv)
                if self.pages:
                    self._note_pages(q, k, k_pos, kv, s, state)
            return out

        def _note_pages(self, q, k, k_pos, kv, s, state):
            """rank_h(P) of every page for each query head h of this step (module docstring): (bound rank, score rank,
            mean-key rank, |C_h(i)|) per page, 1-based, into ``self.page_ranks[h]`` (a page outside C_h(i): rank 0).
            s (B, H_s, r, L): the step's scores q·k · scaling (``_note``); a page's mean key ranks as the mean of its
            keys' scores (q·k̄_P = mean_j q·k_j)."""
            B, H_s, L = k_pos.shape
            r, i, page = q.shape[1] // H_s, self.m - 1, self.page
            P = -(-self.m // page)
            hq = self.query_heads(kv).tolist()
            # (H_s·r,) band per query head
            w = self.per_kv(self.w_read, kv).reshape(-1).tolist()
            # (B, H_s·r, g), −1: empty
            columns = state.decode_columns
            cols = columns[:, hq] if columns is not None else None
            for x, h in enumerate(hq):
                # (B, L) its KV head's keys
                pos = k_pos[:, x // r]
                if cols is not None:                                                             # U over P ∖ T_h
                    is_col = column_mask(cols[:, x : x + 1].to(pos.device), self.m)[:, 0]       # (B, m)
                    pos = torch.where((pos >= 0) & is_col.gather(-1, pos.clamp_min(0)), -1, pos)
                at = torch.where(pos >= 0, pos // page, P).cpu()                                # (B, L) page, P: none
                U = torch.full((B, P), float("-inf"))
                Ux = page_upper_bound(q[:, x : x + 1, -1:].float(), k[:, x // r : x // r + 1].float(),
                                      pos[:, None], page)
                U[:, : Ux.shape[-1]] = Ux[:, 0, 0, :P].cpu()                                    # (B, P) U_P
                sx = s[:, x // r, x % r].cpu()                                                   # (B, L)
                S = torch.full((B, P + 1), float("-inf")).scatter_reduce(-1, at, sx, "amax")[:, :P]   # (B, P) max q·k
                count = torch.zeros(B, P + 1).scatter_add_(-1, at, torch.ones(at.shape))
                mean = torch.zeros(B, P + 1).scatter_add_(-1, at, sx)[:, :P] / count[:, :P].clamp_min(1)   # q·k̄_P
                band = w[x] if w[x] != FULL else i + 1
                outside = torch.zeros(B, P + 1, dtype=torch.bool).scatter_(
                    -1, torch.where((pos >= 0) & (i - pos > band), pos // page, P).cpu(), True)[:, :P]   # C_h(i)
                ranks = []
                for vals in (U, S, mean):
                    v = vals.masked_fill(~outside, float("-inf"))
                    ranks.append(torch.where(outside, (v[:, None, :] > v[:, :, None]).sum(-1) + 1, 0))   # (B, P)
                self.page_ranks[h] = (ranks[0][0], ranks[1][0], ranks[2][0], int(outside[0].sum()))

        def _note(self, q, k, scaling, k_pos, allowed, kv):
            """Adds the step's reads and weights to ``read``, ``probs`` (and ``resident`` without a PlanCache); returns
            its scores q·k · scaling, (B, H_s, r, L)."""
            B, H_s, L = k_pos.shape
            r = q.shape[1] // H_s
            hq = self.query_heads(kv).to(q.device)
            if self.cache is None:   # no PlanCache (a method's DynamicCache): every key is resident
                at = torch.where(k_pos >= 0, k_pos, self.m)
                g = slice(None) if kv is None else kv.cpu()
                hit = torch.zeros(B, H_s, self.m + 1, dtype=torch.bool).scatter_(-1, at, True)   # (B, H_s, m + 1)
                self.resident[:, g] |= hit[..., : self.m]
            s = (q[:, :, -1:].view(B, H_s, r, 1, -1).float()
                 @ k.float()[:, :, None].transpose(-1, -2)).squeeze(-2) * scaling
            ok = (k_pos >= 0)[:, :, None].expand(B, H_s, r, L)
            ok = ok & (allowed[..., -1, :] if allowed is not None else True)                  # (B, H_s, r, L)
            p = torch.softmax(s.masked_fill(~ok, float("-inf")), -1).nan_to_num(0.0)
            pos = torch.where(ok, k_pos[:, :, None].expand_as(ok), self.m).reshape(B, H_s * r, L)
            hit = torch.zeros(B, len(hq), self.m + 1, dtype=torch.bool).scatter_(-1, pos, True)   # (B, |hq|, m + 1)
            self.read[:, hq] |= hit[..., : self.m]
            mass = torch.zeros(B, len(hq), self.m + 1).scatter_add_(-1, pos, p.reshape(B, H_s * r, L))
            self.probs[:, hq] += mass[..., : self.m]
            return s

        def decode_parts(self, q, parts, scaling, q_pos, state, summaries=None):
            if self.watch:   # every part with its store joined: the same S_h(i) (decode_step), each key at its position
                for p in self.cache().layers[self.layer_idx].parts(resident=False):
                    hq = self.query_heads(p.kv).to(q.device)
                    stored = p.stored if p.stored is not None else torch.zeros_like(p.positions, dtype=torch.bool)
                    for mask, into in ((~stored, self.resident), (stored, self.stored)):
                        at = torch.where(mask & (p.positions >= 0), p.positions, self.m)
                        hit = torch.zeros(at.shape[0], at.shape[1], self.m + 1, dtype=torch.bool).scatter_(-1, at, True)
                        into[:, p.kv.cpu()] |= hit[..., : self.m]
                    mine = summaries.of_heads(p.kv.to(q.device), hq) if summaries is not None else None
                    self.decode(q[:, hq], p.keys, p.values, scaling, q_pos, p.positions, state, p.flags, kv=p.kv,
                                summaries=mine)
            watch, self.watch = self.watch, False
            try:
                return super().decode_parts(q, parts, scaling, q_pos, state, summaries)
            finally:
                self.watch = watch

    Reading.__name__ = Reading.__qualname__ = "Reading" + cls.__name__
    _READING[cls] = Reading
    return Reading


def role_of(runner, h: int, pages: int) -> str:
    """Head h's part in its layer's plan, in words (``LayerPlan``'s fields; a method's own runner named: its step may
    read less than the plan's parts, SnapKV's eviction, Quest's pages — the keys read are the step's own)."""
    base = type(runner).__mro__[1] if type(runner).__name__.startswith("Reading") else type(runner)
    own = "" if base.__name__ == "LayerRunner" else f" ({base.__name__})"
    if runner.is_full(h, 10**9) and not runner.sliding:
        return "full head" + own
    w = runner.effective_w(h, 10**9)
    words = [f"retrieval tail T={runner.tail[h]}"] if runner.tail[h] else []
    words += [f"band w={w}"] + ([f"{len(runner.fixed[h])} fixed + {runner.dynamic[h]} dynamic columns"]
                                 if runner.fixed[h] or runner.dynamic[h] else [])
    words += [f"{runner.blocks[h]} key blocks"] if runner.blocks[h] else []
    words += [f"{runner.slashes[h]} slashes"] if runner.slashes[h] else []
    voted = [f"voted P={runner.vote_size[h]}"] if runner.vote_size[h] else []
    words += voted or (["whole cache at decoding"] if runner.tail[h] else [])
    k_mean = getattr(runner, "mean_pages", 0)
    words += ([f"{pages} pages read back"
               + (f" ({pages - k_mean} by the bound, {k_mean} by the mean key)" if k_mean else "")]
              if pages and bool(runner.reads[h]) else [])
    words += [f"sliding window {runner.sliding}"] if runner.sliding else []
    return ", ".join(words) + own


@torch.no_grad()
def method_row(model, method, forced: list[int], q: int, n: int, needle: list[int],
               other: list[int] | None = None) -> tuple[dict, int, int]:
    """Under ``method`` (prepared at n): per (l, h) its role, the value keys it reads at row q and by which part, the
    mass it puts on them, and what became of those it does not read (and, given ``other``, the positions of another
    needle's value, the mass it puts there: ``mass_other_method``); the method's argmax token at row q and at the
    prompt's last row n − 1 (the answer's first token)."""
    from attnlab.llm.execution.attention import attention_modules

    V, O = torch.tensor(needle), torch.tensor(other) if other else None
    heads = {}
    with method.applied(model):
        runners = [getattr(mod, "attnlab_layer", None) for mod in attention_modules(model)]
        if not any(runners):
            raise UserError(f"--method {method.name}: runs no per-head plan (the model's own attention or its own "
                            f"function): nothing to inspect")
        for r in runners:
            r.__class__ = _reading(type(r))
            r.watch, r.m = False, q + 1
        cache = method.new_cache(model)
        logits = model(input_ids=torch.tensor([forced[:n]]), cache=cache, use_cache=True, logits_to_keep=1).logits
        first = int(logits[0, -1].argmax())
        for l, r in enumerate(runners):
            if q >= n:      # the decoding steps of v_<t: row q is the last one's query
                r.read = torch.zeros(1, r.H, r.m, dtype=torch.bool)
                r.probs = torch.zeros(1, r.H, r.m)
                r.resident = torch.zeros(1, r.H_kv, r.m, dtype=torch.bool)
                r.stored = torch.zeros(1, r.H_kv, r.m, dtype=torch.bool)
                r.page_ranks = {}
        for x in range(n, q + 1):
            for r in runners:
                r.watch = x == q
            logits = model(input_ids=torch.tensor([[forced[x]]]), cache=cache, use_cache=True).logits
        for r in runners:
            r.watch = False
        pages = int(getattr(model.attnlab_plan, "pages", 0))
        for l, r in enumerate(runners):
            heads.update(_layer_verdicts(l, r, q, n, V, pages, O))
    return heads, int(logits[0, -1].argmax()), first


def _layer_verdicts(l: int, r, q: int, n: int, V, pages: int, O=None) -> dict:
    """{(l, h): verdict} of one layer's runner after the step at row q (``method_row``)."""
    out = {}
    if q < n:                                              # a prompt row: the prefill's support
        parts = prefill_row_reads(r.seen_parts, q, n)
        read = torch.stack(list(parts.values())).any(0)[0]                                  # (H, n)
        # (B, H, 1, d_k), (B, H_kv, n, d_k)
        q_last, k, scaling = r.seen_qk
        s = (q_last.float() @ k[:, r.kv_of].float().transpose(-1, -2))[0, :, 0] * scaling   # (H, n)
        probs = torch.softmax(s.masked_fill(~read, float("-inf")), -1)
        resident = stored = None
    else:                                                  # a decoding step: what it read, each key at its position
        read, probs, resident, stored = r.read[0], r.probs[0], r.resident[0], r.stored[0]
        seen = getattr(r, "seen_parts", None)
        cols = {"column": None if seen is None else seen.columns, "held key block": getattr(r, "seen_held", None),
                "voted key": getattr(r, "seen_voted", None)}                                 # each (B, H, ·), −1: empty
        cols = {k: c[0] for k, c in cols.items() if c is not None}
    for h in range(r.H):
        got = read[h, V]
        read_by, not_read = {}, {}
        for j, ok in zip(V.tolist(), got.tolist()):
            g, part, why = int(r.kv_of[h]), None, None
            if q < n:                                      # the prefill's parts at this row, or none
                part = next((name for name, m in parts.items() if bool(m[0, h, j])), None)
                why = None if part else "outside its band, columns, diagonals and key blocks"
            elif ok:                                       # read at the step: by which part
                wd = int(r.w_read[h])
                whole = "whole cache" if bool((read[h] | ~resident[g]).all()) else "chosen by the method's own step"
                part = (whole if wd == FULL else "band" if q - j <= wd else
                        next((k for k, c in cols.items() if bool((c[h] == j).any())), "page read back"))
            else:                                          # not read: where the key is
                page = f", page not chosen{_rank(r, h, j)}" if pages and bool(r.reads[h]) else ""
                why = ("kept, not in its band or columns" + page if bool(resident[g, j]) else
                       f"in the store, page not chosen{_rank(r, h, j)}" if bool(stored[g, j]) else "evicted")
            if part:
                read_by[part] = read_by.get(part, 0) + 1
            else:
                not_read[why] = not_read.get(why, 0) + 1
        out[(l, h)] = {"role": role_of(r, h, pages), "read": int(got.sum()), "read_by": read_by, "not_read": not_read,
                       "mass_method": float(probs[h, V].sum()),
                       **({} if O is None else {"mass_other_method": float(probs[h, O].sum())})}
    return out


def _ordinal(x: int) -> str:
    return f"{x}{'th' if 10 <= x % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(x % 10, 'th')}"


def _rank(r, h: int, j: int) -> str:
    """" (page P: its bound rank of |C| by Quest's bound, its score rank by q·k,
    its rank by q·k̄_P)" for the key j of head h, or "" when the
    step noted no ranks (module docstring, rank_h(P))."""
    got = getattr(r, "page_ranks", {}).get(h)
    if got is None or not int(got[0][j // r.page]):
        return ""
    bound, score, mean, C = got
    P = j // r.page
    return (f" (page {P}: {_ordinal(int(bound[P]))} of {C} by Quest's bound, "
            f"{_ordinal(int(score[P]))} by its best q·k, "
            f"{_ordinal(int(mean[P]))} by its mean key)")

"""MInference's three sparse patterns (Jiang et al. 2024, §3.2) at one budget of K keys per row, run through the
execution seam.

Budget: K = max(2, round(β(n + 1)/2)) keys per query row, so a pattern reads ≈ β of the causal entries.
Each pattern gets the settings that spend the same K:

    Λ-shape (``lambda``)       S(i) = {j < a} ∪ {i − w ≤ j ≤ i},  a = max(1, round(K/9)), w = K − a − 1
                               (the first ``a`` keys + a local window; a : window = 100 : 800 as MInference's
                               searched stream_llm candidate); static.
    vertical-slash (``vs``)    v = ⌊K/2⌋ key columns + s = K − v diagonals, from the last 64 queries of each input
                               (``minference.vertical_slash``).
    block-sparse (``block``)   64×64 blocks: query block t reads its diagonal block and the top k − 1 other key
                               blocks u < t by the pooled score  q̄_t · k̄_u  (q̄_t, k̄_u: mean of the block's rows),
                               per input; k = max(1, round((K + 31.5)/64)) so that the mean row reads
                               64(k − 1) + 32.5 ≈ K keys (the diagonal block is a causal triangle).

Executed through the execution seam (``methods.minference_runner.pattern_parts`` writes each head's pattern as the
seam's ``PrefillParts``: Λ as band w + the first ``a`` keys as columns; vertical-slash as the band of the nearest
slashes + columns + far diagonals; block-sparse as band w = 0 + the chosen key blocks of each 64-row query block),
run by the device's backend.  ``lambda_mask`` and ``block_mask`` draw the supports for the search's recall and for the
tests' masked dense reference.
"""

from __future__ import annotations

import torch

from attnlab.llm.plans.plan import LAST_Q  # the queries that estimate the lines (MInference's last_q)

__all__ = ["BLOCK", "PATTERNS", "block_choice", "block_mask", "budget_keys", "entries", "lambda_mask", "last_rows",
           "settings", "vertical_slash"]

BLOCK = 64                       # MInference's block_size_M = block_size_N
PATTERNS = ("lambda", "vs", "block")
SINK_SHARE = 100 / 900           # Λ: a / K (the reference search's stream_llm candidate: 100 first keys, 800 local)


def budget_keys(budget: float, n: int) -> int:
    """K = max(2, round(β(n + 1)/2)): the keys per row that read ≈ β of the n(n + 1)/2 causal entries."""
    return max(2, int(round(budget * (n + 1) / 2)))


def settings(pattern: str, K: int) -> dict:
    """The settings of ``pattern`` that read K keys per row (module docstring)."""
    if pattern == "lambda":
        a = max(1, int(round(K * SINK_SHARE)))
        return {"sinks": a, "w": max(0, K - a - 1)}
    if pattern == "vs":
        return {"vertical": K // 2, "slash": K - K // 2}
    if pattern == "block":
        return {"blocks": max(1, int(round((K + 31.5) / BLOCK)))}
    raise ValueError(f"pattern: expected one of {', '.join(PATTERNS)}, got {pattern!r}")


def entries(pattern: str, opts: dict, n: int) -> int:
    """Causal entries the pattern reads at length n (an upper bound for vs: its lines may overlap)."""
    i = torch.arange(n)
    if pattern == "lambda":
        a, w = opts["sinks"], opts["w"]                                            # band, then the sinks left of it
        return int((torch.clamp(i + 1, max=w + 1) + torch.clamp(i - w, min=0, max=a)).sum())
    if pattern == "vs":
        return int(torch.minimum(i + 1, torch.tensor(opts["vertical"] + opts["slash"])).sum())
    t = i // BLOCK                                                                 # query block of row i
    others = torch.clamp(t, max=opts["blocks"] - 1)                                # full blocks before the diagonal one
    return int((others * BLOCK + i - t * BLOCK + 1).sum())


FIRST_COLUMNS = 30  # vertical[..., :30] = inf
NEAR_SLASHES = 100  # slash[..., -100:] = inf


def last_rows(q, k, scaling: float):
    """â_rj = softmax_{j ≤ p_r}(q_{p_r}·k_j · scaling) of the last min(64, n) queries: q, k (B, n, d) → (B, nq, n)
    (one head's ``slash_lines.last_query_rows``, in float32)."""
    from attnlab.llm.plans.slash_lines import last_query_rows

    return last_query_rows(q[:, None].float(), k[:, None].float(), scaling, LAST_Q)[:, 0]


def vertical_slash(q, k, scaling: float, v: int, s: int, a=None):
    """The lines of one head estimated from its last queries: q (B, n, d), k (B, n, d) (or their rows ``a`` (B, nq, n)).

    Returns (w, columns (B, v), diagonals (B, s − w − 1)) with the forced lines included; offsets δ ≤ −w − 1.
    """
    from attnlab.llm.plans.slash_lines import slash_mass, top_slashes

    a = last_rows(q, k, scaling) if a is None else a                                # (B, nq, n)
    B, nq, n = a.shape
    vert = a.sum(1)                                                                 # (B, n)
    vert[:, : min(FIRST_COLUMNS, v)] = float("inf")
    cols = torch.topk(vert, min(v, n), -1).indices if v else vert.new_zeros(B, 0, dtype=torch.long)
    near = min(NEAR_SLASHES, s, n)
    w = max(near - 1, 0)
    diags = top_slashes(slash_mass(a), w, max(0, min(s, n) - near))                 # (B, s − w − 1): offsets δ ≤ −w − 1
    return w, cols, diags


def block_choice(q, k, blocks: int):
    """The key blocks of every query block: q, k (B, n, d) → (B, T, blocks) block indices, −1 for an empty slot.

        q̄_t = mean_{i ∈ block t} q_i,  k̄_u = mean_{j ∈ block u} k_j   (the last block: its real rows only)
        chosen(t) = {t} ∪ top_{blocks − 1}{u < t : q̄_t · k̄_u}        T = ⌈n / 64⌉
    """
    B, n, d = q.shape
    T = -(-n // BLOCK)
    pad = T * BLOCK - n
    rows = torch.full((T,), float(BLOCK), device=q.device)
    rows[-1] = BLOCK - pad
    qb = torch.nn.functional.pad(q.float(), (0, 0, 0, pad)).view(B, T, BLOCK, d).sum(2) / rows[:, None]   # (B, T, d)
    kb = torch.nn.functional.pad(k.float(), (0, 0, 0, pad)).view(B, T, BLOCK, d).sum(2) / rows[:, None]   # (B, T, d)
    sc = qb @ kb.transpose(-1, -2)                                                    # (B, T, T) pooled scores
    t = torch.arange(T, device=q.device)
    sc = sc.masked_fill(t[None, :] > t[:, None], float("-inf"))                       # causal blocks u ≤ t
    sc = sc.masked_fill(torch.eye(T, dtype=torch.bool, device=q.device), float("inf"))  # the diagonal block always
    top = torch.topk(sc, min(blocks, T), -1)                                          # (B, T, min(blocks, T))
    out = torch.where(top.values > float("-inf"), top.indices, torch.full_like(top.indices, -1))
    return torch.nn.functional.pad(out, (0, blocks - out.shape[-1]), value=-1)


def block_mask(chosen, n: int):
    """1[j's block ∈ chosen(i's block)] ∧ j ≤ i: chosen (B, T, k) → (B, n, n) bool."""
    B, T, _ = chosen.shape
    pos = torch.arange(n, device=chosen.device)
    hit = torch.zeros(B, T, T + 1, dtype=torch.bool, device=chosen.device)
    hit.scatter_(-1, torch.where(chosen < 0, T, chosen), True)                       # slot T: the empty slots
    m = hit[:, pos // BLOCK][..., pos // BLOCK]                                       # (B, n, n)
    return m & (pos[None, :] <= pos[:, None])


def lambda_mask(n: int, sinks: int, w: int, device=None):
    """Λ-shape support: (n, n) bool, j < sinks ∨ i − w ≤ j, and j ≤ i."""
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    return (j <= i) & ((j < sinks) | (i - j <= w))

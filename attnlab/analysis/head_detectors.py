"""Head detectors: how much of a head's attention falls on a detection pattern (TransformerLens's ``detect_head``).

For one sequence of token ids t_0 … t_{n−1}, a head's weights A (n × n, rows
sum to 1) and a 0/1 detection pattern P (n × n, lower triangular), the score
is TransformerLens's ``"mul"`` measure (``transformer_lens/head_detector.py``,
``compute_head_attention_similarity_score``):

    score(A, P) = Σ_ij Ã_ij P_ij / Σ_ij Ã_ij

where Ã is A with column 0 set to 0 when ``exclude_bos`` and the diagonal set
to 0 when ``exclude_current`` (TransformerLens's ``exclude_bos`` and
``exclude_current_token``, both off by default there and here).  Without
exclusions Σ_ij Ã_ij = n, so the score is the mean over rows of the mass on the
pattern.  Over many sequences the score is the mean of the per-sequence scores
(as ``detect_head`` on a list).  The patterns (row i = query, column j = key):

* **previous-token**   P_ij = [j = i − 1]
* **duplicate-token**  P_ij = [t_j = t_i  and  j < i]                (an earlier copy of the current token)
* **induction**        P_ij = [t_{j−1} = t_i  and  1 ≤ j ≤ i  and  j − 1 < i]
                       (the token after an earlier copy of the current token; the
                       duplicate pattern shifted one key to the right, column 0 empty)
* **sink**             P_ij = [j = 0]                                (mass on the first token; never excluded)
* **retrieval**        P_ij = [i ∈ Q  and  j ∈ V]  counted on the rows i ∈ Q only:
                       score = Σ_{i∈Q} Σ_{j∈V} A_ij / Σ_{i∈Q} Σ_j A_ij = mean_{i∈Q} Σ_{j∈V} A_ij,
                       with V the positions of a needle's value tokens and Q the
                       query rows that predict the copied answer tokens under teacher
                       forcing (Wu et al. 2024, "Retrieval Head Mechanistically
                       Explains Long-Context Factuality": attention from the copied
                       answer back to the needle; here the mass, not the top-1 hit).

The standard input for the first three is repeated random tokens: BOS then a
random segment of T tokens repeated R times (``repeated_random_tokens``); a
previous-token head scores ≈ 1 everywhere, an induction head ≈ 1 on the rows of
the second and later copies (≈ (R−1)/R of the rows).

Everything is computed one block of query rows at a time — the block
``p[b, h, i0:i1, j0:j1]`` a capture hands over (``attnlab.llm.heads.block_attention``)
— and for all heads at once: ``DetectorSums.observe`` is a streaming observer,
``detect_heads`` applies it to captured ``AttentionMaps``.

Thresholds (a head is *named* when its score is at least the threshold):
previous-token, duplicate-token and induction 0.4 of the score's ceiling — the
cut-off of TransformerLens's tutorial detectors, taken as a share of the rows
that can hold the pattern: on R copies only the rows of copies 2…R can, so a
perfect duplicate-token or induction head scores (R−1)/R (0.5 for two copies,
as ``detect_head`` counts every row) and the threshold is 0.4·(R−1)/R
(``thresholds(R)``); sink 0.5 (``RoleThresholds.sink_min`` of
``attnlab.analysis.roles``); retrieval 0.1 (Wu et al.'s cut-off on their
retrieval score).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from attnlab.analysis.detector_names import DETECTORS, REPEAT_DETECTORS, THRESHOLDS, parse_detectors, thresholds
from attnlab.masks import causal

__all__ = ["DETECTORS", "REPEAT_DETECTORS", "THRESHOLDS", "thresholds", "DetectorSums", "pattern_rows", "detect_heads",
           "repeated_random_tokens", "named_heads", "parse_detectors"]   # the names and thresholds: detector_names.py


def repeated_random_tokens(vocab: Sequence[int], T: int, R: int = 2, count: int = 1, *, bos: int | None = None,
                           seed: int = 0) -> np.ndarray:
    """``count`` sequences [bos] + x + x + … (R copies of x, T random ids drawn uniformly from ``vocab``):
    (count, [1] + R·T)."""
    vocab = np.asarray(list(vocab), dtype=np.int64)
    if T < 1 or R < 1 or count < 1 or vocab.size < 2:
        raise ValueError(f"repeated_random_tokens: need T, R, count >= 1 and 2+ ids, got T={T}, R={R}, count={count}, "
                         f"{vocab.size} ids")
    rng = np.random.default_rng(seed)
    x = vocab[rng.integers(0, vocab.size, size=(count, T))]  # (count, T)
    ids = np.tile(x, (1, R))  # (count, R·T)
    if bos is not None:
        ids = np.concatenate([np.full((count, 1), int(bos), np.int64), ids], 1)
    return ids


def pattern_rows(name: str, ids: torch.Tensor, i0: int, i1: int, j0: int, j1: int,
                 needle: torch.Tensor | None = None, queries: torch.Tensor | None = None) -> torch.Tensor:
    """Rows i0:i1, keys j0:j1 of detector ``name``'s pattern P (module docstring) for each sequence: (B, r, m) bool.

    ``ids`` (B, n) token ids (any integers: equal ids = same token).  For "retrieval",
    ``needle`` (B, n) bool marks V and ``queries`` (B, n) bool marks Q.
    """
    # ids: (B, n) → P: (B, r = i1 − i0, m = j1 − j0)
    i = torch.arange(i0, i1)[:, None]  # (r, 1)
    j = torch.arange(j0, j1)[None, :]  # (1, m)
    if name == "previous-token":
        return (j == i - 1)[None].expand(ids.shape[0], -1, -1)
    if name == "sink":
        return (j == 0)[None].expand(ids.shape[0], -1, -1)
    if name == "duplicate-token":
        return (ids[:, i0:i1, None] == ids[:, None, j0:j1]) & (j < i)[None]
    if name == "induction":  # t_{j−1} = t_i with 1 ≤ j ≤ i (TransformerLens: duplicate shifted right, tril)
        prev = torch.cat([torch.full_like(ids[:, :1], -1), ids[:, :-1]], 1)  # t_{j−1}; no token before j = 0
        return (ids[:, i0:i1, None] == prev[:, None, j0:j1]) & ((j >= 1) & causal(i, j))[None]
    if name == "retrieval":
        if needle is None or queries is None:
            raise ValueError("retrieval: needs the needle and query masks")
        return queries[:, i0:i1, None] & needle[:, None, j0:j1]
    raise ValueError(f"detectors: unknown detector {name!r} (expected one of {', '.join(DETECTORS)})")


@dataclass
class DetectorSums:
    """Numerator Σ Ã⊙P and denominator Σ Ã per sequence, layer, head and detector, fed one block of rows at a time.

    ``observe(layer, i0, j0, p, allowed=None, entropy=None)`` has the signature of
    ``attnlab.llm.heads.block_attention``'s observer, with p (B, H, r, m) the softmax rows
    i0:i0+r over keys j0:j0+m; ``scores()`` gives {name: (L, H)}, the mean over the B sequences.
    """

    names: tuple[str, ...]
    ids: torch.Tensor                    # (B, n) token ids
    n_layers: int
    n_heads: int
    exclude_bos: bool = False
    exclude_current: bool = False
    needle: torch.Tensor | None = None   # (B, n) bool: V (retrieval)
    queries: torch.Tensor | None = None  # (B, n) bool: Q (retrieval)
    layer_of: Callable[[int], int] | None = None  # model layer → row of the result (default: itself)

    def __post_init__(self):
        self.ids = torch.as_tensor(self.ids, dtype=torch.long)
        B = self.ids.shape[0]
        shape = (len(self.names), B, self.n_layers, self.n_heads)
        self.num = torch.zeros(shape, dtype=torch.float64)  # Σ_ij Ã_ij P_ij
        self.den = torch.zeros(shape, dtype=torch.float64)  # Σ_ij Ã_ij  (retrieval: rows i ∈ Q only)
        self.rows_seen = torch.zeros(self.n_layers, dtype=torch.long)

    def observe(self, layer, i0: int, j0: int, p: torch.Tensor, allowed=None, entropy=None) -> None:
        # p: (B, H, r, m)
        l = layer if self.layer_of is None else self.layer_of(layer)
        if l is None:
            return
        B, H, r, m = p.shape
        i1, j1 = i0 + r, j0 + m
        a0 = p.detach().to(torch.float64)  # A
        i = torch.arange(i0, i1)[:, None]
        j = torch.arange(j0, j1)[None, :]
        keep = torch.ones(r, m, dtype=torch.bool)
        if self.exclude_bos:
            keep &= j != 0
        if self.exclude_current:
            keep &= j != i
        a = a0 * keep  # Ã (B, H, r, m)
        row_mass = a.sum(-1)  # (B, H, r)
        for k, name in enumerate(self.names):
            P = pattern_rows(name, self.ids, i0, i1, j0, j1, self.needle, self.queries).to(torch.float64)  # (B, r, m)
            if name == "sink":  # the first token's mass itself: no exclusion applies
                self.num[k, :, l] += torch.einsum("bhrm,brm->bh", a0, P)
                self.den[k, :, l] += a0.sum((-1, -2))
                continue
            self.num[k, :, l] += torch.einsum("bhrm,brm->bh", a, P)
            if name == "retrieval":
                self.den[k, :, l] += torch.einsum("bhr,br->bh", row_mass, self.queries[:, i0:i1].to(torch.float64))
            else:
                self.den[k, :, l] += row_mass.sum(-1)
        self.rows_seen[l] += r

    def per_sequence(self) -> dict[str, np.ndarray]:
        """{name: (B, L, H)} score of each sequence (0 where a head put no mass on the counted rows)."""
        s = torch.where(self.den > 0, self.num / self.den.clamp_min(1e-300), torch.zeros_like(self.num))
        return {name: s[k].numpy() for k, name in enumerate(self.names)}

    def scores(self) -> dict[str, np.ndarray]:
        """{name: (L, H)}: the mean over sequences of the per-sequence scores."""
        return {name: s.mean(0) for name, s in self.per_sequence().items()}


def detect_heads(maps, detectors: Sequence[str] = REPEAT_DETECTORS, *, kind: str | None = None,
                 exclude_bos: bool = False, exclude_current: bool = False) -> dict[str, np.ndarray]:
    """{detector: (L, H)} over the sentences of ``maps`` (``AttentionMaps``), for one self-attention ``kind``.

    The tokens are the maps' token strings (equal strings = same token); each
    sentence is one sequence of ``DetectorSums``; the score is the mean over
    sentences.  "retrieval" needs needle positions and is not computed here
    (``attnlab.llm.heads.head_scan.retrieval_scores``).
    """
    from attnlab.analysis.attention_maps import KIND_SIDES

    kinds = [k for k in maps.kinds if KIND_SIDES[k][0] == KIND_SIDES[k][1]]
    kind = kind or ("decoder" if "decoder" in kinds else (kinds[0] if kinds else None))
    if kind not in kinds:
        raise ValueError(f"kind: detectors need self-attention (encoder or decoder) in the maps, got {kind!r} (kinds: "
                         f"{', '.join(maps.kinds)})")
    names = tuple(detectors)
    if "retrieval" in names:
        raise ValueError("detectors: retrieval needs needle prompts (attnlab.llm.heads.head_scan.retrieval_scores), "
                         "not captured maps")
    L, H = maps.shape(kind)
    total = {d: np.zeros((L, H)) for d in names}
    for s in maps:
        toks = s.query_tokens(kind)
        _, ids = np.unique(np.asarray(toks, dtype=object).astype(str), return_inverse=True)
        sums = DetectorSums(names, torch.as_tensor(ids[None]), L, H, exclude_bos, exclude_current)
        w = torch.as_tensor(s.weights[kind])  # (L, H, n, n)
        for l in range(L):
            sums.observe(l, 0, 0, w[l][None])
        for d, v in sums.scores().items():
            total[d] += v
    return {d: v / len(maps) for d, v in total.items()}


def named_heads(scores: dict[str, np.ndarray], thresholds: dict[str, float] = THRESHOLDS,
                layers: Sequence[int] | None = None) -> list[dict]:
    """The heads whose score reaches their detector's threshold: [{layer, head, detector, score}],
    best first per detector."""
    out = []
    for d, s in scores.items():
        s = np.asarray(s)
        ls, hs = np.nonzero(s >= thresholds[d])
        rows = sorted(zip(ls.tolist(), hs.tolist()), key=lambda lh: -s[lh])
        out += [{"layer": int(layers[l]) if layers is not None else int(l), "head": int(h), "detector": d,
                 "score": round(float(s[l, h]), 6)} for l, h in rows]
    return out

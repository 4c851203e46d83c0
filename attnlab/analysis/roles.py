"""What does each head do?  Scores and one role per head (after Voita et al. 2019).

For a kind of attention, sentences s, layers l, heads h, the weights
w[s, l, h, i, j] (query i, key j).  "Word" tokens are the real, non-special
tokens (special = BOS/EOS/CLS/SEP/PAD, as flagged by the capture); a_i =
argmax_j w_ij is the key a query points to (over all real keys).  Every score
is a mean over the word queries i of all sentences, unless said otherwise:

* **confidence** = mean_i max_{j word} w_ij — the mean maximum weight, EOS
  (and every special key) excluded (Voita et al.: "average of its maximum
  attention weight excluding EOS").
* **positional** = max_o P(a_i − i = o) — the fraction of tokens whose maximum
  falls at the single most common relative offset o (``offset``; −1 previous,
  0 itself, +1 next).  Role "positional" when ≥ ``positional_min`` = 0.9
  (Voita et al.).
* **rare_token** = fraction of sentences in which, for most (> 1/2) of the word
  queries, a_i is the sentence's rarest word token; **rare_token_2** the same
  with "one of its two rarest".  Rarity = frequency in a given corpus
  (``frequencies``; default: the token counts of the sentences themselves);
  a token string unseen in the corpus has frequency 0; ties between different
  strings are broken by first occurrence; every occurrence of the rarest
  string counts.  Sentences with fewer than 2 (resp. 3) word tokens are left
  out.  Role "rare-token" when rare_token ≥ ``rare_min`` = 0.5.
* **sink** (column) = mean_s max_{j ∈ C_s} c_j with c_j = mean_i w_ij (all real
  queries): the attention mass on one key column, where C_s = the special
  tokens (EOS, SEP, CLS, BOS), the punctuation tokens and, for causal
  ("decoder") attention, the first token.  ``sink_token`` = the token of that
  column most often.  Role "sink" when ≥ ``sink_min`` = 0.5.
* **syntactic** (only with gold ``relations``: per sentence, triples
  (i, j, label) of query and key positions, e.g. dependent → head, or target →
  aligned source word): for each label r, acc_r = P(a_i = j) over its pairs
  and the baseline b_r = the accuracy of always answering the most frequent
  relative position of r, max_o P(j − i = o).  For self-attention each
  relation is also scored reversed (label "r⁻¹": head → dependent).
  ``syntactic`` = acc_r* and ``syntactic_baseline`` = b_r* for the relation r*
  (with ≥ ``min_relations`` = 10 pairs) maximising acc_r − b_r.  Role
  "syntactic" when acc_r* − b_r* ≥ ``syntactic_margin`` = 0.10 (10 points).
* **entropy** = mean_i −Σ_j w_ij ln w_ij (nats), over all real queries;
  ``entropy_norm`` divides each row by ln(number of keys the row can see).
  Role "broad" when entropy_norm ≥ ``broad_min`` = 0.8.

One role per head, first that applies: positional, syntactic, rare-token,
sink, broad, else "other" (``decide_roles``).  All scores are computed at once
for all heads, by small scorers (``Confidence``, ``Positional``, ``RareToken``,
``Sink``, ``Entropy``, ``Syntactic``: ``update(chunk)`` then ``scores()``) over
one shared pass (``_chunks``): sentences padded into a batch (B, L, H, N, M)
with masks and a_i, in chunks of sentences to bound memory.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from attnlab.analysis.attention_maps import KIND_SIDES, AttentionMaps
from attnlab.analysis.gold_relations import (  # re-exported: the syntactic role's gold relations
    SUBWORD_MARKERS,
    corpus_relations,
    read_conllu,
    token_relations,
    word_of_tokens,
)

__all__ = [
    "HeadRole", "RoleThresholds", "head_roles", "token_frequencies", "is_punctuation", "ROLES",
    "word_of_tokens", "token_relations", "corpus_relations", "read_conllu",
]

ROLES = ("positional", "syntactic", "rare-token", "sink", "broad", "other")


@dataclass(frozen=True)
class RoleThresholds:
    """Thresholds of the role decision (defaults documented in the module docstring)."""

    positional_min: float = 0.9
    syntactic_margin: float = 0.10
    rare_min: float = 0.5
    sink_min: float = 0.5
    broad_min: float = 0.8
    min_relations: int = 10


@dataclass(frozen=True)
class HeadRole:
    """All the scores of one head and its role."""

    layer: int
    head: int
    kind: str
    role: str
    confidence: float
    positional: float
    offset: int
    rare_token: float
    rare_token_2: float
    sink: float
    sink_token: str
    entropy: float
    entropy_norm: float
    syntactic: float | None = None
    syntactic_baseline: float | None = None
    syntactic_relation: str | None = None

    def to_dict(self) -> dict:
        """JSON-ready dict; the syntactic keys only when gold relations were given."""
        d = asdict(self)
        if self.syntactic is None:
            for k in ("syntactic", "syntactic_baseline", "syntactic_relation"):
                d.pop(k)
        return d


def token_frequencies(token_lists: Iterable[Sequence[str]]) -> Counter:
    """Corpus frequency of every token string: f(t) = #occurrences of t."""
    c: Counter = Counter()
    for toks in token_lists:
        c.update(toks)
    return c


def is_punctuation(token: str) -> bool:
    """True for a token made only of punctuation (after removing subword markers such as ## Ġ ▁)."""
    t = token
    for m in SUBWORD_MARKERS:
        t = t.replace(m, "")
    return bool(t) and all(unicodedata.category(ch).startswith("P") for ch in t)


def head_roles(
    maps: AttentionMaps,
    kinds: Sequence[str] | str | None = None,
    *,
    frequencies: Mapping[str, int] | None = None,
    relations: Sequence[Sequence[tuple[int, int, str]]] | None = None,
    thresholds: RoleThresholds = RoleThresholds(),
    chunk: int = 128,
) -> list[HeadRole]:
    """Scores and role of every head of ``kinds`` (default: all kinds of ``maps``); see the module docstring.

    ``relations[s]``: gold (query position, key position, label) triples of
    sentence s, in the positions of the kind's query and key tokens (for
    several kinds, they apply to each kind whose sides fit).  Returns a list
    ordered by kind, layer, head.
    """
    if isinstance(kinds, str):
        kinds = [kinds]
    kinds = list(maps.kinds if kinds is None else kinds)
    if relations is not None and len(relations) != len(maps):
        raise ValueError(f"relations: {len(relations)} sentences of relations for {len(maps)} sentences of attention")
    if chunk < 1:
        raise ValueError(f"chunk: must be ≥ 1, got {chunk}")
    out: list[HeadRole] = []
    for kind in kinds:
        out.extend(_kind_roles(maps, kind, frequencies, relations, thresholds, chunk))
    return out


# ---------------------------------------------------------------------------------------------
def _token_masks(maps: AttentionMaps, kind: str, freqs: Mapping[str, int]):
    """Per-sentence masks (S, N) / (S, M): word queries, word keys, rarest, two rarest, sink candidates; token ids."""
    q_side, k_side = KIND_SIDES[kind]
    S = len(maps)
    N = max(len(s.tokens[q_side]) for s in maps)
    M = max(len(s.tokens[k_side]) for s in maps)
    q_word = np.zeros((S, N), bool)
    k_word = np.zeros((S, M), bool)
    rare1 = np.zeros((S, M), bool)
    rare2 = np.zeros((S, M), bool)
    cand = np.zeros((S, M), bool)
    vocab: dict[str, int] = {}
    k_ids = np.zeros((S, M), np.int64)
    for s, sent in enumerate(maps):  # input preparation: one pass over tokens
        qs, ks = sent.special_mask(q_side), sent.special_mask(k_side)
        q_word[s, : len(qs)] = ~qs
        keys = sent.tokens[k_side]
        k_word[s, : len(ks)] = ~ks
        k_ids[s, : len(keys)] = [vocab.setdefault(t, len(vocab)) for t in keys]
        cand[s, : len(ks)] = ks | np.array([is_punctuation(t) for t in keys], bool)
        if kind == "decoder":
            cand[s, 0] = True
        words = [t for t, sp in zip(keys, ks) if not sp]
        distinct = list(dict.fromkeys(words))  # first-occurrence order breaks ties
        ranked = sorted(distinct, key=lambda t: freqs.get(t, 0))  # stable sort
        if len(words) >= 2:
            rare1[s, : len(keys)] = [(t == ranked[0]) and not sp for t, sp in zip(keys, ks)]
        if len(words) >= 3 and len(ranked) >= 2:
            rare2[s, : len(keys)] = [(t in ranked[:2]) and not sp for t, sp in zip(keys, ks)]
    id_to_token = list(vocab)
    return q_word, k_word, rare1, rare2, cand, k_ids, id_to_token


@dataclass
class Chunk:
    """What every scorer reads, computed once per chunk of sentences: the one shared pass over the weights."""

    idx: list[int]        # the sentences of the chunk
    w: np.ndarray         # (B, L, H, N, M) float64, zero-padded to the longest sentence of the maps
    q_len: np.ndarray     # (B,) real queries
    k_len: np.ndarray     # (B,) real keys
    q_real: np.ndarray    # (B, N)
    k_real: np.ndarray    # (B, M)
    qw: np.ndarray        # (B, N) word queries
    kw: np.ndarray        # (B, M) word keys
    arg: np.ndarray       # (B, L, H, N) a_i = argmax_j w_ij over the real keys
    lh: np.ndarray        # (1, L, H, 1) flat head index l·H + h


def _chunks(maps: AttentionMaps, kind: str, q_word: np.ndarray, k_word: np.ndarray, chunk: int):
    """The shared pass: padded weights, masks and a_i for each chunk of ``chunk`` sentences."""
    L, H = maps.shape(kind)
    S, N = q_word.shape
    M = k_word.shape[1]
    lh = (np.arange(L)[:, None] * H + np.arange(H)[None, :])[None, :, :, None]  # (1, L, H, 1)
    for a in range(0, S, chunk):
        idx = list(range(a, min(S, a + chunk)))
        w, q_len, k_len = maps.padded(kind, idx)  # w: (B, L, H, n, m)
        n, m = w.shape[3], w.shape[4]
        w = np.pad(w, ((0, 0), (0, 0), (0, 0), (0, N - n), (0, M - m))).astype(np.float64)  # (B, L, H, N, M)
        q_real = np.arange(N)[None, :] < q_len[:, None]  # (B, N)
        k_real = np.arange(M)[None, :] < k_len[:, None]  # (B, M)
        arg = np.where(k_real[:, None, None, None, :], w, -1.0).argmax(-1)  # (B, L, H, N)
        yield Chunk(idx, w, q_len, k_len, q_real, k_real, q_word[idx] & q_real, k_word[idx] & k_real, arg, lh)


class Confidence:
    """confidence = mean over word queries of max_{j word} w_ij."""

    def __init__(self, L: int, H: int):
        self.total, self.count = np.zeros((L, H)), 0

    def update(self, c: Chunk) -> None:
        wmax = np.where(c.kw[:, None, None, None, :], c.w, -1.0).max(-1)  # (B, L, H, N)
        self.total += np.where(c.qw[:, None, None, :], np.clip(wmax, 0, None), 0).sum((0, 3))
        self.count += int(c.qw.sum())

    def scores(self) -> dict:
        return {"confidence": self.total / max(self.count, 1)}


class Positional:
    """positional = max_o P(a_i − i = o) over word queries; offset = that o."""

    def __init__(self, L: int, H: int, N: int, M: int):
        self.L, self.H, self.N, self.n_off = L, H, N, N + M - 1  # offsets o = j − i ∈ [−(N−1), M−1]
        self.hist = np.zeros((L, H, self.n_off))

    def update(self, c: Chunk) -> None:
        off = c.arg - np.arange(self.N)[None, None, None, :] + (self.N - 1)  # (B, L, H, N) in [0, n_off)
        flat = np.broadcast_to(c.lh * self.n_off + off, off.shape)
        chosen = flat[np.broadcast_to(c.qw[:, None, None, :], off.shape)]
        self.hist += np.bincount(chosen, minlength=self.L * self.H * self.n_off).reshape(self.L, self.H, self.n_off)

    def scores(self) -> dict:
        return {"positional": self.hist.max(-1) / np.maximum(self.hist.sum(-1), 1),
                "offset": self.hist.argmax(-1) - (self.N - 1)}


class RareToken:
    """rare_token (rare_token_2): fraction of sentences where most word queries point at the rarest
    (two rarest) word."""

    def __init__(self, L: int, H: int, rare1: np.ndarray, rare2: np.ndarray):
        S = rare1.shape[0]
        self.L, self.H, self.rare = L, H, (rare1, rare2)
        self.hits = (np.zeros((S, L, H), bool), np.zeros((S, L, H), bool))

    def update(self, c: Chunk) -> None:
        B, M = len(c.idx), c.w.shape[-1]
        for hits, rare in zip(self.hits, self.rare):
            rare_keys = np.broadcast_to(rare[c.idx][:, None, None, :], (B, self.L, self.H, M))
            on_rare = np.take_along_axis(rare_keys, c.arg, -1)  # (B, L, H, N)
            frac = (on_rare & c.qw[:, None, None, :]).sum(-1) / np.maximum(c.qw.sum(-1), 1)[:, None, None]
            hits[c.idx] = frac > 0.5

    def scores(self) -> dict:
        out = {}
        for key, hits, rare in zip(("rare_token", "rare_token_2"), self.hits, self.rare):
            ok = rare.sum(-1) > 0  # sentences with enough word tokens
            out[key] = hits[ok].mean(0) if ok.any() else np.zeros((self.L, self.H))
        return out


class Sink:
    """sink = mean_s max_{j ∈ C_s} c_j, c_j = mean_i w_ij; sink_token = that column's token, most often."""

    def __init__(self, L: int, H: int, cand: np.ndarray, k_ids: np.ndarray, id_to_token: list[str]):
        self.L, self.H, self.cand, self.k_ids, self.id_to_token = L, H, cand, k_ids, id_to_token
        self.V = len(id_to_token)
        self.mass = np.zeros((cand.shape[0], L, H))
        self.token_votes = np.zeros((L * H * self.V,))

    def update(self, c: Chunk) -> None:
        B, M = len(c.idx), c.w.shape[-1]
        # (B, L, H, M)
        col = (c.w * c.q_real[:, None, None, :, None]).sum(3) / np.maximum(c.q_len, 1)[:, None, None, None]
        col = np.where((self.cand[c.idx] & c.k_real)[:, None, None, :], col, -1.0)
        jbest = col.argmax(-1)  # (B, L, H)
        self.mass[c.idx] = np.clip(np.take_along_axis(col, jbest[..., None], -1)[..., 0], 0, None)
        k_ids = np.broadcast_to(self.k_ids[c.idx][:, None, None, :], (B, self.L, self.H, M))
        tok = np.take_along_axis(k_ids, jbest[..., None], -1)[..., 0]
        self.token_votes += np.bincount((c.lh[..., 0] * self.V + tok).ravel(), minlength=self.L * self.H * self.V)

    def scores(self) -> dict:
        if self.V:
            votes = self.token_votes.reshape(self.L, self.H, self.V)
            token = np.asarray(self.id_to_token, dtype=object)[votes.argmax(-1)]
        else:
            token = np.full((self.L, self.H), "", object)
        return {"sink": self.mass.mean(0), "sink_token": token}


class Entropy:
    """entropy = mean_i −Σ_j w_ij ln w_ij (nats); entropy_norm divides by ln(keys the row can see)."""

    def __init__(self, L: int, H: int, causal: bool):
        self.causal = causal
        self.total, self.total_norm = np.zeros((L, H)), np.zeros((L, H))
        self.count = self.count_norm = 0

    def update(self, c: Chunk) -> None:
        B, N = c.q_real.shape
        ent = -(np.where(c.w > 0, c.w * np.log(np.where(c.w > 0, c.w, 1.0)), 0.0)).sum(-1)  # (B, L, H, N)
        if self.causal:
            visible = np.minimum(np.arange(N)[None, :] + 1, c.k_len[:, None])  # (B, N)
        else:
            visible = np.broadcast_to(c.k_len[:, None], (B, N))
        norm_ok = c.q_real & (visible > 1)
        self.total += np.where(c.q_real[:, None, None, :], ent, 0).sum((0, 3))
        self.total_norm += np.where(norm_ok[:, None, None, :],
                                    ent / np.log(np.maximum(visible, 2))[:, None, None, :], 0).sum((0, 3))
        self.count += int(c.q_real.sum())
        self.count_norm += int(norm_ok.sum())

    def scores(self) -> dict:
        return {"entropy": self.total / max(self.count, 1), "entropy_norm": self.total_norm / max(self.count_norm, 1)}


class Syntactic:
    """syntactic = acc_r* and its baseline b_r* for the relation r* maximising acc_r − b_r (gold relations)."""

    def __init__(self, L: int, H: int, rel, min_relations: int):
        self.L, self.H, self.min_relations = L, H, min_relations
        self.rel_s, self.rel_i, self.rel_j, self.rel_lab, self.labels = rel
        self.hits = np.zeros((len(self.labels), L, H))

    def update(self, c: Chunk) -> None:
        a, B = c.idx[0], len(c.idx)
        sel = (self.rel_s >= a) & (self.rel_s < a + B)
        if sel.any():
            pred = c.arg[self.rel_s[sel] - a, :, :, self.rel_i[sel]]  # (R, L, H)
            correct = (pred == self.rel_j[sel][:, None, None]).reshape(-1, self.L * self.H)
            onehot = np.eye(len(self.labels))[self.rel_lab[sel]]  # (R, n_labels)
            self.hits += (onehot.T @ correct).reshape(len(self.labels), self.L, self.H)

    def scores(self) -> dict:
        count = np.bincount(self.rel_lab, minlength=len(self.labels)).astype(float)  # (n_labels,)
        base = _relation_baselines(self.rel_i, self.rel_j, self.rel_lab, len(self.labels), count)
        acc = self.hits / np.maximum(count, 1)[:, None, None]  # (n_labels, L, H)
        gain = np.where((count >= self.min_relations)[:, None, None], acc - base[:, None, None], -np.inf)
        if not np.isfinite(gain).any():
            return {}
        best = gain.argmax(0)  # (L, H)
        return {"syntactic": np.take_along_axis(acc, best[None], 0)[0], "syntactic_baseline": base[best],
                "syntactic_relation": np.asarray(self.labels, dtype=object)[best]}


def decide_roles(sc: dict, th: RoleThresholds) -> np.ndarray:
    """One role per head, the first rule that applies: positional, syntactic, rare-token, sink, broad, other."""
    role = np.full(sc["positional"].shape, "other", dtype=object)
    # first rule that applies wins: assign from the last rule to the first
    role[sc["entropy_norm"] >= th.broad_min] = "broad"
    role[sc["sink"] >= th.sink_min] = "sink"
    role[sc["rare_token"] >= th.rare_min] = "rare-token"
    if "syntactic" in sc:
        role[(sc["syntactic"] - sc["syntactic_baseline"]) >= th.syntactic_margin] = "syntactic"
    role[sc["positional"] >= th.positional_min] = "positional"
    return role


def _kind_roles(maps, kind, frequencies, relations, th: RoleThresholds, chunk: int) -> list[HeadRole]:
    L, H = maps.shape(kind)
    q_side, k_side = KIND_SIDES[kind]
    if frequencies is None:
        frequencies = token_frequencies(s.tokens[k_side] for s in maps)
    q_word, k_word, rare1, rare2, cand, k_ids, id_to_token = _token_masks(maps, kind, frequencies)
    N, M = q_word.shape[1], k_word.shape[1]
    scorers = [Confidence(L, H), Positional(L, H, N, M), RareToken(L, H, rare1, rare2),
               Sink(L, H, cand, k_ids, id_to_token), Entropy(L, H, causal=kind == "decoder")]
    if relations is not None:
        scorers.append(Syntactic(L, H, _relation_arrays(relations, kind, q_side == k_side, N, M), th.min_relations))
    for c in _chunks(maps, kind, q_word, k_word, chunk):  # the one pass over the weights
        for scorer in scorers:
            scorer.update(c)
    sc = {k: v for scorer in scorers for k, v in scorer.scores().items()}
    role = decide_roles(sc, th)
    syn = "syntactic" in sc

    def r6(key: str, l: int, h: int) -> float:
        return round(float(sc[key][l, h]), 6)

    return [
        HeadRole(
            layer=l, head=h, kind=kind, role=str(role[l, h]),
            confidence=r6("confidence", l, h), positional=r6("positional", l, h), offset=int(sc["offset"][l, h]),
            rare_token=r6("rare_token", l, h), rare_token_2=r6("rare_token_2", l, h),
            sink=r6("sink", l, h), sink_token=str(sc["sink_token"][l, h]),
            entropy=r6("entropy", l, h), entropy_norm=r6("entropy_norm", l, h),
            syntactic=r6("syntactic", l, h) if syn else None,
            syntactic_baseline=r6("syntactic_baseline", l, h) if syn else None,
            syntactic_relation=str(sc["syntactic_relation"][l, h]) if syn else None,
        )
        for l in range(L)
        for h in range(H)
    ]


def _relation_arrays(relations, kind: str, self_attention: bool, N: int, M: int):
    """Flatten gold relations to arrays (sentence, query, key, label id); self-attention adds reversed relations."""
    rows = []
    for s, triples in enumerate(relations):
        for i, j, label in triples:
            rows.append((s, int(i), int(j), str(label)))
            if self_attention:
                rows.append((s, int(j), int(i), f"{label}⁻¹"))
    rows = [r for r in rows if 0 <= r[1] < N and 0 <= r[2] < M]
    labels = sorted({r[3] for r in rows})
    lab_id = {t: k for k, t in enumerate(labels)}
    arr = np.array([(s, i, j, lab_id[t]) for s, i, j, t in rows], dtype=np.int64).reshape(-1, 4)
    return arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], labels


def _relation_baselines(rel_i, rel_j, rel_lab, n_labels: int, count) -> np.ndarray:
    """b_r = max_o P(j − i = o | r): accuracy of the most frequent relative position, per label."""
    if len(rel_i) == 0:
        return np.zeros(n_labels)
    off = rel_j - rel_i
    off = off - off.min()
    hist = np.bincount(rel_lab * (off.max() + 1) + off, minlength=n_labels * (off.max() + 1)).reshape(n_labels, -1)
    return hist.max(-1) / np.maximum(count, 1)

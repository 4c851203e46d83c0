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
sink, broad, else "other".  All scores are computed at once for all heads:
sentences are padded into a batch (S, L, H, N, M) with masks, in chunks of
sentences to bound memory.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from attnlab.analysis.attention_maps import KIND_SIDES, AttentionMaps

__all__ = [
    "HeadRole", "RoleThresholds", "head_roles", "token_frequencies", "is_punctuation", "ROLES",
    "word_of_tokens", "token_relations", "corpus_relations", "read_conllu",
]

ROLES = ("positional", "syntactic", "rare-token", "sink", "broad", "other")
_MARKERS = ("##", "Ġ", "▁", "Ċ", "@@", "</w>")


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
    for m in _MARKERS:
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


def _kind_roles(maps, kind, frequencies, relations, th: RoleThresholds, chunk: int) -> list[HeadRole]:
    L, H = maps.shape(kind)
    q_side, k_side = KIND_SIDES[kind]
    if frequencies is None:
        frequencies = token_frequencies(s.tokens[k_side] for s in maps)
    q_word, k_word, rare1, rare2, cand, k_ids, id_to_token = _token_masks(maps, kind, frequencies)
    S, N = q_word.shape
    M = k_word.shape[1]
    n_off = N + M - 1  # offsets o = j − i ∈ [−(N−1), M−1]
    V = len(id_to_token)
    rel = _relation_arrays(relations, kind, q_side == k_side, N, M) if relations is not None else None

    # accumulators, all (L, H, ...)
    conf_sum = np.zeros((L, H))
    n_qword = 0
    pos_hist = np.zeros((L, H, n_off))
    rare_hit1 = np.zeros((S, L, H), bool)
    rare_hit2 = np.zeros((S, L, H), bool)
    sink_s = np.zeros((S, L, H))
    sink_tok = np.zeros((L * H * V,))
    ent_sum = np.zeros((L, H))
    entn_sum = np.zeros((L, H))
    n_qreal = 0
    n_qnorm = 0
    if rel is not None:
        rel_s, rel_i, rel_j, rel_lab, labels = rel
        rel_hits = np.zeros((len(labels), L, H))

    for a in range(0, S, chunk):
        idx = list(range(a, min(S, a + chunk)))
        w, q_len, k_len = maps.padded(kind, idx)  # w: (B, L, H, n, m)
        B, n, m = w.shape[0], w.shape[3], w.shape[4]
        w = np.pad(w, ((0, 0), (0, 0), (0, 0), (0, N - n), (0, M - m))).astype(np.float64)  # (B, L, H, N, M)
        q_real = np.arange(N)[None, :] < q_len[:, None]  # (B, N)
        k_real = np.arange(M)[None, :] < k_len[:, None]  # (B, M)
        qw = q_word[idx] & q_real  # (B, N)
        kw = k_word[idx] & k_real  # (B, M)

        # confidence: max over word keys, mean over word queries
        wmax = np.where(kw[:, None, None, None, :], w, -1.0).max(-1)  # (B, L, H, N)
        conf_sum += np.where(qw[:, None, None, :], np.clip(wmax, 0, None), 0).sum((0, 3))
        n_qword += int(qw.sum())

        # positional: histogram of a_i − i over word queries
        arg = np.where(k_real[:, None, None, None, :], w, -1.0).argmax(-1)  # (B, L, H, N)
        off = arg - np.arange(N)[None, None, None, :] + (N - 1)  # (B, L, H, N) in [0, n_off)
        lh = (np.arange(L)[:, None] * H + np.arange(H)[None, :])[None, :, :, None]  # (1, L, H, 1)
        flat = np.broadcast_to(lh * n_off + off, off.shape)
        pos_hist += np.bincount(flat[np.broadcast_to(qw[:, None, None, :], off.shape)], minlength=L * H * n_off).reshape(L, H, n_off)

        # rare token: does a_i fall on the rarest / two rarest, for most word queries?
        for hits, rare in ((rare_hit1, rare1), (rare_hit2, rare2)):
            on_rare = np.take_along_axis(np.broadcast_to(rare[idx][:, None, None, :], (B, L, H, M)), arg, -1)  # (B, L, H, N)
            frac = (on_rare & qw[:, None, None, :]).sum(-1) / np.maximum(qw.sum(-1), 1)[:, None, None]
            hits[idx] = frac > 0.5

        # sink: mass on the best candidate column
        c = (w * q_real[:, None, None, :, None]).sum(3) / np.maximum(q_len, 1)[:, None, None, None]  # (B, L, H, M)
        c = np.where((cand[idx] & k_real)[:, None, None, :], c, -1.0)
        jbest = c.argmax(-1)  # (B, L, H)
        sink_s[idx] = np.clip(np.take_along_axis(c, jbest[..., None], -1)[..., 0], 0, None)
        tok = np.take_along_axis(np.broadcast_to(k_ids[idx][:, None, None, :], (B, L, H, M)), jbest[..., None], -1)[..., 0]
        sink_tok += np.bincount((lh[..., 0] * V + tok).ravel(), minlength=L * H * V)

        # entropy (nats) and normalised entropy
        ent = -(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0)).sum(-1)  # (B, L, H, N)
        if kind == "decoder":
            visible = np.minimum(np.arange(N)[None, :] + 1, k_len[:, None])  # (B, N)
        else:
            visible = np.broadcast_to(k_len[:, None], (B, N))
        norm_ok = q_real & (visible > 1)
        ent_sum += np.where(q_real[:, None, None, :], ent, 0).sum((0, 3))
        entn_sum += np.where(norm_ok[:, None, None, :], ent / np.log(np.maximum(visible, 2))[:, None, None, :], 0).sum((0, 3))
        n_qreal += int(q_real.sum())
        n_qnorm += int(norm_ok.sum())

        # syntactic: hits of a_i on the gold key, per relation label
        if rel is not None:
            sel = (rel_s >= a) & (rel_s < a + B)
            if sel.any():
                pred = arg[rel_s[sel] - a, :, :, rel_i[sel]]  # (R, L, H)
                correct = (pred == rel_j[sel][:, None, None]).reshape(-1, L * H)
                onehot = np.eye(len(labels))[rel_lab[sel]]  # (R, n_labels)
                rel_hits += (onehot.T @ correct).reshape(len(labels), L, H)

    confidence = conf_sum / max(n_qword, 1)
    positional = pos_hist.max(-1) / np.maximum(pos_hist.sum(-1), 1)
    offset = pos_hist.argmax(-1) - (N - 1)
    ok1 = rare1.sum(-1) > 0
    ok2 = rare2.sum(-1) > 0
    rare_token = rare_hit1[ok1].mean(0) if ok1.any() else np.zeros((L, H))
    rare_token_2 = rare_hit2[ok2].mean(0) if ok2.any() else np.zeros((L, H))
    sink = sink_s.mean(0)
    sink_token = np.asarray(id_to_token, dtype=object)[sink_tok.reshape(L, H, V).argmax(-1)] if V else np.full((L, H), "", object)
    entropy = ent_sum / max(n_qreal, 1)
    entropy_norm = entn_sum / max(n_qnorm, 1)

    syn = syn_base = None
    syn_label = None
    if rel is not None:
        count = np.bincount(rel_lab, minlength=len(labels)).astype(float)  # (n_labels,)
        base = _relation_baselines(rel_i, rel_j, rel_lab, len(labels), count)
        acc = rel_hits / np.maximum(count, 1)[:, None, None]  # (n_labels, L, H)
        gain = np.where((count >= th.min_relations)[:, None, None], acc - base[:, None, None], -np.inf)
        if np.isfinite(gain).any():
            best = gain.argmax(0)  # (L, H)
            syn = np.take_along_axis(acc, best[None], 0)[0]
            syn_base = base[best]
            syn_label = np.asarray(labels, dtype=object)[best]

    role = np.full((L, H), "other", dtype=object)
    # first rule that applies wins: assign from the last rule to the first
    role[entropy_norm >= th.broad_min] = "broad"
    role[sink >= th.sink_min] = "sink"
    role[rare_token >= th.rare_min] = "rare-token"
    if syn is not None:
        role[(syn - syn_base) >= th.syntactic_margin] = "syntactic"
    role[positional >= th.positional_min] = "positional"

    return [
        HeadRole(
            layer=l,
            head=h,
            kind=kind,
            role=str(role[l, h]),
            confidence=round(float(confidence[l, h]), 6),
            positional=round(float(positional[l, h]), 6),
            offset=int(offset[l, h]),
            rare_token=round(float(rare_token[l, h]), 6),
            rare_token_2=round(float(rare_token_2[l, h]), 6),
            sink=round(float(sink[l, h]), 6),
            sink_token=str(sink_token[l, h]),
            entropy=round(float(entropy[l, h]), 6),
            entropy_norm=round(float(entropy_norm[l, h]), 6),
            syntactic=None if syn is None else round(float(syn[l, h]), 6),
            syntactic_baseline=None if syn is None else round(float(syn_base[l, h]), 6),
            syntactic_relation=None if syn is None else str(syn_label[l, h]),
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


# ---------------------------------------------------------------------------------------------
# gold relations: from words to tokens
# ---------------------------------------------------------------------------------------------
def _norm(text: str) -> str:
    for m in _MARKERS:
        text = text.replace(m, "")
    text = unicodedata.normalize("NFKD", text.lower())
    return "".join(ch for ch in text if not unicodedata.combining(ch) and not ch.isspace())


def word_of_tokens(tokens: Sequence[str], special: Sequence[bool], words: Sequence[str]) -> np.ndarray:
    """Index of the whitespace word each token comes from (−1 for special tokens).

    Walks the characters of the words (lower-cased, accents and subword
    markers ## Ġ ▁ removed): a token belongs to the word of its first
    character.  Unknown pieces ([UNK]) take the word at the current position.
    """
    chars = [_norm(w) for w in words]
    owner = np.repeat(np.arange(len(words)), [len(c) for c in chars])  # char -> word
    stream = "".join(chars)
    out = np.full(len(tokens), -1, np.int64)
    p = 0
    for t, (tok, sp) in enumerate(zip(tokens, special)):  # one pass over the tokens of one sentence
        if sp or p >= len(stream):
            continue
        c = _norm(tok)
        if not c:
            out[t] = owner[p]
            continue
        at = stream.find(c, p)
        if at == p or (0 < at - p <= 2):
            p = at
        out[t] = owner[p]
        p = min(len(stream), p + len(c)) if stream.startswith(c, p) else p + 1
    return out


def token_relations(maps: AttentionMaps, kind: str, word_relations: Sequence[Sequence[tuple[int, int, str]]]):
    """Gold (query word, key word, label) triples → (query token, key token, label), per sentence.

    Words are the whitespace words of the sentence's text (source side) or
    target (target side; the text itself for decoder-only models), as
    ``KIND_SIDES[kind]`` says; a word maps to its
    first token.  Relations whose words are not found are dropped.
    """
    if len(word_relations) != len(maps):
        raise ValueError(f"word_relations: {len(word_relations)} sentences for {len(maps)} in the maps")
    q_side, k_side = KIND_SIDES[kind]
    out = []
    for sent, rels in zip(maps, word_relations):
        first = {}
        for side in {q_side, k_side}:
            text = sent.text if side == "src" or sent.target is None else sent.target  # decoder-only: text on "tgt"
            w_of_t = word_of_tokens(sent.tokens[side], sent.special_mask(side), text.split())
            f = np.full(len(text.split()) + 1, -1, np.int64)
            for t in range(len(w_of_t) - 1, -1, -1):  # first token of each word
                if w_of_t[t] >= 0:
                    f[w_of_t[t]] = t
            first[side] = f
        out.append([(int(first[q_side][a]), int(first[k_side][b]), lab) for a, b, lab in rels
                    if a < len(first[q_side]) - 1 and b < len(first[k_side]) - 1
                    and first[q_side][a] >= 0 and first[k_side][b] >= 0])
    return out


def corpus_relations(pairs, kind: str):
    """Word-level gold triples for ``kind`` from corpus pairs (attnlab.data ``Pair``), or None.

    encoder: dependency arcs (head, dependent, label) → (dependent, head, label);
    cross: alignment links (source i, target j) → (j, i, "align").
    """
    if kind == "encoder" and all(p.relations is not None for p in pairs):
        return [[(d, h, lab) for h, d, lab in p.relations] for p in pairs]
    if kind == "cross" and all(p.alignment is not None for p in pairs):
        return [[(j, i, "align") for i, j in p.alignment] for p in pairs]
    return None


def read_conllu(path) -> tuple[list[str], list[list[tuple[int, int, str]]]]:
    """Sentences (words joined by spaces) and their arcs (dependent, head, deprel), 0-based word indices.

    Read with the ``conllu`` package; multiword and empty tokens are skipped,
    root arcs dropped.  ``UserError`` naming the file when it cannot be parsed.
    """
    import conllu

    from attnlab.errors import UserError

    try:
        with open(path, encoding="utf-8") as f:
            parsed = conllu.parse(f.read())
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read CoNLL-U file ({err})") from None
    except Exception as err:  # conllu's ParseException
        raise UserError(f"{path}: not a CoNLL-U file ({err})") from None
    sentences, relations = [], []
    for number, tl in enumerate(parsed, start=1):
        toks = [t for t in tl if isinstance(t.get("id"), int)]
        if not toks:
            continue
        where = f"{path}: sentence {number}"
        for k, t in enumerate(toks, start=1):
            if t["id"] != k:
                raise UserError(f"{where}: word ids must run 1, 2, ..., got {t['id']} at word {k}")
            head = t.get("head")
            if not isinstance(head, int) or not 0 <= head <= len(toks) or head == k or not t.get("form"):
                raise UserError(f"{where}, word {k}: HEAD must be a word id in 0..{len(toks)} other than its own "
                                f"and FORM non-empty (10 tab-separated columns), got HEAD {head!r}")
        index = {t["id"]: k for k, t in enumerate(toks)}
        sentences.append(" ".join(t["form"] for t in toks))
        relations.append([(index[t["id"]], index[t["head"]], str(t["deprel"]))
                          for t in toks if t["head"] and t["head"] in index])
    if not sentences:
        raise UserError(f"{path}: no sentences in the CoNLL-U file")
    return sentences, relations

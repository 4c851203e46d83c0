"""Training skip-gram word vectors on one side of a corpus, and using them.

The model and its loss are in ``attnlab.nn.skipgram``; this file turns a corpus
into (centre, context) pairs and fits the vectors fast on a CPU:

* tokens: lower-cased words (``\\w+`` with inner apostrophes) by default, or the
  pieces of a given tokenizer, so that the vectors can initialise a model's W_E;
* vocabulary: words seen at least ``min_count`` times (rarer words are dropped
  from the text before the windows are taken, as in word2vec);
* subsampling of frequent words: a token of frequency f is kept with probability
  min(1, √(t/f) + t/f)  (word2vec's rule, t = ``subsample``);
* dynamic window: for each centre a window b ∈ {1 … c} is drawn uniformly, the
  pairs are (w_t, w_{t±δ}) for δ ≤ b, inside one sentence;
* loss: full softmax for a small vocabulary, else negative sampling with k
  negatives drawn from the unigram distribution to the power 3/4;
* all pairs of an epoch are built at once with array operations and shuffled;
  large batches, sparse gradients, SparseAdam with a linearly decaying rate.

Saved file (safetensors, one file): tensors ``vectors`` (V, d) and ``counts`` (V,);
metadata ``words`` (JSON list, row i is the vector of words[i]) and the settings.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from attnlab.atomic import write_atomic
from attnlab.errors import UserError
from attnlab.nn.skipgram import SkipGram

WORD = re.compile(r"\w+(?:['’]\w+)*")
FULL_SOFTMAX_MAX_VOCAB = 2000  # auto: full softmax up to this vocabulary size, else negative sampling
FORMAT = "attnlab-skipgram"


def word_tokens(text: str) -> list[str]:
    """The default tokens: lower-cased words, e.g. "Tom's here." → ["tom's", "here"]."""
    return WORD.findall(text.lower())


@dataclass
class WordVectors:
    """Trained vectors: row i of ``vectors`` is the vector of ``words[i]``."""

    vectors: torch.Tensor  # (V, d) float32
    words: list[str]
    counts: torch.Tensor  # (V,) int64, frequency in the training text
    meta: dict[str, Any] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)  # mean loss of each epoch (training only)

    def __post_init__(self) -> None:
        self.index = {w: i for i, w in enumerate(self.words)}

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def save(self, path: str | Path) -> Path:
        """Write one safetensors file, atomically (temporary file, then rename)."""
        path = Path(path)
        meta = {"format": FORMAT, "words": json.dumps(self.words, ensure_ascii=False)}
        meta.update({k: json.dumps(v) for k, v in self.meta.items()})
        tensors = {"vectors": self.vectors.contiguous().float(), "counts": self.counts.contiguous()}
        return write_atomic(path, lambda tmp: save_file(tensors, tmp, metadata=meta))

    @classmethod
    def load(cls, path: str | Path) -> WordVectors:
        path = Path(path)
        if not path.is_file():
            raise UserError(f"{path}: no such embeddings file")
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                if meta.get("format") != FORMAT:
                    raise UserError(f"{path}: not a skip-gram embeddings file (no '{FORMAT}' metadata)")
                vectors, counts = f.get_tensor("vectors"), f.get_tensor("counts")
        except SafetensorError as err:
            raise UserError(f"{path}: not a readable safetensors file ({err})") from None
        words = json.loads(meta.pop("words"))
        meta.pop("format")
        return cls(vectors, words, counts, {k: json.loads(v) for k, v in meta.items()})


def sentences_to_ids(sentences: Sequence[list[str]],
                     min_count: int) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Vocabulary (words with count ≥ min_count, most frequent first) and the text as ids.

    Returns words, counts (V,), ids (T,) and sentence (T,) — the sentence number
    of each kept token (rare words are removed before windows are taken).
    """
    flat = [w for s in sentences for w in s]
    if not flat:
        raise ValueError("the corpus has no words")
    uniq, inverse, counts = np.unique(np.array(flat, dtype=object), return_inverse=True, return_counts=True)
    keep = counts >= min_count
    if keep.sum() < 2:
        raise ValueError(f"min_count={min_count} leaves {int(keep.sum())} word(s); skip-gram needs at least 2")
    order = np.argsort(-counts[keep], kind="stable")  # most frequent first
    kept_ids = np.flatnonzero(keep)[order]
    new_id = np.full(len(uniq), -1, dtype=np.int64)
    new_id[kept_ids] = np.arange(len(kept_ids))
    sent = np.repeat(np.arange(len(sentences)), [len(s) for s in sentences])
    ids = new_id[inverse]
    ok = ids >= 0
    return [str(w) for w in uniq[kept_ids]], counts[kept_ids].astype(np.int64), ids[ok], sent[ok]


def epoch_pairs(ids: np.ndarray, sent: np.ndarray, keep_prob: np.ndarray, window: int,
                rng: np.random.Generator) -> np.ndarray:
    """All (centre, context) pairs of one epoch, shuffled: (P, 2) int64.

    Subsampling keeps token t with probability keep_prob[w_t]; then every centre
    draws its window b ∈ {1..window}; pairs (t, t+δ) and (t+δ, t) within one sentence.
    """
    # ids, sent: (T,) → pairs (P, 2)
    kept = rng.random(len(ids)) < keep_prob[ids]
    w, s = ids[kept], sent[kept]
    b = rng.integers(1, window + 1, size=len(w))  # dynamic window of each centre
    chunks = []
    for delta in range(1, window + 1):
        same = s[:-delta] == s[delta:]  # (T-δ,) the pair lies inside one sentence
        right = same & (b[:-delta] >= delta)  # centre t, context t+δ
        left = same & (b[delta:] >= delta)  # centre t+δ, context t
        chunks.append(np.stack([w[:-delta][right], w[delta:][right]], 1))
        chunks.append(np.stack([w[delta:][left], w[:-delta][left]], 1))
    pairs = np.concatenate(chunks)
    return pairs[rng.permutation(len(pairs))]


def train_skipgram(
    sentences: Iterable[list[str]],
    dim: int = 100,
    window: int = 5,
    negative: int | None = None,
    min_count: int = 5,
    subsample: float = 1e-4,
    epochs: int | None = None,
    minutes: float | None = None,
    batch_size: int = 4096,
    lr: float = 0.01,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> WordVectors:
    """Fit skip-gram vectors to tokenised sentences.

    negative: k negatives per pair; 0 = full softmax; None = full softmax when the
    vocabulary has at most 2000 words, else k = 5.  Training runs ``epochs`` passes,
    or until ``minutes`` have passed (whichever comes first; default 5 epochs).
    """
    for name, value in (("dim", dim), ("window", window), ("min_count", min_count), ("batch_size", batch_size)):
        if value < 1:
            raise ValueError(f"{name} must be positive, got {value}")
    if negative is not None and negative < 0:
        raise ValueError(f"negative must be ≥ 0, got {negative}")
    if epochs is not None and epochs < 1:
        raise ValueError(f"epochs must be positive, got {epochs}")
    if minutes is not None and minutes <= 0:
        raise ValueError(f"minutes must be positive, got {minutes}")
    if epochs is None and minutes is None:
        epochs = 5
    sentences = [s for s in sentences if s]
    words, counts, ids, sent = sentences_to_ids(sentences, min_count)
    V = len(words)
    k = (0 if V <= FULL_SOFTMAX_MAX_VOCAB else 5) if negative is None else negative

    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    f = counts / counts.sum()
    keep_prob = np.minimum(1.0, np.sqrt(subsample / f) + subsample / f) if subsample > 0 else np.ones(V)
    # negatives ∝ count^{3/4}, drawn from a table (word2vec's unigram table)
    p_neg = counts**0.75 / (counts**0.75).sum()
    table = torch.from_numpy(np.repeat(np.arange(V), np.maximum(1, np.round(p_neg * 2_000_000)).astype(np.int64)))

    from attnlab.train.resources import check_bytes

    # W_in, W_out: (V, d) fp32 each, with their gradients and Adam's two moments
    check_bytes(2 * V * dim * 4 * 4, f"skip-gram of {V:,} words × dim {dim}", "lower dim or raise min_count")
    model = SkipGram(V, dim, sparse=k > 0)
    opt = (torch.optim.SparseAdam(list(model.parameters()), lr=lr) if k > 0
           else torch.optim.Adam(model.parameters(), lr=lr))
    expected_pairs = len(epoch_pairs(ids, sent, keep_prob, window, np.random.default_rng(seed + 1)))
    if expected_pairs == 0:
        raise ValueError("the corpus gives no (centre, context) pairs: sentences of one word, or subsample too small")
    total_steps = (epochs or 10**9) * math.ceil(expected_pairs / batch_size)
    budget = minutes * 60 if minutes is not None else math.inf
    start, step, epoch, losses = time.monotonic(), 0, 0, []
    while (epochs is None or epoch < epochs) and time.monotonic() - start < budget:
        pairs = torch.from_numpy(epoch_pairs(ids, sent, keep_prob, window, rng))
        total, n = 0.0, 0
        for i in range(0, len(pairs), batch_size):
            elapsed = time.monotonic() - start
            if elapsed >= budget:
                break
            done = max(step / total_steps, elapsed / budget)
            for g in opt.param_groups:  # linear decay of the rate to 1e-4·lr
                g["lr"] = lr * max(1e-4, 1.0 - done)
            c, o = pairs[i : i + batch_size, 0], pairs[i : i + batch_size, 1]
            if k > 0:
                negatives = table[torch.randint(len(table), (len(c), k))]  # (B, k)
                loss = model.loss_negative(c, o, negatives)
            else:
                loss = model.loss_full(c, o)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total, n, step = total + loss.item() * len(c), n + len(c), step + 1
        epoch += 1
        if n:
            losses.append(total / n)
            if progress:
                progress(f"epoch {epoch}: {n} pairs, loss {total / n:.4f}, {time.monotonic() - start:.0f} s")
    meta = {
        "dim": dim, "window": window, "negative": k, "loss": "negative sampling" if k > 0 else "full softmax",
        "min_count": min_count, "subsample": subsample, "epochs": epoch, "steps": step,
        "seconds": round(time.monotonic() - start, 1), "tokens": int(len(ids)),
    }
    return WordVectors(model.W_in.weight.detach().clone(), words, torch.from_numpy(counts), meta, losses)


def neighbours(file: str | Path | WordVectors, word: str, k: int = 5) -> list[tuple[str, float]]:
    """The k words of highest cosine cos(v_w, v_x) = v_wᵀv_x / (‖v_w‖‖v_x‖) to ``word`` (itself excluded)."""
    wv = file if isinstance(file, WordVectors) else WordVectors.load(file)
    if k < 1:
        raise ValueError(f"k must be positive, got {k}")
    key = word if word in wv.index else word.lower()
    if key not in wv.index:
        where = f"{file}" if not isinstance(file, WordVectors) else "the embeddings"
        raise UserError(f"{where}: the word {word!r} is not in the vocabulary ({len(wv.words)} words)")
    x = torch.nn.functional.normalize(wv.vectors, dim=1)  # (V, d) unit rows
    cos = x @ x[wv.index[key]]  # (V,)
    cos[wv.index[key]] = -math.inf
    top = torch.topk(cos, min(k, len(wv.words) - 1))
    return [(wv.words[i], float(c)) for c, i in zip(top.values, top.indices)]


def pca_2d(vectors: torch.Tensor) -> torch.Tensor:
    """Coordinates on the first two principal axes: (X − mean) V_2, V_2 from the SVD."""
    # vectors: (n, d) → (n, 2)
    x = vectors.double() - vectors.double().mean(0, keepdim=True)
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    return (x @ vh[:2].T).float()


def plot_pca(file: str | Path | WordVectors, png: str | Path, words: Sequence[str] | None = None,
             top: int = 80) -> Path:
    """Scatter the words on the 2-D PCA plane, each labelled (matplotlib, Agg).

    words: the words to show (default: the ``top`` most frequent).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wv = file if isinstance(file, WordVectors) else WordVectors.load(file)
    if words is None:
        words = wv.words[:top]
    missing = [w for w in words if w not in wv.index]
    if missing:
        raise UserError(f"not in the vocabulary: {', '.join(missing[:5])}")
    if len(words) < 2:
        raise ValueError("plot_pca needs at least two words")
    xy = pca_2d(wv.vectors[[wv.index[w] for w in words]]).numpy()
    fig, ax = plt.subplots(figsize=(9, 9))
    ax.scatter(xy[:, 0], xy[:, 1], s=8, color="tab:blue")
    for (x, y), w in zip(xy, words):
        ax.annotate(w, (x, y), fontsize=8, xytext=(2, 2), textcoords="offset points")
    ax.set_title(f"skip-gram vectors, first two principal components ({len(words)} words)")
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    try:
        return write_atomic(png, lambda tmp: fig.savefig(tmp, dpi=120, bbox_inches="tight"))
    finally:
        plt.close(fig)


def _plain(piece: str) -> str:
    """A tokenizer piece without word-boundary marks, lower-cased: "▁The" → "the"."""
    return piece.replace("▁", "").replace("Ġ", "").replace("</w>", "").removeprefix("##").lower()


def init_embeddings(weight: torch.Tensor, tokenizer, file: str | Path | WordVectors, match_norm: bool = True) -> int:
    """Copy the vector of every tokenizer piece found in ``file`` into W_E; return how many.

    weight: the model's W_E (V_model, d), changed in place; row i gets the vector
    of ``tokenizer.id_to_piece(i)`` (exact match first, else the piece without
    boundary marks, lower-cased).  The special ids (pad, bos, eos, unk = 0…3)
    are left alone.  With ``match_norm`` the copied vectors are multiplied by one
    common factor so that their mean norm equals that of the rows they replace
    (the model's initial scale); their cosines are unchanged.
    """
    # weight: (V_model, d)
    wv = file if isinstance(file, WordVectors) else WordVectors.load(file)
    if weight.shape[1] != wv.dim:
        raise UserError(f"{file}: vectors have dimension {wv.dim}, the model's W_E has d = {weight.shape[1]}")
    plain = {}
    for i, w in enumerate(wv.words):
        plain.setdefault(_plain(w), i)
    rows, src = [], []
    for i in range(4, min(tokenizer.vocab_size, weight.shape[0])):
        piece = tokenizer.id_to_piece(i)
        j = wv.index.get(piece, plain.get(_plain(piece)))
        if j is not None:
            rows.append(i)
            src.append(j)
    if rows:
        with torch.no_grad():
            new = wv.vectors[src].to(weight.dtype).to(weight.device)  # (n, d)
            if match_norm:
                new = new * (weight[rows].norm(dim=1).mean() / new.norm(dim=1).mean().clamp_min(1e-12))
            weight[rows] = new
    return len(rows)


def corpus_sentences(spec: str, side: str = "src", split: str = "train", tokenizer: str | Path | None = None,
                     unique: bool = True) -> list[list[str]]:
    """The tokenised sentences of one side ("src" or "tgt") of a corpus spec.

    ``unique``: each distinct sentence once (a TSV side often repeats a sentence
    once per translation of it).  tokenizer: a tokenizer json — tokens are its pieces.
    """
    from attnlab.data import load_corpus

    if side not in ("src", "tgt"):
        raise UserError(f"--side must be src or tgt, got {side!r}")
    texts = [getattr(p, side) for p in load_corpus(spec, split)]
    if unique:
        texts = list(dict.fromkeys(texts))
    if tokenizer is None:
        sentences = [word_tokens(t) for t in texts]
    else:
        from attnlab.data.tokenizer import Tokenizer

        tok = Tokenizer.load(Path(tokenizer))
        piece = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
        sentences = [[piece[i] for i in ids] for ids in tok.encode_batch(texts)]
    if not any(sentences):
        raise UserError(f"{spec}: the {side} side of the {split} split has no words")
    return sentences


def train_embeddings(spec: str, side: str = "src", out: str | Path = "embeddings.safetensors",
                     plot: str | Path | None = None,
                     tokenizer: str | Path | None = None, progress: Callable[[str], None] | None = None,
                     **kw) -> WordVectors:
    """Read one side of a corpus, train skip-gram (``train_skipgram`` options in kw), save, optionally plot."""
    sentences = corpus_sentences(spec, side, tokenizer=tokenizer)
    wv = train_skipgram(sentences, progress=progress, **kw)
    wv.meta.update({"data": spec, "side": side, "tokenizer": str(tokenizer) if tokenizer else "words"})
    wv.save(out)
    if plot is not None:
        plot_pca(wv, plot)
    return wv

"""``AttentionMaps``: the attention weights of a model on a set of sentences.

The one currency of the analysis stage.  For every sentence ``s`` and every
kind of attention present, a tensor

    w[s][kind] : (L, H, n_q, n_k),    w_lhij = softmax_j(q_i · k_j / √d_k)

(layer ``l``, head ``h``, query ``i``, key ``j``), cut to the real tokens of
the sentence (no padding, ever).  The kinds and the sides their queries and
keys come from:

    "encoder"  source × source    (encoder self-attention; HF encoder-only models)
    "decoder"  target × target    (masked self-attention; HF decoder-only models
                                   read their text on the target side)
    "cross"    target × source    (decoder queries, encoder keys)

Each sentence keeps its text (and target text), the token strings of each side
and which of them are special tokens (BOS/EOS/CLS/SEP/PAD), so that analyses
can exclude or single them out.  ``model`` is free metadata about the
producer (name, source, layers, heads, ...).

File format: ONE ``.safetensors`` file (no pickle).  Tensors are named
``"{s}.{kind}"`` (float32, (L, H, n_q, n_k)); the header's metadata holds
``format = "attnlab.attention_maps"``, ``version`` and ``json``: the model
metadata and the sentences (texts, tokens, special flags) as JSON.  Loading
validates everything (shapes against tokens, finiteness) and raises
``UserError`` naming the file on any problem.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np

from attnlab.atomic import write_atomic
from attnlab.errors import UserError

__all__ = ["KIND_SIDES", "KINDS", "AttentionMaps", "SentenceAttention"]

FORMAT = "attnlab.attention_maps"
VERSION = "1"

# kind -> (side of the queries, side of the keys)
KIND_SIDES: dict[str, tuple[str, str]] = {
    "encoder": ("src", "src"),
    "decoder": ("tgt", "tgt"),
    "cross": ("tgt", "src"),
}
KINDS: tuple[str, ...] = tuple(KIND_SIDES)


@dataclass(frozen=True)
class SentenceAttention:
    """The attention of one sentence: tokens of each side and weights of each kind.

    ``tokens[side]`` are the token strings (side ``"src"`` or ``"tgt"``),
    ``special[side]`` one bool per token (True for BOS/EOS/CLS/SEP/...),
    ``weights[kind]`` a float32 array (L, H, n_q, n_k) with n_q, n_k the
    lengths of the sides given by ``KIND_SIDES[kind]``.
    """

    text: str
    tokens: Mapping[str, Sequence[str]]
    weights: Mapping[str, np.ndarray]
    special: Mapping[str, Sequence[bool]] = field(default_factory=dict)
    target: str | None = None

    def query_tokens(self, kind: str) -> list[str]:
        """Token strings along the rows (queries) of ``weights[kind]``."""
        return list(self.tokens[KIND_SIDES[kind][0]])

    def key_tokens(self, kind: str) -> list[str]:
        """Token strings along the columns (keys) of ``weights[kind]``."""
        return list(self.tokens[KIND_SIDES[kind][1]])

    def special_mask(self, side: str) -> np.ndarray:
        """Bool array (n,) of the special tokens of ``side`` (all False when unknown)."""
        flags = self.special.get(side)
        return np.zeros(len(self.tokens[side]), bool) if flags is None else np.asarray(flags, bool)


class AttentionMaps:
    """Attention weights of one model over many sentences (see module docstring).

    ``AttentionMaps(sentences, model={...})`` validates: every kind is one of
    ``KINDS`` and has the same (L, H) in every sentence, shapes match the
    tokens, weights are finite and ≥ 0.  Bad input raises ``ValueError``
    naming the sentence and kind.
    """

    def __init__(self, sentences: Sequence[SentenceAttention], model: Mapping | None = None):
        self.sentences: list[SentenceAttention] = [_checked(s, i) for i, s in enumerate(sentences)]
        if not self.sentences:
            raise ValueError("sentences: an AttentionMaps needs at least one sentence")
        self.model: dict = dict(model or {})
        self.kinds: tuple[str, ...] = tuple(k for k in KINDS if k in self.sentences[0].weights)
        for i, s in enumerate(self.sentences):
            if tuple(k for k in KINDS if k in s.weights) != self.kinds:
                raise ValueError(f"sentences[{i}]: kinds {sorted(s.weights)} differ from sentence 0's "
                                 f"{list(self.kinds)}")
            for kind in self.kinds:
                if s.weights[kind].shape[:2] != self.shape(kind):
                    raise ValueError(
                        f"sentences[{i}].weights[{kind!r}]: (L, H) = {s.weights[kind].shape[:2]}, "
                        f"sentence 0 has {self.shape(kind)}"
                    )

    # ---- access --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, i: int) -> SentenceAttention:
        return self.sentences[i]

    def __iter__(self) -> Iterator[SentenceAttention]:
        return iter(self.sentences)

    def __repr__(self) -> str:
        dims = ", ".join(f"{k}: L={self.shape(k)[0]} H={self.shape(k)[1]}" for k in self.kinds)
        return f"AttentionMaps({len(self)} sentences, {dims}, model={self.model.get('name', '?')!r})"

    def shape(self, kind: str) -> tuple[int, int]:
        """(L, H): number of layers and heads of ``kind``."""
        if kind not in self.sentences[0].weights:
            raise ValueError(f"kind: {kind!r} is not in these maps (kinds: {', '.join(self.kinds)})")
        return tuple(self.sentences[0].weights[kind].shape[:2])  # type: ignore[return-value]

    def weights(self, i: int, kind: str) -> np.ndarray:
        """Weights (L, H, n_q, n_k) of sentence ``i``."""
        self.shape(kind)
        return self.sentences[i].weights[kind]

    def padded(self, kind: str, indices: Sequence[int] | None = None):
        """The sentences as one zero-padded batch, for vectorised analysis.

        Returns ``(w, q_len, k_len)``: ``w`` (S, L, H, N_q, N_k) float32 with
        N = the longest sentence, and the real lengths ``q_len``, ``k_len``
        (S,) — the ``lengths`` / ``key_lengths`` convention of
        ``attnlab.analysis.inputs``.
        """
        L, H = self.shape(kind)
        idx = range(len(self)) if indices is None else list(indices)
        mats = [self.sentences[i].weights[kind] for i in idx]
        q_len = np.array([m.shape[2] for m in mats], dtype=np.int64)
        k_len = np.array([m.shape[3] for m in mats], dtype=np.int64)
        w = np.zeros((len(mats), L, H, int(q_len.max()), int(k_len.max())), np.float32)
        for s, m in enumerate(mats):  # copy, one block per sentence
            w[s, :, :, : m.shape[2], : m.shape[3]] = m
        return w, q_len, k_len

    def select(self, indices: Sequence[int]) -> "AttentionMaps":
        """A new AttentionMaps with the sentences ``indices``."""
        return AttentionMaps([self.sentences[i] for i in indices], self.model)

    # ---- file ----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write one ``.safetensors`` file (atomic: temporary file, then rename)."""
        from safetensors.numpy import save_file

        path = Path(path)
        tensors = {
            f"{i}.{kind}": np.ascontiguousarray(s.weights[kind], dtype=np.float32)
            for i, s in enumerate(self.sentences)
            for kind in self.kinds
        }
        doc = {
            "model": self.model,
            "kinds": list(self.kinds),
            "sentences": [
                {
                    "text": s.text,
                    "target": s.target,
                    "tokens": {k: list(v) for k, v in s.tokens.items()},
                    "special": {k: [bool(b) for b in v] for k, v in s.special.items()},
                }
                for s in self.sentences
            ],
        }
        meta = {"format": FORMAT, "version": VERSION, "json": json.dumps(doc, ensure_ascii=False)}
        return write_atomic(path, lambda tmp: save_file(tensors, tmp, metadata=meta))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "AttentionMaps":
        """Read a file written by ``save``; ``UserError`` naming the file if it is not one."""
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise UserError(f"{path}: no such attention file")
        try:
            with safe_open(str(path), framework="numpy") as f:
                meta = f.metadata() or {}
                if meta.get("format") != FORMAT:
                    raise UserError(f"{path}: not an attention file (no '{FORMAT}' header)")
                if meta.get("version") != VERSION:
                    raise UserError(f"{path}: attention file version {meta.get('version')!r}, expected {VERSION}")
                doc = json.loads(meta["json"])
                arrays = {name: f.get_tensor(name) for name in f.keys()}
        except UserError:
            raise
        except Exception as err:  # safetensors raises its own error types for non-safetensors bytes
            raise UserError(f"{path}: not an attention file ({type(err).__name__}: {err})") from None
        try:
            sentences = [
                SentenceAttention(
                    text=d["text"],
                    target=d.get("target"),
                    tokens=d["tokens"],
                    special=d.get("special", {}),
                    weights={k: arrays[f"{i}.{k}"] for k in doc["kinds"]},
                )
                for i, d in enumerate(doc["sentences"])
            ]
            return cls(sentences, doc.get("model", {}))
        except (KeyError, TypeError, ValueError) as err:
            raise UserError(f"{path}: invalid attention file: {err}") from None


def _checked(s: SentenceAttention, i: int) -> SentenceAttention:
    """Validate one sentence: known kinds, 4-d finite non-negative weights matching the tokens."""
    if not isinstance(s, SentenceAttention):
        raise ValueError(f"sentences[{i}]: expected a SentenceAttention, got {type(s).__name__}")
    if not s.weights:
        raise ValueError(f"sentences[{i}]: no attention weights")
    weights = {}
    for kind, w in s.weights.items():
        name = f"sentences[{i}].weights[{kind!r}]"
        if kind not in KIND_SIDES:
            raise ValueError(f"{name}: unknown kind (expected one of {', '.join(KINDS)})")
        w = np.asarray(w, dtype=np.float32)
        # w: (L, H, n_q, n_k)
        if w.ndim != 4:
            raise ValueError(f"{name}: expected shape (L, H, n_q, n_k), got {w.shape}")
        q_side, k_side = KIND_SIDES[kind]
        for side, n in ((q_side, w.shape[2]), (k_side, w.shape[3])):
            if side not in s.tokens:
                raise ValueError(f"{name}: no {side!r} tokens")
            if len(s.tokens[side]) != n:
                raise ValueError(f"{name}: {n} {side} positions but {len(s.tokens[side])} {side} tokens")
        if not np.isfinite(w).all():
            raise ValueError(f"{name}: {int((~np.isfinite(w)).sum())} weights are NaN or Inf")
        if (w < 0).any():
            raise ValueError(f"{name}: negative weights (smallest {float(w.min()):.3g})")
        weights[kind] = w
    for side, flags in s.special.items():
        if side in s.tokens and len(flags) != len(s.tokens[side]):
            raise ValueError(f"sentences[{i}].special[{side!r}]: {len(flags)} flags for {len(s.tokens[side])} tokens")
    return SentenceAttention(
        text=s.text,
        tokens={k: [str(t) for t in v] for k, v in s.tokens.items()},
        weights=weights,
        special={k: [bool(b) for b in v] for k, v in s.special.items()},
        target=s.target,
    )

"""One joint tokenizer for both sides of a corpus: BPE, word-level or char-level.

All three are Hugging Face ``tokenizers`` pipelines with the same pieces:

- normaliser NFC (``è`` is one code point);
- pre-tokeniser ``Metaspace`` (a space becomes ``▁``, glued to the next word)
  and, for ``bpe``/``word``, ``Punctuation`` (``l'albero`` → ``▁l ' albero``);
  the ``Metaspace`` decoder turns ``▁`` back into spaces, so
  ``decode(encode(x)) == x`` for NFC text with single spaces and characters seen in
  training (Italian accents and apostrophes included);
- models: ``BPE`` (merges learnt to ``vocab_size``), ``WordLevel``, and ``BPE``
  without merges for ``char``.

Fixed special ids for every kind: ``pad 0, bos 1, eos 2, unk 3``.  Sequences:
source ``encode(src) + [eos]``, target input ``[bos] + encode(tgt)``, target
output ``encode(tgt) + [eos]``.  ``save`` writes one standard ``tokenizer.json``
(loadable by ``tokenizers.Tokenizer.from_file`` and ``transformers``); the kind is
read back from the model (WordLevel → word, BPE without merges → char, else bpe).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from attnlab.atomic import write_atomic
from attnlab.errors import UserError

SPECIALS = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]
MAX_VOCAB = 2**24  # the trainers allocate ~56 bytes per requested entry up front; far beyond this the process aborts


def _pipeline(model, punctuation: bool) -> HFTokenizer:
    tok = HFTokenizer(model)
    tok.normalizer = normalizers.NFC()
    meta = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([meta, pre_tokenizers.Punctuation("isolated")])
                         if punctuation else meta)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    return tok


class Tokenizer:
    """A trained tokenizer of kind ``bpe``, ``word`` or ``char`` (see the module docstring)."""

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, hf: HFTokenizer, kind: str) -> None:
        if kind not in ("bpe", "word", "char"):
            raise ValueError(f"kind must be bpe, word or char, got {kind!r}")
        for i, s in enumerate(SPECIALS):
            if hf.token_to_id(s) != i:
                raise ValueError(f"tokenizer must have {s} at id {i}")
        self.hf = hf
        self.kind = kind

    # ---------------------------------------------------------------- training
    @classmethod
    def train_bpe(cls, texts: Iterable[str], vocab_size: int = 8000, min_freq: int = 2) -> Tokenizer:
        """Byte-pair encoding: merges learnt until ``vocab_size`` pieces (specials included)."""
        if not len(SPECIALS) < vocab_size <= MAX_VOCAB:
            raise ValueError(f"vocab_size must be in ({len(SPECIALS)}, {MAX_VOCAB}], got {vocab_size}")
        tok = _pipeline(models.BPE(unk_token="[UNK]"), punctuation=True)
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_freq,
                                      special_tokens=SPECIALS, show_progress=False)
        tok.train_from_iterator(texts, trainer)
        return cls(tok, "bpe")

    @classmethod
    def train_word(cls, texts: Iterable[str], vocab_size: int | None = None, min_freq: int = 1) -> Tokenizer:
        """Word-level: the ``vocab_size`` most frequent words (punctuation split off), others unk."""
        if vocab_size is not None and not len(SPECIALS) < vocab_size <= MAX_VOCAB:
            raise ValueError(f"vocab_size must be in ({len(SPECIALS)}, {MAX_VOCAB}] or None, got {vocab_size}")
        tok = _pipeline(models.WordLevel(unk_token="[UNK]"), punctuation=True)
        trainer = trainers.WordLevelTrainer(vocab_size=vocab_size or MAX_VOCAB, min_frequency=min_freq,
                                            special_tokens=SPECIALS, show_progress=False)
        tok.train_from_iterator(texts, trainer)
        return cls(tok, "word")

    @classmethod
    def train_char(cls, texts: Iterable[str]) -> Tokenizer:
        """Character-level: one piece per character seen (``▁`` for the space)."""
        chars: set[str] = set()
        norm = normalizers.NFC()
        for t in texts:
            chars.update(norm.normalize_str(t).replace(" ", "▁"))
        chars.add("▁")
        vocab = {s: i for i, s in enumerate(SPECIALS)}
        for c in sorted(chars - set(vocab)):
            vocab[c] = len(vocab)
        tok = _pipeline(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]"), punctuation=False)
        tok.add_special_tokens(SPECIALS)
        return cls(tok, "char")

    # ---------------------------------------------------------------- use
    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens)."""
        return self.hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` of many texts at once (parallel, in Rust)."""
        return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; special tokens are skipped."""
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=True)

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        return self.hf.decode_batch([[int(i) for i in ids] for ids in batch], skip_special_tokens=True)

    def pieces(self, text: str) -> list[str]:
        """The token strings of ``encode(text)`` (``▁`` marks a word start), for plot axes."""
        return self.hf.encode(text, add_special_tokens=False).tokens

    def id_to_piece(self, i: int) -> str:
        piece = self.hf.id_to_token(int(i))
        if piece is None:
            raise ValueError(f"id {i} is outside the vocabulary (size {self.vocab_size})")
        return piece

    # ---------------------------------------------------------------- files
    def save(self, path: str | Path) -> Path:
        """Write ``tokenizer.json`` atomically: ``path`` is the ``.json`` file, or a folder to put it in (created)."""
        path = Path(path)
        if path.is_dir() or path.suffix.lower() != ".json":
            path.mkdir(parents=True, exist_ok=True)
            path = path / "tokenizer.json"
        return write_atomic(path, self.hf.save)

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Read a ``tokenizer.json`` written by :meth:`save` (or its directory)."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        try:
            text = path.read_text(encoding="utf-8")
            model = json.loads(text)["model"]
            hf = HFTokenizer.from_str(text)
        except FileNotFoundError:
            raise UserError(f"{path}: no tokenizer file") from None
        except (ValueError, KeyError, TypeError, Exception) as err:
            raise UserError(f"{path}: not a valid tokenizer.json ({' '.join(str(err).split())[:200]})") from None
        kind = {"WordLevel": "word"}.get(model.get("type"), "char" if not model.get("merges") else "bpe")
        try:
            return cls(hf, kind)
        except ValueError as err:
            raise UserError(f"{path}: {err}") from None

    def __repr__(self) -> str:
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size})"

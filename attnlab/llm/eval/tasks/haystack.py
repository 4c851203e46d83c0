"""Haystacks: the text a needle hides in, as a stream of tokens cut to any exact length.

* ``noise``: RULER's repeated sentences "The grass is green. The sky is blue. The sun is yellow.
  Here we go. There and back again." (one per line);
* a text file (``--haystack FILE``, plain or .gz; Shakespeare's test plays by default): its lines as
  they are.  A prompt never holds the same stretch of text twice: a file shorter than the longest
  prompt is refused (``Haystack.tokens``).

Pieces are tokenised apart (head, haystack, needle, question) so that a prompt's length in tokens is
exact; every piece starts at a line break, where the tokenizers of BPE models split anyway.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.errors import UserError

__all__ = ["NOISE", "Haystack"]

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."


class Haystack:
    """A token stream to cut haystacks from: ``Haystack.noise(tok)`` or ``Haystack.file(tok, path)``."""

    def __init__(self, name: str, ids: list[int], period: int | None, source: str):
        self.name, self.ids, self.period, self.source = name, ids, period, source

    @classmethod
    def noise(cls, tokenizer) -> "Haystack":
        unit = tokenizer("\n" + NOISE, add_special_tokens=False).input_ids
        return cls("noise", unit, len(unit), "RULER noise sentences")

    @classmethod
    def file(cls, tokenizer, path: str | Path, max_tokens: int | None = None) -> "Haystack":
        from attnlab.llm.models.text_windows import read_text

        return cls.of_text(tokenizer, read_text(Path(path)), path, max_tokens)

    @classmethod
    def of_text(cls, tokenizer, text: str, path: str | Path, max_tokens: int | None = None) -> "Haystack":
        """The haystack of the file ``path`` whose ``text`` was read already."""
        text = "\n" + "\n".join(text.splitlines())
        if max_tokens:  # tokenise only what the longest prompt can use (≈ 8 characters a token at most)
            text = text[: 8 * max_tokens + 1024]
        return cls(Path(path).name, tokenizer(text, add_special_tokens=False).input_ids, None, str(path))

    def tokens(self, count: int, start: int = 0, option: str = "--haystack") -> list[int]:
        """``count`` tokens of the stream from ``start`` (the noise repeats; a file must hold them)."""
        if self.period:
            reps = (start + count) // self.period + 1
            return (self.ids * reps)[start : start + count]
        if start + count > len(self.ids):
            raise UserError(f"{option} {self.source}: {len(self.ids)} tokens, "
                            f"shorter than the {start + count} a prompt needs")
        return self.ids[start : start + count]

    def boundaries(self, ids: list[int], tokenizer) -> list[int]:
        """Positions p of ``ids`` after which a sentence or a line ends (where a needle may go), 0 included."""
        texts = tokenizer.batch_decode([[t] for t in ids])
        return [0] + [p + 1 for p, t in enumerate(texts) if "\n" in t or t.rstrip()[-1:] in (".", "!", "?", ";")]

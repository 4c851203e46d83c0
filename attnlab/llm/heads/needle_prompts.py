"""Needle prompts of an exact token length, for retrieval heads:
``needle_prompts(tokenizer, n, count) -> [CopyPrompt]``.

A prompt of n tokens (teacher forcing: the answer is already in the input)::

    [start] haystack[:a] needle haystack[a:] question  v_1 … v_{m−1}
            needle   = " The special magic number is" v_1 … v_m "."
            question = " What is the special magic number? The special magic number is"

v = the ids of " " + a random number of ``digits`` digits (the tokenizer's own
split; the same ids in the needle and in the answer).  The haystack is the
noise text of RULER's needle task ("The grass is green. The sky is blue. …"),
repeated and cut to make the length exact; the needle sits at depth
a / |haystack| = (k + ½) / count for prompt k.  The m query rows Q = the last
m positions of the prompt: row q_t (t = 1 … m) predicts v_t (the last question
token predicts v_1, v_{t−1} predicts v_t).  ``attnlab.analysis.head_detectors``
scores a head by its mean mass from Q on the needle's value positions V.

A small local generator; the RULER-style samples of ``attnlab.llm.eval.tasks``
(``Sample``: ids, the asked needle's span, the expected values) become
``CopyPrompt``s through ``from_sample``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.errors import UserError

__all__ = ["CopyPrompt", "needle_prompts", "from_sample", "encode", "start_ids"]

HAYSTACK = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
NEEDLE = " The special magic number is"
QUESTION = " What is the special magic number? The special magic number is"


@dataclass(frozen=True)
class CopyPrompt:
    """Token ids of a prompt whose last rows copy a value from earlier in it."""

    ids: list[int]               # (n,) the input, answer included but its last token (teacher forcing)
    needle: tuple[int, int]      # V = positions a:b of the value tokens in the needle
    queries: tuple[int, int]     # Q = rows c:d; row c + t predicts answer[t]
    answer: list[int]            # (d − c,) the value's token ids


def encode(tokenizer, text: str) -> list[int]:
    """Ids of ``text`` without special tokens: an attnlab ``Tokenizer`` (``encode``) or a transformers tokenizer."""
    if hasattr(tokenizer, "id_to_piece"):  # attnlab.data.Tokenizer
        return [int(i) for i in tokenizer.encode(text)]
    return [int(i) for i in tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]]


def start_ids(tokenizer) -> list[int]:
    """The special ids the tokenizer puts before a text (Gemma: [<bos>]; SmolLM2: none; an attnlab tokenizer: [bos])."""
    if hasattr(tokenizer, "id_to_piece"):
        return [int(tokenizer.bos_id)]
    with_ = list(tokenizer("a", verbose=False)["input_ids"])
    without = list(tokenizer("a", add_special_tokens=False, verbose=False)["input_ids"])
    k = len(with_) - len(without)
    return [int(i) for i in with_[:k]] if k > 0 and with_[k:k + len(without)] == without else []


def needle_prompts(tokenizer, n: int, count: int = 4, *, digits: int = 7, seed: int = 0) -> list[CopyPrompt]:
    """``count`` prompts of exactly ``n`` tokens (module docstring);
    ``UserError`` when n is too short for a haystack."""
    rng = np.random.default_rng(seed)
    start, needle_head = start_ids(tokenizer), encode(tokenizer, NEEDLE)
    dot, question = encode(tokenizer, "."), encode(tokenizer, QUESTION)
    hay_unit = encode(tokenizer, HAYSTACK)
    out = []
    for k in range(count):
        number = "".join(str(d) for d in rng.integers(0, 10, digits))
        v = encode(tokenizer, " " + number)  # (m,)
        m = len(v)
        fixed = len(start) + len(needle_head) + m + len(dot) + len(question) + m - 1
        h = n - fixed  # haystack tokens
        if h < 2:
            raise UserError(f"--length {n}: a needle prompt needs more than {fixed + 1} tokens")
        hay = (hay_unit * (h // max(len(hay_unit), 1) + 1))[:h]
        a = int(round(h * (k + 0.5) / count))
        ids = start + hay[:a] + needle_head + v + dot + hay[a:] + question + v[:-1]
        v0 = len(start) + a + len(needle_head)
        q0 = n - m
        assert len(ids) == n
        out.append(CopyPrompt(ids=ids, needle=(v0, v0 + m), queries=(q0, n), answer=v))
    return out


def from_sample(sample, tokenizer) -> CopyPrompt:
    """A ``attnlab.llm.eval.tasks.Sample`` as a ``CopyPrompt``: its first expected value v teacher-forced after the
    prompt (ids ‖ v_1 … v_{m−1}); V = the tokens of v inside the first asked needle's span (the whole span
    when v is tokenized differently there)."""
    v = encode(tokenizer, " " + sample.answers[0])  # (m,) the answer prefix ends before the value's space
    a, b = sample.spans[0]
    piece = list(sample.ids[a:b])
    at = next((k for k in range(len(piece) - len(v) + 1) if piece[k:k + len(v)] == v), None)
    needle = (a + at, a + at + len(v)) if at is not None else (a, b)
    ids = list(sample.ids) + v[:-1]
    n = len(ids)
    return CopyPrompt(ids=ids, needle=needle, queries=(n - len(v), n), answer=v)

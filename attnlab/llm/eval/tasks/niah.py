"""Needle in a haystack, after RULER's ``niah`` (NVIDIA/RULER ``scripts/data/synthetic/niah.py``).

    needle:   "One of the special magic {numbers} for {key} is: {value}."
    prompt:   "Some special magic {numbers} are hidden within the following text. Make sure to memorize it.
               I will quiz you about the {numbers} afterwards.\n{context}\nWhat are all the special magic
               {numbers} for {query} mentioned in the provided text?"
    answer:   " The special magic {numbers} for {query} mentioned in the provided text are"  (prefix; the model
              continues) — with one needle asked, RULER's singular: "A special magic number … is …".

Variants (RULER's names): ``niah`` one key, one value; ``niah-multikey`` 4 keys, one asked (3 distractor
needles); ``niah-multivalue`` one key, 4 values, all asked; ``niah-multiquery`` 4 keys, all asked.  The
asked needle sits at the depth of the grid; the other needles at depths drawn from the sample's seed.
Score: ``string_match_all`` (the fraction of expected values found in the answer).
"""

from __future__ import annotations

import random

from attnlab.llm.eval.tasks.haystack import Haystack
from attnlab.llm.eval.tasks.prompt import PromptFormat, Sample, assemble
from attnlab.llm.eval.tasks.values import draw

__all__ = ["NIAH"]

INSTRUCTION = ("Some special magic {v} are hidden within the following text. Make sure to memorize it. "
               "I will quiz you about the {v} afterwards.")
QUESTION = "\nWhat are all the special magic {v} for {query} mentioned in the provided text?"
ANSWER = " The special magic {v} for {query} mentioned in the provided text are"
NEEDLE = "One of the special magic {v} for {key} is: {value}."


def _singular(text: str) -> str:
    """RULER's rewrite of the template when one value is asked."""
    return text.replace("Some", "A").replace("are all", "is").replace(" are", " is")


class NIAH:
    """A needle task: ``keys`` needles' keys, ``values`` values per key, ``queries`` keys asked."""

    uses_depth = True

    def __init__(self, name: str, keys: int = 1, values: int = 1, queries: int = 1, key_kind: str = "words",
                 value_kind: str = "numbers", max_new: int = 32):
        self.name, self.k, self.v, self.q = name, keys, values, queries
        self.key_kind, self.value_kind, self.max_new = key_kind, value_kind, max_new

    def make(self, tokenizer, hay: Haystack, length: int, depth: float, index: int, seed: int,
             fmt: PromptFormat | None = None) -> Sample:
        rng = random.Random(f"{self.name}|{length}|{depth:.4f}|{index}|{seed}")
        keys: list[str] = []
        while len(keys) < self.k:  # distinct keys
            key = draw(self.key_kind, rng)
            if key not in keys:
                keys.append(key)
        values = [[draw(self.value_kind, rng) for _ in range(self.v)] for _ in keys]
        asked = list(range(self.q))  # keys 0 … q−1 are asked; the first needle of key 0 sits at the grid's depth
        vname = self.value_kind
        pieces, owner = [], []
        for x, key in enumerate(keys):
            for y, value in enumerate(values[x]):
                d = depth if (x, y) == (0, 0) else rng.random()
                pieces.append((d, NEEDLE.format(v=vname, key=key, value=value)))  # plural always, as RULER's needle
                owner.append(x)
        query = keys[0] if self.q == 1 else ", ".join(keys[: self.q - 1]) + ", and " + keys[self.q - 1]
        instruction, question, answer = INSTRUCTION, QUESTION, ANSWER
        if self.q * self.v == 1:
            instruction, question, answer = _singular(instruction), _singular(question), _singular(answer)
            vname = vname[:-1]
        start = rng.randrange(max(1, len(hay.ids) - 8 * length)) if not hay.period else rng.randrange(hay.period)
        ids, spans = assemble(tokenizer, hay, length, instruction.format(v=vname),
                              question.format(v=vname, query=query),
                              answer.format(v=vname, query=query), pieces, start=start, task=self.name, fmt=fmt)
        expected = [val for x in asked for val in values[x]]
        asked_spans = [s for s, x in zip(spans, owner) if x in asked]                  # the needles the answer copies
        others = [val for x in range(len(keys)) if x not in asked for val in values[x]]  # a distractor's value
        return Sample(self.name, length, depth, index, ids, expected, asked_spans, self.max_new, others)

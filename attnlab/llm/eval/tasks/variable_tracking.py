"""Variable tracking, after RULER's ``variable_tracking`` (multi-hop tracing).

    chain:   "VAR ABCDE = 12345", "VAR FGHIJ = VAR ABCDE", … (``hops`` + 1 statements, in order, at random depths)
    prompt:  "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n
              Question: Find all variables that are assigned the value {value} in the text above."
    answer:  " Answer: According to the chain(s) of variable assignment in the text above, {hops + 1} variables
              are assigned the value {value}, they are: "   → the ``hops`` + 1 names, scored by string_match_all.
"""

from __future__ import annotations

import random
import string

from attnlab.llm.eval.tasks.haystack import Haystack
from attnlab.llm.eval.tasks.prompt import PromptFormat, Sample, assemble

__all__ = ["VariableTracking"]


class VariableTracking:
    name = "vt"
    uses_depth = False
    max_new = 30

    def __init__(self, chains: int = 1, hops: int = 4):
        self.chains, self.hops = chains, hops

    def make(self, tokenizer, hay: Haystack, length: int, depth, index: int, seed: int,
             fmt: PromptFormat | None = None) -> Sample:
        rng = random.Random(f"{self.name}|{length}|{index}|{seed}")
        names: list[str] = []
        while len(names) < self.chains * (self.hops + 1):
            v = "".join(rng.choices(string.ascii_uppercase, k=5))
            if v not in names:
                names.append(v)
        pieces, first = [], None
        for c in range(self.chains):
            chain = names[c * (self.hops + 1) : (c + 1) * (self.hops + 1)]
            value = str(rng.randint(10000, 99999))
            first = first or (chain, value)
            depths = sorted(rng.random() for _ in chain)
            pieces += [(depths[0], f"VAR {chain[0]} = {value}.")]
            pieces += [(d, f"VAR {b} = VAR {a}.") for d, a, b in zip(depths[1:], chain, chain[1:])]
        chain, value = first
        start = rng.randrange(max(1, len(hay.ids) - 8 * length)) if not hay.period else rng.randrange(hay.period)
        ids, spans = assemble(
            tokenizer, hay, length,
            "Memorize and track the chain(s) of variable assignment hidden in the following text.\n",
            f"\nQuestion: Find all variables that are assigned the value {value} in the text above.",
            " Answer: According to the chain(s) of variable assignment in the text above, "
            f"{self.hops + 1} variables are assigned the value {value}, they are: ",
            pieces, start=start, task=self.name, fmt=fmt)
        return Sample(self.name, length, None, index, ids, list(chain), spans, self.max_new)

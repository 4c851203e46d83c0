"""Common words extraction, after RULER's ``common_words_extraction`` (aggregation).

    context: a numbered list "1. word\n2. word\n…" where 10 words appear ``freq_cw`` = 30 times each and the
             others ``freq_ucw`` = 3 times, shuffled;
    prompt:  "Below is a numbered list of words. In these words, some appear more often than others. Memorize the
              ones that appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?"
    answer:  " Answer: The top 10 words that appear most often in the list are:"  → the 10 words (string_match_all).

The list takes as many rare words as fit: the prompt is at most ``length`` tokens (a list cannot be cut to
the token; its length is recorded).
"""

from __future__ import annotations

import random

from attnlab.errors import UserError
from attnlab.llm.eval.tasks.haystack import Haystack
from attnlab.llm.eval.tasks.prompt import PromptFormat, Sample
from attnlab.llm.eval.tasks.values import word_pool

__all__ = ["CommonWords"]

INSTRUCTION = ("Below is a numbered list of words. In these words, some appear more often than others. "
               "Memorize the ones that appear most often.\n")
QUESTION = "\nQuestion: What are the 10 most common words in the above list?"
ANSWER = " Answer: The top 10 words that appear most often in the list are:"


class CommonWords:
    name = "cwe"
    uses_depth = False
    uses_haystack = False   # the prompt is the word list alone: no --haystack read
    max_new = 120

    def __init__(self, num_cw: int = 10, freq_cw: int = 30, freq_ucw: int = 3):
        self.num_cw, self.freq_cw, self.freq_ucw = num_cw, freq_cw, freq_ucw

    def _ids(self, tokenizer, words: list[str], rare: int, rng: random.Random, fmt: PromptFormat) -> list[int]:
        listed = [w for w in words[: self.num_cw] for _ in range(self.freq_cw)]
        listed += [w for w in words[self.num_cw : self.num_cw + rare] for _ in range(self.freq_ucw)]
        random.Random(rng.random()).shuffle(listed)
        opening, closing = fmt.opening_closing(tokenizer)
        ask, after = (QUESTION + "\n", "") if fmt.question == "before" else ("", QUESTION)
        text = opening + INSTRUCTION + ask + "\n".join(f"{i + 1}. {w}" for i, w in enumerate(listed)) + after + closing
        ids = (tokenizer(text, add_special_tokens=False).input_ids
               + tokenizer(ANSWER, add_special_tokens=False).input_ids)
        return ([tokenizer.bos_token_id] if not opening and tokenizer.bos_token_id is not None else []) + ids

    def make(self, tokenizer, hay: Haystack, length: int, depth, index: int, seed: int,
             fmt: PromptFormat | None = None) -> Sample:
        fmt = fmt or PromptFormat()
        rng = random.Random(f"{self.name}|{length}|{index}|{seed}")
        words = rng.sample(word_pool(), len(word_pool()))
        lo, hi = 0, len(words) - self.num_cw
        state = rng.getstate()
        while lo < hi:  # the most rare words whose prompt fits (the same shuffle for every try)
            mid = (lo + hi + 1) // 2
            rng.setstate(state)
            if len(self._ids(tokenizer, words, mid, rng, fmt)) <= length:
                lo = mid
            else:
                hi = mid - 1
        rng.setstate(state)
        ids = self._ids(tokenizer, words, lo, rng, fmt)
        if len(ids) > length:
            raise UserError(f"--lengths: {length} tokens cannot hold the cwe list "
                            f"({self.num_cw} words × {self.freq_cw} take {len(ids)} tokens)")
        return Sample(self.name, length, None, index, ids, words[: self.num_cw], [], self.max_new)

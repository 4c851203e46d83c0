"""The pass-key retrieval task of Mohtashami & Jaggi (2023, "Landmark Attention"), and its common variants.

    prompt:   "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them.
               I will quiz you about the important information there."
              {haystack: "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again." …}
              "The pass key is 71432. Remember it. 71432 is the pass key."      (at the grid's depth)
              {haystack …}
              "What is the pass key? The pass key is"                            (the model continues)
    key:      a 5-digit number;   score: ``string_match_all`` (the key in the answer).

Variants (``TASKS``): ``passkey`` the paper's prompt; ``passkey-once`` the key stated once ("The pass key is
71432."); ``passkey-bare`` no instruction before the context (a plain probe a user writes); ``passkey-varied``
per sample, from its seed: with or without an instruction, the key once or twice, one of several phrasings of
the needle, the question and the answer prefix.  The haystack is the eval's (``--haystack noise``: the paper's
filler; a text file: real text).  The calibration (``calibration.mix``) draws from ``for_calibration()``: the
same task with phrasings and instructions the evaluation never uses (and its own seeds).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from attnlab.llm.eval.tasks.haystack import Haystack
from attnlab.llm.eval.tasks.prompt import PromptFormat, Sample, assemble

__all__ = ["CALIBRATION_PHRASINGS", "EVAL_PHRASINGS", "PassKey", "Phrasing"]


@dataclass(frozen=True)
class Phrasing:
    """One way to say it: the needle with the key once and twice, the question, the answer prefix (``{key}``)."""

    once: str
    twice: str
    question: str
    answer: str


PAPER = Phrasing("The pass key is {key}.", "The pass key is {key}. Remember it. {key} is the pass key.",
                 "What is the pass key?", " The pass key is")
EVAL_PHRASINGS = (
    PAPER,
    Phrasing("The secret code is {key}.", "The secret code is {key}. Keep it in mind. {key} is the secret code.",
             "What is the secret code?", " The secret code is"),
    Phrasing("Remember this access number: {key}.", "Remember this access number: {key}. The access number is {key}.",
             "What is the access number?", " The access number is"),
    Phrasing("The password for the vault is {key}.",
             "The password for the vault is {key}. I repeat, the vault password is {key}.",
             "What is the password for the vault?", " The password for the vault is"),
)
CALIBRATION_PHRASINGS = (   # never in an evaluation prompt (tests/test_llm_passkey.py)
    Phrasing("The hidden number is {key}.", "The hidden number is {key}. Do not forget it. {key} is the hidden number.",
             "Which number was hidden in the text?", " The hidden number is"),
    Phrasing("Your PIN is {key}.", "Your PIN is {key}. Write it down. {key} is your PIN.", "What is your PIN?",
             " Your PIN is"),
    Phrasing("The locker combination is {key}.",
             "The locker combination is {key}. Memorize it. {key} is the locker combination.",
             "What is the locker combination?", " The locker combination is"),
)
INSTRUCTION = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
               "I will quiz you about the important information there.")
EVAL_INSTRUCTIONS = (INSTRUCTION,
                     "Read the text below carefully: a number is hidden in it, and you will be asked for it.")
CALIBRATION_INSTRUCTIONS = ("Somewhere in the following document is a number worth remembering.",)


class PassKey:
    """The pass-key task: ``instruction`` / ``twice`` True, False or None (None: drawn per sample), phrasings drawn
    per sample from ``phrasings`` (one: always it)."""

    uses_depth = True
    max_new = 12

    def __init__(self, name: str, instruction: bool | None = True, twice: bool | None = True,
                 phrasings: tuple[Phrasing, ...] = (PAPER,), instructions: tuple[str, ...] = (INSTRUCTION,)):
        self.name, self.instruction, self.twice = name, instruction, twice
        self.phrasings, self.instructions = phrasings, instructions

    def for_calibration(self) -> "PassKey":
        """The same variant with the calibration's phrasings and instructions (none of the evaluation's)."""
        return PassKey(self.name, self.instruction, self.twice, CALIBRATION_PHRASINGS, CALIBRATION_INSTRUCTIONS)

    def make(self, tokenizer, hay: Haystack, length: int, depth: float, index: int, seed: int,
             fmt: PromptFormat | None = None) -> Sample:
        rng = random.Random(f"{self.name}|{length}|{depth:.4f}|{index}|{seed}")
        key = str(rng.randint(10000, 99999))
        say = rng.choice(self.phrasings)
        with_instruction = rng.random() < 0.5 if self.instruction is None else self.instruction
        twice = rng.random() < 0.5 if self.twice is None else self.twice
        instruction = rng.choice(self.instructions) + "\n" if with_instruction else ""
        needle = (say.twice if twice else say.once).format(key=key)
        # the filler from a sentence's start
        start = rng.randrange(max(1, len(hay.ids) - 8 * length)) if not hay.period else 0
        fmt = fmt or PromptFormat()
        # after: the question right after the context, then the answer prefix ("What is the pass key? The pass key is");
        # before: the question on its own line before the context
        question = "\n" + say.question if fmt.question == "after" else say.question + "\n"
        chat = fmt.opening_closing(tokenizer)[1]      # the chat template's closing starts the answer on its own line
        answer = say.answer if fmt.question == "after" or chat else "\n" + say.answer.lstrip()
        ids, spans = assemble(tokenizer, hay, length, instruction, question, answer, [(depth, needle)], start=start,
                              task=self.name, fmt=fmt)
        return Sample(self.name, length, depth, index, ids, [key], spans, self.max_new)

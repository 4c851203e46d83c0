"""Long-context tasks generated locally and seeded (after NVIDIA/RULER's synthetic tasks), no download.

    TASKS["niah"].make(tokenizer, haystack, length, depth, index, seed) → Sample (exactly ``length`` tokens)

Tasks: ``niah`` (one needle: key a word, value a 7-digit number), ``niah-words``, ``niah-uuids``
(values of those kinds), ``niah-multikey`` (3 distractor needles), ``niah-multivalue`` (4 values of one
key), ``niah-multiquery`` (4 keys asked), ``vt`` (variable tracking, 1 chain of 4 hops), ``cwe``
(common words extraction); ``passkey`` (Mohtashami & Jaggi's pass key) and its variants ``passkey-once``,
``passkey-bare``, ``passkey-varied`` (``passkey.py``).  Haystacks (``haystack.Haystack``):
RULER's noise sentences or any text file.
"""

from attnlab.llm.eval.tasks.common_words import CommonWords
from attnlab.llm.eval.tasks.haystack import NOISE, Haystack
from attnlab.llm.eval.tasks.niah import NIAH
from attnlab.llm.eval.tasks.passkey import EVAL_INSTRUCTIONS, EVAL_PHRASINGS, PassKey
from attnlab.llm.eval.tasks.prompt import QUESTIONS, TEMPLATES, PromptFormat, Sample, assemble, chat_parts, sample_key
from attnlab.llm.eval.tasks.scoring import string_match_all
from attnlab.llm.eval.tasks.variable_tracking import VariableTracking

__all__ = ["NOISE", "QUESTIONS", "TASKS", "TEMPLATES", "Haystack", "PromptFormat", "Sample", "assemble", "chat_parts",
           "sample_key", "string_match_all"]

TASKS = {
    "niah": NIAH("niah"),
    "niah-words": NIAH("niah-words", value_kind="words"),
    "niah-uuids": NIAH("niah-uuids", value_kind="uuids", max_new=48),
    "niah-multikey": NIAH("niah-multikey", keys=4),
    "niah-multivalue": NIAH("niah-multivalue", values=4, max_new=64),
    "niah-multiquery": NIAH("niah-multiquery", keys=4, queries=4, max_new=64),
    "vt": VariableTracking(),
    "cwe": CommonWords(),
    "passkey": PassKey("passkey"),
    "passkey-once": PassKey("passkey-once", twice=False),
    "passkey-bare": PassKey("passkey-bare", instruction=False),
    "passkey-varied": PassKey("passkey-varied", instruction=None, twice=None, phrasings=EVAL_PHRASINGS,
                              instructions=EVAL_INSTRUCTIONS),
}

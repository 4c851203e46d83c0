"""Token labels as text: tokenizer markers (``Ġ`` ``▁`` ``Ċ`` ``##`` ``</w>``) turned back into what they stand for.

    display_token("Ġking") == "king"      display_token("▁art") == "art"
    display_token("Ċ") == "↵"             display_token("##ing") == "ing"

Byte-level BPE (GPT-2, SmolLM2) writes a space as ``Ġ`` and a newline as
``Ċ``; SentencePiece (Gemma, T5) writes a space as ``▁``; WordPiece marks a
word continuation with ``##``.  Labels drop the space marker, show newlines
and tabs as ``↵`` / ``⇥``, and keep everything else as it is.
"""

from __future__ import annotations

__all__ = ["display_token", "display_tokens"]

_REPLACE = (("Ċ", "↵"), ("\n", "↵"), ("ĉ", "⇥"), ("\t", "⇥"), ("Ġ", " "), ("▁", " "), ("</w>", ""))


def display_token(token: str) -> str:
    """The text of one token for a label (module docstring); never empty (a lone space stays visible as ␣)."""
    t = str(token)
    if t.startswith("##") and len(t) > 2:
        t = t[2:]
    for marker, text in _REPLACE:
        t = t.replace(marker, text)
    t = t.strip(" ")
    return t if t else "␣"


def display_tokens(tokens) -> list[str]:
    return [display_token(t) for t in tokens]

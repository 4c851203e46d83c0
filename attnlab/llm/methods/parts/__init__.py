"""The parts a plan method is composed of (``part.Part``), by name; ``compose`` makes a method of some of them.

    retrieval-tails   the k heads of largest retrieval score read every key from the rows that ask
    key-blocks        those heads also read K key blocks of 16 on every prefill row
    other-blocks      every other planned head reads K' key blocks in the prefill
    band-floor        the least band of a planned head, and of a head in a sliding layer
    voted-cache       a retrieval head keeps at decoding the P keys its tail rows voted for
    read-back         at decoding each planned head reads back K pages of evicted keys
    decode-band       at decoding a band reads and keeps at most c keys (experimental)
    slash-lines       every planned head reads s per-input diagonals in the prefill (experimental)

In Python::

    from attnlab.llm.methods.parts import compose
    m = compose(["retrieval-tails", "key-blocks", "read-back"], budget=0.1, retrieval_heads=32, blocks=8, pages=16)

On the command line the same method is ``--method retrieval-tails+key-blocks+read-back:retrieval_heads=32:blocks=8:
pages=16``.  A part's dependency (key blocks need tails) holds in a composition as in ``attnlab-retrieval``.
"""

from __future__ import annotations

from attnlab.errors import UserError
from attnlab.llm.methods.parts.band_floor import BandFloor
from attnlab.llm.methods.parts.composed import ComposedPlan
from attnlab.llm.methods.parts.decode_band import DecodeBand
from attnlab.llm.methods.parts.key_blocks import KeyBlocks
from attnlab.llm.methods.parts.other_blocks import OtherBlocks
from attnlab.llm.methods.parts.part import Part
from attnlab.llm.methods.parts.read_back import ReadBack
from attnlab.llm.methods.parts.retrieval_tails import RetrievalTails
from attnlab.llm.methods.parts.slash_lines import SlashLines
from attnlab.llm.methods.parts.voted_cache import VotedCache

__all__ = ["ComposedPlan", "EVERY", "PARTS", "Part", "compose", "composed_class"]

EVERY: tuple[type[Part], ...] = (RetrievalTails, KeyBlocks, OtherBlocks, BandFloor, VotedCache, ReadBack, DecodeBand,
                                 SlashLines)   # the order they apply in (slash lines last: a head with blocks has none)
PARTS: dict[str, type[Part]] = {part.name: part for part in EVERY}
JOIN = "+"


def composed_class(name: str) -> type[ComposedPlan]:
    """The method class of ``name`` = part names joined by ``+`` (``retrieval-tails+key-blocks``), in EVERY's order."""
    names = name.split(JOIN)
    unknown = [x for x in names if x not in PARTS]
    if unknown or len(set(names)) < len(names):
        raise UserError(f"--method {name}: parts are written part+part, each once, of {', '.join(PARTS)}"
                        + (f"; no part {unknown[0]!r}" if unknown else ""))
    chosen = tuple(part for part in EVERY if part.name in names)
    prefill = "; ".join(part.purpose for part in chosen)
    return type("Composed", (ComposedPlan,), {"name": name, "parts": chosen, "prefill": prefill, "default_run": False,
                                              "decoding": "the cache keeps what each head's support can still read; "
                                              + prefill, "__module__": __name__})


def compose(parts, budget: float = 1.0, **options) -> ComposedPlan:
    """The method of ``parts`` (names of PARTS) at ``budget`` with the parts' ``options``."""
    return composed_class(JOIN.join(parts))(budget, **options)

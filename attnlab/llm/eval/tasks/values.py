"""The random keys and values of RULER's synthetic tasks (NVIDIA/RULER ``scripts/data/synthetic``).

    numbers: 7-digit integers 10⁶ … 10⁷ − 1;   words: "adjective-noun" pairs;   uuids: UUID4 strings.

RULER draws its words from the ``wonderwords`` lists; the lists here are a fixed local choice of
common English adjectives and nouns (no download), so every draw is reproducible from its seed.
"""

from __future__ import annotations

import random
import uuid

__all__ = ["KINDS", "draw", "word_pool"]

ADJECTIVES = (
    "able angry brave bright busy calm careful cheap clean clever cold cool curious damp dark deep dry eager early "
    "easy empty fair famous fancy fast fierce flat fresh friendly funny gentle giant glad golden good grand green "
    "happy hard heavy hollow honest huge humble icy jolly kind large late lazy light little lively long loud lucky "
    "mad magic mighty modern narrow neat nervous new noisy odd old orange plain polite poor proud quick quiet rapid "
    "rare red rich rough round royal rude sad safe salty sharp shiny short shy silent silly simple slow small smooth "
    "soft solid sour spicy steep sticky stormy strange strong sunny sweet swift tall tame tender thick thin tidy tiny "
    "tough warm weak wet wide wild wise witty young"
).split()
NOUNS = (
    "anchor apple arrow badge bakery banana basket beach bell bicycle bird blanket boat bottle bridge brush bucket "
    "button cabin camera candle canoe carpet castle cloud clock coat comet compass cookie copper cottage crayon crown "
    "desk diamond dragon drum eagle engine feather fence field flag flower forest fountain garden gate ghost glove "
    "guitar hammer harbor helmet hill horse island jacket jungle kettle kitchen kite ladder lamp lantern lemon letter "
    "lion market meadow mirror monkey mountain needle ocean orchard owl paddle palace parrot pencil piano pillow "
    "planet pocket pond puzzle rabbit river rocket saddle sail scarf shell ship shovel signal silver spoon statue "
    "stone storm sugar table temple ticket tiger tower train tree tunnel umbrella valley violin wagon wallet window "
    "wizard"
).split()

KINDS = ("numbers", "words", "uuids")


def word_pool() -> list[str]:
    """Every "adjective-noun" key, sorted (as RULER's ``words``)."""
    return sorted(f"{a}-{n}" for a in ADJECTIVES for n in NOUNS)


def draw(kind: str, rng: random.Random) -> str:
    """One random value of ``kind``: a 7-digit number, an adjective-noun word or a UUID4."""
    if kind == "numbers":
        return str(rng.randint(10**6, 10**7 - 1))
    if kind == "words":
        return f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")

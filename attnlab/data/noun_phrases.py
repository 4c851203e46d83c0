"""The synthetic corpus's phrases (``attnlab.data.synthetic``): the words of both sides with their links, and the noun
phrases, prepositional phrases and locatives of its grammar.

An English word ``_E`` and an Italian word ``_I`` (the English words it translates: its alignment links) are
linearised by the sentence; ``_Ctx`` holds the random generator and collects the dependency arcs (UD labels).
A noun phrase agrees in gender and number (article chosen by the next word, adjectives after the noun in mirror
order, possessives with the article, the Saxon genitive as ``di``); a prepositional phrase articulates its
preposition with the article (``del, allo, dall', nella, sui``).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field

from attnlab.data.lexicon import (
    ADJECTIVES,
    LOCATIVE,
    NAMES,
    NOUNS,
    NUMBERS,
    POSSESSIVES,
    PREP_STEM,
    Adj,
    Noun,
    articulated,
    definite_article,
    demonstrative,
    indefinite_article,
    vowel_initial,
)


class _E:
    """An English word (its position is fixed when the sentence is linearised)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class _I:
    """An Italian word and the English words it translates (its alignment links)."""

    __slots__ = ("text", "src")

    def __init__(self, text: str, *src: _E) -> None:
        self.text = text
        self.src = list(src)


@dataclass
class _NP:
    """A noun phrase: its words in both languages and what agreement needs."""

    en: list[_E]
    it: list[_I]
    head: _E
    gender: str
    number: str
    cats: frozenset[str]
    article: str | None = None  # definite article at it[0] (possibly elided into it[0])
    name: bool = False


@dataclass
class _Ctx:
    rng: random.Random
    max_reorder: int
    zipf_cum: list[float]  # cumulative Zipf weights of NAMES
    rels: list[tuple[_E, _E, str]] = field(default_factory=list)

    def rel(self, head: _E, dep: _E, label: str) -> None:
        self.rels.append((head, dep, label))


def _choose_adjectives(ctx: _Ctx, cats: frozenset[str], budget: int) -> list[Adj]:
    """0..budget distinct adjectives, P(k ≥ t+1 | k ≥ t) = 0.4 (a geometric stack)."""
    k = 0
    while k < budget and ctx.rng.random() < 0.4:
        k += 1
    if k == 0:
        return []
    pool = _adjectives_for(cats)
    return ctx.rng.sample(pool, min(k, len(pool)))


@functools.lru_cache(maxsize=None)
def _adjectives_for(cats: frozenset[str]) -> list[Adj]:
    return [a for a in ADJECTIVES if a.cats & cats]


@functools.lru_cache(maxsize=None)
def _nouns_for(cats: frozenset[str]) -> list[Noun]:
    return [n for n in NOUNS if n.cats & cats]


def _attach_article(art_text: str, art_src: list[_E], first: _I) -> list[_I]:
    """Article + first Italian word of the phrase, elided (``l'albero``) when the article ends in '."""
    if art_text.endswith("'"):
        return [_I(art_text + first.text, *art_src, *first.src)]
    return [_I(art_text, *art_src), first]


def _name_np(ctx: _Ctx) -> _NP:
    name, gender = ctx.rng.choices(NAMES, cum_weights=ctx.zipf_cum)[0]
    e = _E(name)
    return _NP([e], [_I(name, e)], e, gender, "sg", frozenset({"person"}), name=True)


_DETERMINERS = {"the": 40, "a": 14, "num": 8, "poss": 18, "saxon": 8, "this": 6, "that": 6}


def _noun_np(ctx: _Ctx, cats: str | frozenset[str], budget: int,
             dets: tuple[str, ...] = tuple(_DETERMINERS)) -> _NP:
    """A common-noun phrase: determiner + adjectives + noun (+ Saxon genitive), both languages."""
    rng = ctx.rng
    want = frozenset(cats.split()) if isinstance(cats, str) else cats
    noun = rng.choice(_nouns_for(want))
    kin = "kin" in noun.cats
    number = "pl" if rng.random() < 0.3 else "sg"
    det_kind = rng.choices(dets, weights=[_DETERMINERS[d] for d in dets])[0]
    if det_kind == "a":
        number = "sg"
    if det_kind == "num":
        number = "pl"
    saxon_cost = 1 if det_kind == "saxon" else 0
    if det_kind == "saxon" and budget < 1:
        det_kind, saxon_cost = "the", 0
    adjs = _choose_adjectives(ctx, noun.cats, budget - saxon_cost)
    gender = noun.gender_of(number)
    head = _E(noun.en_pl if number == "pl" else noun.en)
    adj_e = [_E(a.en) for a in adjs]
    # Italian: noun then adjectives in mirror order (the big red car → la macchina rossa grande)
    noun_i = _I(noun.it_pl if number == "pl" else noun.it, head)
    tail = [_I(a.agree(gender, number), e) for a, e in zip(reversed(adjs), reversed(adj_e))]
    for e in adj_e:
        ctx.rel(head, e, "amod")
    en_mod = adj_e + [head]
    np = _NP([], [], head, gender, number, noun.cats)
    if det_kind in ("the", "this", "that"):
        en_det_text = det_kind if det_kind == "the" else (
            {"this": "these", "that": "those"}[det_kind] if number == "pl" else det_kind)
        det = _E(en_det_text)
        ctx.rel(head, det, "det")
        art = definite_article(gender, number, noun_i.text)
        if det_kind == "the":
            np.article = art
            it_det = art
        elif det_kind == "this":
            it_det = {"m": {"sg": "questo", "pl": "questi"}, "f": {"sg": "questa", "pl": "queste"}}[gender][number]
        else:
            it_det = demonstrative(art)
        np.en = [det] + en_mod
        np.it = _attach_article(it_det, [det], noun_i) + tail
    elif det_kind == "a":
        det = _E("an" if vowel_initial(en_mod[0].text) and en_mod[0].text[0] != "h" else "a")
        ctx.rel(head, det, "det")
        np.en = [det] + en_mod
        np.it = _attach_article(indefinite_article(gender, noun_i.text), [det], noun_i) + tail
    elif det_kind == "num":
        en_num, it_num = rng.choice(NUMBERS)
        num = _E(en_num)
        ctx.rel(head, num, "nummod")
        np.en = [num] + en_mod
        np.it = [_I(it_num, num), noun_i] + tail
    elif det_kind == "poss":
        owner = rng.choice(list(POSSESSIVES))
        poss = _E(owner)
        ctx.rel(head, poss, "nmod:poss")
        forms = POSSESSIVES[owner]
        poss_i = _I(forms[(gender == "f") + 2 * (number == "pl")], poss)
        np.en = [poss] + en_mod
        if kin and number == "sg" and not adjs and owner != "their":
            np.it = [poss_i, noun_i]  # mia sorella, suo zio: no article
        else:  # la mia casa, il suo medaglione, i miei fratelli
            art = definite_article(gender, number, poss_i.text)
            np.article = art
            np.it = [_I(art, poss), poss_i, noun_i] + tail
    else:  # saxon genitive: Anna's red car → la macchina rossa di Anna
        if rng.random() < 0.7:
            owner_np = _name_np(ctx)
            owner_np.head.text += "'s"
        else:
            owner_np = _noun_np(ctx, "person animal", 0, dets=("the",))
            owner_np.head.text += "'s"
            owner_np.number = "sg"
        ctx.rel(head, owner_np.head, "nmod:poss")
        art = definite_article(gender, number, noun_i.text)
        np.article = art
        np.en = owner_np.en + en_mod
        np.it = (_attach_article(art, [owner_np.head], noun_i) + tail
                 + _prep_phrase_it("di", [owner_np.head], owner_np))
    return np


def _prep_phrase_it(prep: str, prep_src: list[_E], np: _NP) -> list[_I]:
    """Italian preposition + noun phrase, with the articulated forms (di + il = del, a + Anna = ad Anna)."""
    if np.article is not None and prep in PREP_STEM:
        first = np.it[0]
        if np.article == "l'":  # l'albero → dell'albero
            merged = _I(articulated(prep, "l'") + first.text[2:], *prep_src, *first.src)
        else:
            merged = _I(articulated(prep, np.article), *prep_src, *first.src)
        return [merged] + np.it[1:]
    if " " in prep:  # vicino a + il fiume → vicino al fiume
        first, rest = prep.split(" ", 1)
        return [_I(first, *prep_src)] + _prep_phrase_it(rest, prep_src, np)
    if prep == "a" and np.it[0].text[:1].lower() == "a":
        prep = "ad"  # ad Anna
    return [_I(prep, *prep_src)] + np.it


_MOTION_TO = [("to", "a", "place")]
_STATIC = [p for p in LOCATIVE if p[0] not in ("with", "without", "from")]


def _locative(ctx: _Ctx, budget: int, preps: list[tuple[str, str, str]] = LOCATIVE
              ) -> tuple[list[_E], list[_I], _E]:
    """A locative phrase (in the garden → nel giardino); returns (en, it, head noun)."""
    en_p, it_p, cats = ctx.rng.choice(preps)
    np = (_name_np(ctx) if "person" in cats and ctx.rng.random() < 0.4
          else _noun_np(ctx, cats, budget))
    p = _E(en_p)
    ctx.rel(np.head, p, "case")
    return [p] + np.en, _prep_phrase_it(it_p, [p], np), np.head

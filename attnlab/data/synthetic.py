"""The built-in synthetic English → Italian corpus, with gold alignments and dependencies: the grammar.

A small generative grammar (its words and their forms: ``attnlab.data.lexicon``; its noun and prepositional
phrases: ``attnlab.data.noun_phrases``; the clauses and sentences here): English sentences from a lexicon of ~200 common
words plus ~300 proper names (drawn with Zipf frequencies ``p(r) ∝ r^{-s}``, the
rare-token tail of the Σ3 family), and their Italian translations written by
hand-coded rules of Italian grammar:

- gender and number agreement: articles ``il/lo/l'/la/i/gli/le`` (chosen by the
  next word: ``lo zaino``, ``l'albero``, ``gli amici``), adjectives, clitics,
  predicative adjectives (``she is tired`` → ``è stanca``);
- adjectives after the noun, stacked in mirror order:
  ``the big red car`` → ``la macchina rossa grande`` (reordering distance = #adjectives);
- object clitics before the verb with subject drop: ``she sees him`` → ``lo vede``;
  ``she gives the book to him`` → ``gli dà il libro``; ``... and washes it`` → ``e la lava``;
- possessives with the article (none for a singular kinship noun):
  ``my house`` → ``la mia casa``, ``my sister`` → ``mia sorella``,
  ``she speaks of her locket`` → ``parla del suo medaglione``;
- articulated prepositions ``di/a/da/in/su`` + article: ``del, allo, dall', nella, sui, ...``;
- Saxon genitive: ``Anna's red car`` → ``la macchina rossa di Anna``;
- frequency adverbs after the verb (``she often reads`` → ``legge spesso``), negation
  ``non`` (``never`` → ``non ... mai``), ``there is`` → ``c'è``.

Each pair carries its gold word alignment (links ``(i, j)`` between source word
``i`` and target word ``j``, whitespace words) and the dependency arcs of the
source ``(head, dependent, label)`` (UD labels).  ``max_reorder`` bounds the
reordering distance of the alignment (:func:`attnlab.data.alignment.reorder_distance`):
every pair satisfies ``reorder_distance(alignment) <= max_reorder``.
Generation is deterministic given ``seed``.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from attnlab.data.alignment import reorder_distance
from attnlab.data.corpus import Pair
from attnlab.data.lexicon import (
    DITRANSITIVE,
    FREQ_ADV,
    INTRANSITIVE,
    LOCATIVE,
    MOTION,
    NAMES,
    PREPOSITIONAL,
    PRONOUNS,
    TIME_ADV,
    TRANSITIVE,
    conjugate,
    english_3sg,
    vowel_initial,
)
from attnlab.data.noun_phrases import (  # the phrases the clauses are made of
    _E,
    _I,
    _MOTION_TO,
    _STATIC,
    _adjectives_for,
    _Ctx,
    _locative,
    _name_np,
    _noun_np,
    _prep_phrase_it,
)


@dataclass
class _Subject:
    en: list[_E]
    it: list[_I]  # empty for a pronoun: Italian drops it
    person: int  # 0..5 = io tu lui/lei noi voi loro
    gender: str
    number: str
    head: _E
    cats: frozenset[str]


def _subject(ctx: _Ctx, budget: int) -> _Subject:
    """A subject: a pronoun (dropped in Italian), a name, or a noun phrase of a person or animal."""
    r = ctx.rng.random()
    if r < 0.4:
        text, person, gender = ctx.rng.choice(PRONOUNS)
        e = _E(text)
        return _Subject([e], [], person, gender, "pl" if person >= 3 else "sg", e, frozenset({"person"}))
    np = _name_np(ctx) if r < 0.6 else _noun_np(ctx, "person animal", budget)
    return _Subject(np.en, np.it, 5 if np.number == "pl" else 2, np.gender, np.number, np.head, np.cats)


def _object_pronoun(ctx: _Ctx) -> tuple[_E, str, str, str]:
    """(english word, clitic, tonic, dative clitic) for him/her/them."""
    text, cl, tonic, dat = ctx.rng.choice([("him", "lo", "lui", "gli"), ("her", "la", "lei", "le"),
                                           ("them", "li", "loro", "gli")])
    return _E(text), cl, tonic, dat


def _clitic_verb(clitic: str, clitic_src: list[_E], verb: _I) -> list[_I]:
    """Clitic before the verb; ``lo/la`` elide before a vowel (``l'ama``, ``l'ha``)."""
    if clitic in ("lo", "la") and vowel_initial(verb.text):
        return [_I("l'" + verb.text, *clitic_src, *verb.src)]
    return [_I(clitic, *clitic_src), verb]


def _predicate(ctx: _Ctx, subj_person: int, subj_en_3sg: bool, infinitive: str, en_base: str,
               budget: int) -> tuple[list[_E], list[_I], list[_I], _E, bool]:
    """Verb group: (en words before+incl. verb, it words before the verb, it verb group, verb head, negated).

    English: [does not | often | never] VERB; Italian: [non] (clitic slot) VERB [spesso | mai].
    The Italian pre-verbal words and the verb are returned separately so a clitic can go between.
    """
    rng = ctx.rng
    forms = conjugate(infinitive)
    choice = rng.choices(["plain", "neg", "freq", "never"], weights=[60, 15, 18, 7])[0]
    if budget < 1 and choice != "plain":
        choice = "plain"
    verb_en_text = english_3sg(en_base) if subj_en_3sg else en_base
    if choice == "plain":
        v = _E(verb_en_text)
        return [v], [], [_I(forms[subj_person], v)], v, False
    if choice == "neg":
        aux = _E("does" if subj_en_3sg else "do")
        neg = _E("not")
        v = _E(en_base)
        ctx.rel(v, aux, "aux")
        ctx.rel(v, neg, "advmod")
        return [aux, neg, v], [_I("non", neg)], [_I(forms[subj_person], v, aux)], v, True
    if choice == "freq":
        en_adv, it_adv = rng.choice(FREQ_ADV)
        adv = _E(en_adv)
        v = _E(verb_en_text)
        ctx.rel(v, adv, "advmod")
        return [adv, v], [], [_I(forms[subj_person], v), _I(it_adv, adv)], v, False
    adv = _E("never")
    v = _E(verb_en_text)
    ctx.rel(v, adv, "advmod")
    return [adv, v], [_I("non", adv)], [_I(forms[subj_person], v), _I("mai", adv)], v, True


def _time_adverbial(ctx: _Ctx, root: _E) -> tuple[list[_E], list[_I]]:
    """today → oggi, every day → ogni giorno, in the morning → la mattina (monotone)."""
    en_t, it_t, links, arcs = ctx.rng.choice(TIME_ADV)
    en = [_E(w) for w in en_t.split()]
    it = [_I(w) for w in it_t.split()]
    for e, js in zip(en, links):
        for j in js:
            it[j].src.append(e)
    for h, d, label in arcs:
        ctx.rel(root if h < 0 else en[h], en[d], label)
    return en, it


def _clause(ctx: _Ctx) -> tuple[list[_E], list[_I], _E]:
    """One sentence: (english words, italian words, root)."""
    rng = ctx.rng
    budget = ctx.max_reorder
    kind = rng.choices(["tr", "prep", "ditr", "intr", "motion", "cop", "there", "coord"],
                       weights=[30, 9, 9, 13, 6, 12, 8, 13])[0]
    if kind == "there":
        np = _noun_np(ctx, "person animal thing food", budget, dets=("a", "num"))
        there, be = _E("there"), _E("is" if np.number == "sg" else "are")
        ctx.rel(be, there, "expl")
        ctx.rel(be, np.head, "nsubj")
        it = [_I("c'è", there, be)] if np.number == "sg" else [_I("ci", there), _I("sono", be)]
        en, it = [there, be] + np.en, it + np.it
        loc_en, loc_it, loc_head = _locative(ctx, budget, _STATIC)
        ctx.rel(be, loc_head, "obl")
        return en + loc_en, it + loc_it, be
    if kind == "cop":
        s = _subject(ctx, budget)
        be = _E({0: "am", 1: "are", 2: "is"}.get(s.person, "are"))
        neg = budget >= 1 and rng.random() < 0.2
        if rng.random() < 0.6:  # the car is red → la macchina è rossa; she is tired → è stanca
            adj = rng.choice(_adjectives_for(s.cats))
            pred = _E(adj.en)
            pred_en, pred_it, root = [pred], [_I(adj.agree(s.gender, s.number), pred)], pred
        else:  # the cat is under the table → il gatto è sotto il tavolo
            pred_en, pred_it, root = _locative(ctx, budget, _STATIC)
        ctx.rel(root, be, "cop")
        ctx.rel(root, s.head, "nsubj")
        be_i = _I(conjugate("essere")[s.person], be)
        if neg:  # is not → non è
            no = _E("not")
            ctx.rel(root, no, "advmod")
            return s.en + [be, no] + pred_en, s.it + [_I("non", no), be_i] + pred_it, root
        return s.en + [be] + pred_en, s.it + [be_i] + pred_it, root
    s = _subject(ctx, budget)
    s_en, s_it, person, s_head = s.en, s.it, s.person, s.head
    third_sg = person == 2
    if kind in ("intr", "motion"):
        en_b, it_inf = rng.choice(INTRANSITIVE if kind == "intr" else MOTION)
        v_en, pre_it, v_it, v, _ = _predicate(ctx, person, third_sg, it_inf, en_b, budget)
        ctx.rel(v, s_head, "nsubj")
        loc_en, loc_it, loc_head = _locative(ctx, budget, LOCATIVE if kind == "intr" else _MOTION_TO)
        ctx.rel(v, loc_head, "obl")
        return s_en + v_en + loc_en, s_it + pre_it + v_it + loc_it, v
    if kind == "prep":
        en_b, it_inf, cats, en_p, it_p = rng.choice(PREPOSITIONAL)
        v_en, pre_it, v_it, v, _ = _predicate(ctx, person, third_sg, it_inf, en_b, budget)
        ctx.rel(v, s_head, "nsubj")
        p = _E(en_p)
        if rng.random() < 0.25:  # thinks of him → pensa a lui (tonic pronoun)
            o, _, tonic, _ = _object_pronoun(ctx)
            ctx.rel(v, o, "obl")
            ctx.rel(o, p, "case")
            return s_en + v_en + [p, o], s_it + pre_it + v_it + [_I(it_p, p), _I(tonic, o)], v
        np = _noun_np(ctx, cats, budget)
        ctx.rel(v, np.head, "obl")
        ctx.rel(np.head, p, "case")
        return s_en + v_en + [p] + np.en, s_it + pre_it + v_it + _prep_phrase_it(it_p, [p], np), v
    if kind == "ditr":
        en_b, it_inf, cats = rng.choice(DITRANSITIVE)
        v_en, pre_it, v_it, v, _ = _predicate(ctx, person, third_sg, it_inf, en_b, budget)
        ctx.rel(v, s_head, "nsubj")
        obj = _noun_np(ctx, cats, budget)
        ctx.rel(v, obj.head, "obj")
        to = _E("to")
        if rng.random() < 0.4 and budget >= 1:  # gives the book to him → gli dà il libro
            o, _, _, dat = _object_pronoun(ctx)
            ctx.rel(v, o, "obl")
            ctx.rel(o, to, "case")
            it = s_it + pre_it + [_I(dat, to, o)] + v_it + obj.it
        else:
            rec = _name_np(ctx) if rng.random() < 0.5 else _noun_np(ctx, "person", budget)
            o = rec.head
            ctx.rel(v, o, "obl")
            ctx.rel(o, to, "case")
            it = s_it + pre_it + v_it + obj.it + _prep_phrase_it("a", [to], rec)
            return s_en + v_en + obj.en + [to] + rec.en, it, v
        return s_en + v_en + obj.en + [to, o], it, v
    en_b, it_inf, cats, particle = rng.choice(TRANSITIVE)
    v_en, pre_it, v_it, v, _ = _predicate(ctx, person, third_sg, it_inf, en_b, budget)
    ctx.rel(v, s_head, "nsubj")
    part = [_E(particle)] if particle else []
    if kind == "tr" and "person" in cats and budget >= 1 and rng.random() < 0.35:
        o, clitic, _, _ = _object_pronoun(ctx)  # she sees him → lo vede
        if part:
            ctx.rel(v, o, "obl")
            ctx.rel(o, part[0], "case")
            v_it[0].src.extend(part)
        else:
            ctx.rel(v, o, "obj")
        en = s_en + v_en + part + [o]
        it = s_it + pre_it + _clitic_verb(clitic, [o], v_it[0]) + v_it[1:]
    else:
        obj = _noun_np(ctx, cats, budget)
        if part:
            ctx.rel(v, obj.head, "obl")
            ctx.rel(obj.head, part[0], "case")
            v_it[0].src.extend(part)
        else:
            ctx.rel(v, obj.head, "obj")
        en = s_en + v_en + part + obj.en
        it = s_it + pre_it + v_it + obj.it
        if kind == "coord":  # ... and washes it → e la lava
            options = [t for t in TRANSITIVE if not t[3] and t[1] != it_inf and frozenset(t[2].split()) & obj.cats
                       and "person" not in obj.cats]
            if options and budget >= 1:
                en_b2, it_inf2, _, _ = rng.choice(options)
                and_ = _E("and")
                v2 = _E(english_3sg(en_b2) if third_sg else en_b2)
                it_pron = _E("it" if obj.number == "sg" else "them")
                clitic = {("m", "sg"): "lo", ("f", "sg"): "la", ("m", "pl"): "li", ("f", "pl"): "le"}[
                    (obj.gender, obj.number)]
                ctx.rel(v, v2, "conj")
                ctx.rel(v2, and_, "cc")
                ctx.rel(v2, it_pron, "obj")
                en += [and_, v2, it_pron]
                it += [_I("e", and_)] + _clitic_verb(clitic, [it_pron], _I(conjugate(it_inf2)[person], v2))
                return en, it, v
    if rng.random() < 0.3:
        loc_en, loc_it, loc_head = _locative(ctx, 0)
        ctx.rel(v, loc_head, "obl")
        en, it = en + loc_en, it + loc_it
    return en, it, v


def _sentence(ctx: _Ctx) -> tuple[list[_E], list[_I], list[tuple[_E, _E, str]]]:
    ctx.rels = []
    en, it, root = _clause(ctx)
    if ctx.rng.random() < 0.12:  # she reads the book and we sleep → legge il libro e dormiamo
        en_c, it_c = ctx.rng.choice([("and", "e"), ("but", "ma"), ("because", "perché"), ("while", "mentre")])
        c = _E(en_c)
        en2, it2, root2 = _clause(ctx)
        ctx.rel(root, root2, "conj" if en_c in ("and", "but") else "advcl")
        ctx.rel(root2, c, "cc" if en_c in ("and", "but") else "mark")
        en, it = en + [c] + en2, it + [_I(it_c, c)] + it2
    if ctx.rng.random() < 0.2:
        t_en, t_it = _time_adverbial(ctx, root)
        if ctx.rng.random() < 0.3:  # today she sees him → oggi lo vede
            en, it = t_en + en, t_it + it
        else:
            en, it = en + t_en, it + t_it
    return en, it, ctx.rels


def _to_pair(en: list[_E], it: list[_I], rels: list[tuple[_E, _E, str]]) -> Pair:
    pos = {id(e): i for i, e in enumerate(en)}
    alignment = tuple(sorted({(pos[id(e)], j) for j, w in enumerate(it) for e in w.src}))
    relations = tuple(sorted(((pos[id(h)], pos[id(d)], lab) for h, d, lab in rels
                              if id(h) in pos and id(d) in pos), key=lambda r: (r[1], r[0])))
    return Pair(" ".join(e.text for e in en), " ".join(w.text for w in it), alignment, relations)


def zipf_weights(n: int, s: float = 1.1) -> list[float]:
    """Zipf frequencies ``p(r) ∝ r^{-s}``, r = 1..n (unnormalised)."""
    return [r ** -s for r in range(1, n + 1)]


def generate(n_pairs: int, seed: int = 0, max_reorder: int = 3, min_words: int = 4,
             max_words: int = 20, zipf_s: float = 1.1) -> list[Pair]:
    """``n_pairs`` sentence pairs of the synthetic grammar, deterministic given ``seed``.

    Every pair has ``min_words ≤ #source words ≤ max_words`` and
    ``reorder_distance(alignment) ≤ max_reorder`` (sentences that would exceed it
    are redrawn).  ``zipf_s`` is the exponent of the proper-noun frequencies.
    """
    if n_pairs < 0:
        raise ValueError(f"n_pairs must be >= 0, got {n_pairs}")
    if max_reorder < 0:
        raise ValueError(f"max_reorder must be >= 0, got {max_reorder}")
    if not 1 <= min_words <= max_words:
        raise ValueError(f"need 1 <= min_words <= max_words, got {min_words}, {max_words}")
    ctx = _Ctx(random.Random(seed), max_reorder, list(itertools.accumulate(zipf_weights(len(NAMES), zipf_s))))
    pairs: list[Pair] = []
    misses = 0
    while len(pairs) < n_pairs:
        en, it, rels = _sentence(ctx)
        pair = _to_pair(en, it, rels)
        if min_words <= len(en) <= max_words and reorder_distance(pair.alignment) <= max_reorder:
            pairs.append(pair)
            misses = 0
        else:
            misses += 1
            if misses > 10_000:
                raise ValueError(f"no sentence of {min_words}..{max_words} words with reordering "
                                 f"<= {max_reorder} found; widen the bounds")
    return pairs

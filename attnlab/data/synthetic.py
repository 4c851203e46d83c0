"""The built-in synthetic English → Italian corpus, with gold alignments and dependencies.

A small generative grammar: English sentences from a lexicon of ~200 common
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

import functools
import itertools
import random
from dataclasses import dataclass, field

from attnlab.data.alignment import reorder_distance
from attnlab.data.corpus import Pair

# --------------------------------------------------------------------------- lexicon
# Nouns: (english sg, english pl, italian sg, italian pl, gender, categories)
# categories: person kin animal thing food place | open read write container surface fixable
_NOUN_TABLE = """
boy boys ragazzo ragazzi m person
girl girls ragazza ragazze f person
child children bambino bambini m person
man men uomo uomini m person
woman women donna donne f person
friend friends amico amici m person
student students studente studenti m person
teacher teachers maestro maestri m person
doctor doctors medico medici m person
king kings re re m person
queen queens regina regine f person
waiter waiters cameriere camerieri m person
lawyer lawyers avvocato avvocati m person
actress actresses attrice attrici f person
cook cooks cuoco cuochi m person
mother mothers madre madri f person kin
father fathers padre padri m person kin
brother brothers fratello fratelli m person kin
sister sisters sorella sorelle f person kin
uncle uncles zio zii m person kin
aunt aunts zia zie f person kin
cousin cousins cugino cugini m person kin
son sons figlio figli m person kin
daughter daughters figlia figlie f person kin
grandmother grandmothers nonna nonne f person kin
grandfather grandfathers nonno nonni m person kin
dog dogs cane cani m animal
cat cats gatto gatti m animal
horse horses cavallo cavalli m animal
bird birds uccello uccelli m animal
cow cows mucca mucche f animal
mouse mice topo topi m animal
rabbit rabbits coniglio conigli m animal
duck ducks anatra anatre f animal
squirrel squirrels scoiattolo scoiattoli m animal
wolf wolves lupo lupi m animal
bear bears orso orsi m animal
fox foxes volpe volpi f animal
book books libro libri m thing read write open
letter letters lettera lettere f thing read write open
newspaper newspapers giornale giornali m thing read
map maps mappa mappe f thing read
key keys chiave chiavi f thing
table tables tavolo tavoli m thing surface fixable
chair chairs sedia sedie f thing surface fixable
bed beds letto letti m thing surface
window windows finestra finestre f thing open fixable
door doors porta porte f thing open fixable
box boxes scatola scatole f thing open container
bag bags borsa borse f thing open container
bottle bottles bottiglia bottiglie f thing open
glass glasses bicchiere bicchieri m thing
cup cups tazza tazze f thing
mirror mirrors specchio specchi m thing
backpack backpacks zaino zaini m thing open container
umbrella umbrellas ombrello ombrelli m thing open fixable
clock clocks orologio orologi m thing fixable
lamp lamps lampada lampade f thing fixable
picture pictures quadro quadri m thing
photo photos foto foto f thing
ring rings anello anelli m thing
locket lockets medaglione medaglioni m thing open
necklace necklaces collana collane f thing
hat hats cappello cappelli m thing
scarf scarves sciarpa sciarpe f thing
shoe shoes scarpa scarpe f thing
dress dresses vestito vestiti m thing
shirt shirts camicia camicie f thing
sweater sweaters maglione maglioni m thing
coat coats cappotto cappotti m thing
gift gifts regalo regali m thing open
bicycle bicycles bicicletta biciclette f thing fixable
car cars macchina macchine f thing container fixable
boat boats barca barche f thing surface
computer computers computer computer m thing fixable
phone phones telefono telefoni m thing fixable
knife knives coltello coltelli m thing
spoon spoons cucchiaio cucchiai m thing
pen pens penna penne f thing
song songs canzone canzoni f write
story stories storia storie f read write
poem poems poesia poesie f read write
ticket tickets biglietto biglietti m thing
apple apples mela mele f food
cake cakes torta torte f food
cheese cheeses formaggio formaggi m food
orange oranges arancia arance f food
sandwich sandwiches panino panini m food
soup soups zuppa zuppe f food
pizza pizzas pizza pizze f food
banana bananas banana banane f food
tomato tomatoes pomodoro pomodori m food
cookie cookies biscotto biscotti m food
egg eggs uovo uova m food
strawberry strawberries fragola fragole f food
lemon lemons limone limoni m food
garden gardens giardino giardini m place
park parks parco parchi m place
house houses casa case f place
school schools scuola scuole f place
kitchen kitchens cucina cucine f place
room rooms stanza stanze f place
street streets strada strade f place
city cities città città f place
station stations stazione stazioni f place
church churches chiesa chiese f place
castle castles castello castelli m place
lake lakes lago laghi m place
sea seas mare mari m place
island islands isola isole f place surface
mountain mountains montagna montagne f place surface
office offices ufficio uffici m place
library libraries biblioteca biblioteche f place
market markets mercato mercati m place
hospital hospitals ospedale ospedali m place
restaurant restaurants ristorante ristoranti m place
square squares piazza piazze f place
beach beaches spiaggia spiagge f place surface
forest forests bosco boschi m place
bridge bridges ponte ponti m place surface
river rivers fiume fiumi m place
village villages villaggio villaggi m place
museum museums museo musei m place
stadium stadiums stadio stadi m place
zoo zoos zoo zoo m place
hotel hotels albergo alberghi m place
tree trees albero alberi m place surface
"""

# Adjectives: (english, it m.sg, f.sg, m.pl, f.pl, noun categories they go with)
_ADJ_TABLE = """
red rosso rossa rossi rosse thing animal food place
white bianco bianca bianchi bianche thing animal food place
black nero nera neri nere thing animal
green verde verde verdi verdi thing food place
blue blu blu blu blu thing
yellow giallo gialla gialli gialle thing food
pink rosa rosa rosa rosa thing
grey grigio grigia grigi grigie thing animal place
big grande grande grandi grandi thing animal place food person
small piccolo piccola piccoli piccole thing animal place food person
old vecchio vecchia vecchi vecchie thing animal place person
new nuovo nuova nuovi nuove thing place
beautiful bello bella belli belle thing animal place person
ugly brutto brutta brutti brutte thing animal place
long lungo lunga lunghi lunghe thing
heavy pesante pesante pesanti pesanti thing
light leggero leggera leggeri leggere thing
expensive costoso costosa costosi costose thing food place
cheap economico economica economici economiche thing food place
empty vuoto vuota vuoti vuote thing place
clean pulito pulita puliti pulite thing place
dirty sporco sporca sporchi sporche thing animal place
broken rotto rotta rotti rotte thing
round rotondo rotonda rotondi rotonde thing food
modern moderno moderna moderni moderne thing place
ancient antico antica antichi antiche thing place
famous famoso famosa famosi famose person place
quiet tranquillo tranquilla tranquilli tranquille person animal place
strange strano strana strani strane person animal thing place
happy felice felice felici felici person animal
tired stanco stanca stanchi stanche person animal
sad triste triste tristi tristi person animal
young giovane giovane giovani giovani person animal
rich ricco ricca ricchi ricche person
poor povero povera poveri povere person
kind gentile gentile gentili gentili person
angry arrabbiato arrabbiata arrabbiati arrabbiate person animal
hungry affamato affamata affamati affamate person animal
fresh fresco fresca freschi fresche food
sweet dolce dolce dolci dolci food
hot caldo calda caldi calde food
cold freddo fredda freddi fredde food place
delicious delizioso deliziosa deliziosi deliziose food
ripe maturo matura maturi mature food
soft morbido morbida morbidi morbide thing food
dark scuro scura scuri scure thing place
"""

# Names written by hand (gender); the rest of the ~300 are built from syllables below.
_NAMES = """
Anna f Marco m Giulia f Luca m Sara f Paolo m Elena f Giorgio m Laura f Matteo m Chiara f
Andrea m Francesca f Davide m Marta f Stefano m Silvia f Roberto m Valentina f Alessandro m
Federica f Simone m Elisa f Lorenzo m Alice f Tommaso m Irene f Riccardo m Beatrice f Emma f
Leonardo m Sofia f Gabriele m Aurora f Pietro m Ginevra f Filippo m Martina f Edoardo m
Camilla f Nicola m Greta f Enrico m Bianca f Vittorio m Noemi f Dario m Ilaria f Fabio m
Serena f Tom m Mary f John m Kate f Peter m Lucy f James m Emily f David m Sarah f Michael m
Linda f Robert m Helen f George m Yusuf m Amara f Kenji m Ingrid f Dmitri m Priya f Olek m
Zanele f Tariq m Freya f Mateus m Ayumi f Bjorn m Nadia f Rafael m Leila f Omar m
Svetlana f Thiago m Mei f Ravi m Astrid f Kofi m Ines f Hugo m Yara f Lars m Zofia f Emeka m
Aiko f Sven m Anouk f Ciro m Wanda f Otto m Agnese f Bruno m Carla f Diego m Eva f Franco m
Gemma f Ivan m Jana f Karim m Lidia f Mirko m Nora f Oscar m Paola f Quentin m Rita f Sergio m
Tina f Ugo m Vera f Walter m Xenia f Yuri m Zeno m Adele f Boris m Clara f
"""
_SYLLABLES = ("ba be bi bo da de di do fa fe fi go ka ki ko la le li lo lu ma me mi mo na ne ni "
              "no pa pe ra re ri ro sa se si so ta te ti to va ve vi za zo").split()
_CODAS = ("", "", "", "n", "r", "l", "s", "x", "th")


def _build_names(n_total: int = 300) -> list[tuple[str, str]]:
    """The proper-noun list in Zipf rank order (fixed, independent of the corpus seed)."""
    toks = _NAMES.split()
    names = [(toks[i], toks[i + 1]) for i in range(0, len(toks), 2)]
    rng = random.Random(20240601)
    rng.shuffle(names)  # the hand-written names take the frequent ranks, in a fixed mixed order
    seen = {n for n, _ in names}
    while len(names) < n_total:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((2, 3, 3)))) + rng.choice(_CODAS)
        word = word.capitalize()
        if word not in seen:
            seen.add(word)
            names.append((word, "f" if word.endswith("a") else "m"))
    return names


# Verbs: english base, italian infinitive (or 6 forms), object categories, english particle, italian preposition.
# kinds: tr (transitive), intr (intransitive, takes a locative), ditr (+ "to" object), prep (it. preposition)
_IRREGULAR = {
    "essere": "sono sei è siamo siete sono",
    "avere": "ho hai ha abbiamo avete hanno",
    "andare": "vado vai va andiamo andate vanno",
    "volere": "voglio vuoi vuole vogliamo volete vogliono",
    "dare": "do dai dà diamo date danno",
    "bere": "bevo bevi beve beviamo bevete bevono",
    "uscire": "esco esci esce usciamo uscite escono",
}
_ISC = {"pulire", "finire", "preferire", "capire"}

# (english base, italian infinitive, object categories, english particle)
_TRANSITIVE = [
    ("see", "vedere", "person animal thing food place", ""),
    ("watch", "guardare", "person animal", ""),
    ("find", "trovare", "person animal thing", ""),
    ("lose", "perdere", "thing", ""),
    ("buy", "comprare", "thing food", ""),
    ("sell", "vendere", "thing food", ""),
    ("take", "prendere", "thing food", ""),
    ("open", "aprire", "open", ""),
    ("close", "chiudere", "open", ""),
    ("read", "leggere", "read", ""),
    ("write", "scrivere", "write", ""),
    ("eat", "mangiare", "food", ""),
    ("cook", "cucinare", "food", ""),
    ("wash", "lavare", "thing animal", ""),
    ("clean", "pulire", "thing place", ""),
    ("fix", "riparare", "fixable", ""),
    ("break", "rompere", "thing", ""),
    ("love", "amare", "person animal place", ""),
    ("know", "conoscere", "person place", ""),
    ("call", "chiamare", "person animal", ""),
    ("help", "aiutare", "person animal", ""),
    ("meet", "incontrare", "person", ""),
    ("hear", "sentire", "person animal", ""),
    ("paint", "dipingere", "thing place", ""),
    ("hide", "nascondere", "thing animal", ""),
    ("remember", "ricordare", "person animal place", ""),
    ("forget", "dimenticare", "person thing", ""),
    ("prefer", "preferire", "thing food place", ""),
    ("want", "volere", "thing food animal", ""),
    ("have", "avere", "thing animal", ""),
    ("visit", "visitare", "place person", ""),
    ("draw", "disegnare", "person animal thing place", ""),
    ("follow", "seguire", "person animal", ""),
    ("look", "guardare", "person animal thing place", "at"),
    ("listen", "ascoltare", "person animal write", "to"),
    ("wait", "aspettare", "person", "for"),
    ("dream", "sognare", "person animal thing place", "of"),
]
# english verb + particle whose italian verb takes a preposition: (en, it inf, cats, en prep, it prep)
_PREPOSITIONAL = [
    ("speak", "parlare", "person animal thing place", "of", "di"),
    ("talk", "parlare", "person animal thing place", "about", "di"),
    ("think", "pensare", "person animal thing place", "of", "a"),
]
_DITRANSITIVE = [
    ("give", "dare", "thing food"),
    ("send", "mandare", "thing write"),
    ("show", "mostrare", "thing"),
    ("bring", "portare", "thing food"),
    ("sell", "vendere", "thing"),
    ("write", "scrivere", "write"),
]
# intransitive verbs that take a locative phrase
_INTRANSITIVE = [
    ("sleep", "dormire"), ("live", "abitare"), ("work", "lavorare"), ("play", "giocare"),
    ("sing", "cantare"), ("read", "leggere"), ("swim", "nuotare"), ("run", "correre"),
    ("walk", "camminare"), ("eat", "mangiare"), ("study", "studiare"), ("dance", "ballare"),
    ("wait", "aspettare"), ("stay", "restare"), ("cry", "piangere"), ("laugh", "ridere"),
]
_MOTION = [("go", "andare"), ("run", "correre"), ("return", "tornare")]

# locative prepositions: english, italian, noun categories of the object
_LOCATIVE = [
    ("in", "in", "place container"), ("on", "su", "surface"), ("under", "sotto", "surface"),
    ("near", "vicino a", "place"), ("behind", "dietro", "place thing"),
    ("with", "con", "person animal"), ("from", "da", "place"), ("without", "senza", "person animal"),
]
# frequency adverbs: english (before the verb) → italian (after the finite verb)
_FREQ_ADV = [("often", "spesso"), ("always", "sempre"), ("rarely", "raramente"),
             ("also", "anche"), ("already", "già"), ("still", "ancora")]
# sentence-final time adverbials: english words → italian words (monotone)
# time adverbials: english words, italian words, for each english word the italian words it aligns to,
# and the arcs (head, dependent, label) inside the phrase (-1 = attached to the clause root)
_TIME_ADV = [
    ("today", "oggi", [[0]], [(-1, 0, "advmod")]),
    ("now", "ora", [[0]], [(-1, 0, "advmod")]),
    ("tonight", "stasera", [[0]], [(-1, 0, "advmod")]),
    ("again", "di nuovo", [[0, 1]], [(-1, 0, "advmod")]),
    ("every day", "ogni giorno", [[0], [1]], [(-1, 1, "obl:tmod"), (1, 0, "det")]),
    ("in the morning", "la mattina", [[0], [0], [1]], [(-1, 2, "obl"), (2, 0, "case"), (2, 1, "det")]),
    ("on sunday", "la domenica", [[0], [1]], [(-1, 1, "obl"), (1, 0, "case")]),
]
_NUMBERS = [("two", "due"), ("three", "tre"), ("four", "quattro"), ("five", "cinque"),
            ("six", "sei"), ("seven", "sette"), ("ten", "dieci")]
# subject pronouns: english, person index 0..5, gender of a predicate adjective
_PRONOUNS = [("I", 0, "m"), ("you", 1, "m"), ("he", 2, "m"), ("she", 2, "f"), ("we", 3, "m"), ("they", 5, "m")]
_POSSESSIVES = {"my": ("mio", "mia", "miei", "mie"), "your": ("tuo", "tua", "tuoi", "tue"),
                "his": ("suo", "sua", "suoi", "sue"), "her": ("suo", "sua", "suoi", "sue"),
                "our": ("nostro", "nostra", "nostri", "nostre"), "their": ("loro",) * 4}


@dataclass(frozen=True)
class _Noun:
    en: str
    en_pl: str
    it: str
    it_pl: str
    gender: str
    cats: frozenset[str]

    def gender_of(self, number: str) -> str:
        return "f" if (self.it_pl == "uova" and number == "pl") else self.gender


@dataclass(frozen=True)
class _Adj:
    en: str
    forms: tuple[str, str, str, str]  # m.sg f.sg m.pl f.pl
    cats: frozenset[str]

    def agree(self, gender: str, number: str) -> str:
        return self.forms[(gender == "f") + 2 * (number == "pl")]


def _table(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


NOUNS = [_Noun(r[0], r[1], r[2], r[3], r[4], frozenset(r[5:])) for r in _table(_NOUN_TABLE)]
ADJECTIVES = [_Adj(r[0], (r[1], r[2], r[3], r[4]), frozenset(r[5:])) for r in _table(_ADJ_TABLE)]
NAMES = _build_names()


# --------------------------------------------------------------------------- morphology
def conjugate(infinitive: str) -> tuple[str, ...]:
    """Present indicative (io, tu, lui/lei, noi, voi, loro) of an Italian verb."""
    if infinitive in _IRREGULAR:
        return tuple(_IRREGULAR[infinitive].split())
    stem, ending = infinitive[:-3], infinitive[-3:]
    if infinitive in _ISC:
        return (stem + "isco", stem + "isci", stem + "isce", stem + "iamo", stem + "ite", stem + "iscono")
    if ending == "are":
        tu, noi = stem + "i", stem + "iamo"
        if stem.endswith(("c", "g")):  # cerco, cerchi, cerchiamo
            tu, noi = stem + "hi", stem + "hiamo"
        elif stem.endswith("i"):  # mangio, mangi, mangiamo
            tu, noi = stem, stem + "amo"
        return (stem + "o", tu, stem + "a", noi, stem + "ate", stem + "ano")
    if ending == "ere":
        return (stem + "o", stem + "i", stem + "e", stem + "iamo", stem + "ete", stem + "ono")
    return (stem + "o", stem + "i", stem + "e", stem + "iamo", stem + "ite", stem + "ono")


def english_3sg(base: str) -> str:
    """``see`` → ``sees``, ``wash`` → ``washes``, ``study`` → ``studies``, ``have`` → ``has``."""
    special = {"have": "has", "do": "does", "go": "goes", "be": "is"}
    if base in special:
        return special[base]
    if base.endswith(("s", "sh", "ch", "x", "o")):
        return base + "es"
    if base.endswith("y") and base[-2] not in "aeiou":
        return base[:-1] + "ies"
    return base + "s"


def _vowel(word: str) -> bool:
    return word[:1].lower() in "aeiouàèéìòù" or word[:1].lower() == "h"


def _lo_class(word: str) -> bool:
    """Masculine words taking ``lo/gli/uno``: s+consonant, z, gn, ps, pn, x, y, i+vowel."""
    w = word.lower()
    return ((w[:1] == "s" and len(w) > 1 and w[1] not in "aeiou") or w[:1] in "zxy"
            or w.startswith(("gn", "ps", "pn")) or (w[:1] == "i" and len(w) > 1 and w[1] in "aeiou"))


def definite_article(gender: str, number: str, next_word: str) -> str:
    """``il lo l' la i gli le`` for the word that follows (``l'`` elides into it)."""
    if number == "sg":
        if _vowel(next_word):
            return "l'"
        if gender == "f":
            return "la"
        return "lo" if _lo_class(next_word) else "il"
    if gender == "f":
        return "le"
    return "gli" if (_vowel(next_word) or _lo_class(next_word)) else "i"


def indefinite_article(gender: str, next_word: str) -> str:
    """``un uno una un'`` (``un'`` elides into the next word)."""
    if gender == "f":
        return "un'" if _vowel(next_word) else "una"
    return "uno" if _lo_class(next_word) else "un"


_ART_SUFFIX = {"il": "l", "lo": "llo", "l'": "ll'", "la": "lla", "i": "i", "gli": "gli", "le": "lle"}
_PREP_STEM = {"di": "de", "a": "a", "da": "da", "in": "ne", "su": "su"}


def articulated(prep: str, article: str) -> str:
    """``di + il = del``, ``a + la = alla``, ``in + gli = negli``, ``su + l' = sull'``."""
    return _PREP_STEM[prep] + _ART_SUFFIX[article]


def demonstrative(article: str) -> str:
    """``quel quello quell' quella quei quegli quelle`` (follows the article)."""
    return {"il": "quel", "lo": "quello", "l'": "quell'", "la": "quella", "i": "quei",
            "gli": "quegli", "le": "quelle"}[article]


# --------------------------------------------------------------------------- sentence builder
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


def _merge(a: _I, b: _I, text: str) -> _I:
    """Two Italian words written as one (``l'`` + ``albero``, ``di`` + ``il``): links are united."""
    return _I(text, *a.src, *b.src)


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


def _choose_adjectives(ctx: _Ctx, cats: frozenset[str], budget: int) -> list[_Adj]:
    """0..budget distinct adjectives, P(k ≥ t+1 | k ≥ t) = 0.4 (a geometric stack)."""
    k = 0
    while k < budget and ctx.rng.random() < 0.4:
        k += 1
    if k == 0:
        return []
    pool = _adjectives_for(cats)
    return ctx.rng.sample(pool, min(k, len(pool)))


@functools.lru_cache(maxsize=None)
def _adjectives_for(cats: frozenset[str]) -> list[_Adj]:
    return [a for a in ADJECTIVES if a.cats & cats]


@functools.lru_cache(maxsize=None)
def _nouns_for(cats: frozenset[str]) -> list[_Noun]:
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
        det = _E("an" if _vowel(en_mod[0].text) and en_mod[0].text[0] != "h" else "a")
        ctx.rel(head, det, "det")
        np.en = [det] + en_mod
        np.it = _attach_article(indefinite_article(gender, noun_i.text), [det], noun_i) + tail
    elif det_kind == "num":
        en_num, it_num = rng.choice(_NUMBERS)
        num = _E(en_num)
        ctx.rel(head, num, "nummod")
        np.en = [num] + en_mod
        np.it = [_I(it_num, num), noun_i] + tail
    elif det_kind == "poss":
        owner = rng.choice(list(_POSSESSIVES))
        poss = _E(owner)
        ctx.rel(head, poss, "nmod:poss")
        forms = _POSSESSIVES[owner]
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
    if np.article is not None and prep in _PREP_STEM:
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
_STATIC = [p for p in _LOCATIVE if p[0] not in ("with", "without", "from")]


def _locative(ctx: _Ctx, budget: int, preps: list[tuple[str, str, str]] = _LOCATIVE
              ) -> tuple[list[_E], list[_I], _E]:
    """A locative phrase (in the garden → nel giardino); returns (en, it, head noun)."""
    en_p, it_p, cats = ctx.rng.choice(preps)
    np = (_name_np(ctx) if "person" in cats and ctx.rng.random() < 0.4
          else _noun_np(ctx, cats, budget))
    p = _E(en_p)
    ctx.rel(np.head, p, "case")
    return [p] + np.en, _prep_phrase_it(it_p, [p], np), np.head


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
        text, person, gender = ctx.rng.choice(_PRONOUNS)
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
    if clitic in ("lo", "la") and _vowel(verb.text):
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
        en_adv, it_adv = rng.choice(_FREQ_ADV)
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
    en_t, it_t, links, arcs = ctx.rng.choice(_TIME_ADV)
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
        en_b, it_inf = rng.choice(_INTRANSITIVE if kind == "intr" else _MOTION)
        v_en, pre_it, v_it, v, _ = _predicate(ctx, person, third_sg, it_inf, en_b, budget)
        ctx.rel(v, s_head, "nsubj")
        loc_en, loc_it, loc_head = _locative(ctx, budget, _LOCATIVE if kind == "intr" else _MOTION_TO)
        ctx.rel(v, loc_head, "obl")
        return s_en + v_en + loc_en, s_it + pre_it + v_it + loc_it, v
    if kind == "prep":
        en_b, it_inf, cats, en_p, it_p = rng.choice(_PREPOSITIONAL)
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
        en_b, it_inf, cats = rng.choice(_DITRANSITIVE)
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
    en_b, it_inf, cats, particle = rng.choice(_TRANSITIVE)
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
            options = [t for t in _TRANSITIVE if not t[3] and t[1] != it_inf and frozenset(t[2].split()) & obj.cats
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

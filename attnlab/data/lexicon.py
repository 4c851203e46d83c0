"""The lexicon of the synthetic English → Italian corpus: its words and their forms.

~200 common words (nouns with gender, number and semantic categories; adjectives
with their four Italian forms; verbs by valency: transitive, prepositional,
ditransitive, intransitive, motion; adverbs, numbers, pronouns, possessives) and
~300 proper names, plus the morphology the grammar (``attnlab.data.synthetic``)
writes with: Italian conjugation, the English 3rd person singular, definite and
indefinite articles chosen by the next word, articulated prepositions,
demonstratives.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

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
TRANSITIVE = [
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
PREPOSITIONAL = [
    ("speak", "parlare", "person animal thing place", "of", "di"),
    ("talk", "parlare", "person animal thing place", "about", "di"),
    ("think", "pensare", "person animal thing place", "of", "a"),
]
DITRANSITIVE = [
    ("give", "dare", "thing food"),
    ("send", "mandare", "thing write"),
    ("show", "mostrare", "thing"),
    ("bring", "portare", "thing food"),
    ("sell", "vendere", "thing"),
    ("write", "scrivere", "write"),
]
# intransitive verbs that take a locative phrase
INTRANSITIVE = [
    ("sleep", "dormire"), ("live", "abitare"), ("work", "lavorare"), ("play", "giocare"),
    ("sing", "cantare"), ("read", "leggere"), ("swim", "nuotare"), ("run", "correre"),
    ("walk", "camminare"), ("eat", "mangiare"), ("study", "studiare"), ("dance", "ballare"),
    ("wait", "aspettare"), ("stay", "restare"), ("cry", "piangere"), ("laugh", "ridere"),
]
MOTION = [("go", "andare"), ("run", "correre"), ("return", "tornare")]

# locative prepositions: english, italian, noun categories of the object
LOCATIVE = [
    ("in", "in", "place container"), ("on", "su", "surface"), ("under", "sotto", "surface"),
    ("near", "vicino a", "place"), ("behind", "dietro", "place thing"),
    ("with", "con", "person animal"), ("from", "da", "place"), ("without", "senza", "person animal"),
]
# frequency adverbs: english (before the verb) → italian (after the finite verb)
FREQ_ADV = [("often", "spesso"), ("always", "sempre"), ("rarely", "raramente"),
             ("also", "anche"), ("already", "già"), ("still", "ancora")]
# sentence-final time adverbials: english words → italian words (monotone)
# time adverbials: english words, italian words, for each english word the italian words it aligns to,
# and the arcs (head, dependent, label) inside the phrase (-1 = attached to the clause root)
TIME_ADV = [
    ("today", "oggi", [[0]], [(-1, 0, "advmod")]),
    ("now", "ora", [[0]], [(-1, 0, "advmod")]),
    ("tonight", "stasera", [[0]], [(-1, 0, "advmod")]),
    ("again", "di nuovo", [[0, 1]], [(-1, 0, "advmod")]),
    ("every day", "ogni giorno", [[0], [1]], [(-1, 1, "obl:tmod"), (1, 0, "det")]),
    ("in the morning", "la mattina", [[0], [0], [1]], [(-1, 2, "obl"), (2, 0, "case"), (2, 1, "det")]),
    ("on sunday", "la domenica", [[0], [1]], [(-1, 1, "obl"), (1, 0, "case")]),
]
NUMBERS = [("two", "due"), ("three", "tre"), ("four", "quattro"), ("five", "cinque"),
            ("six", "sei"), ("seven", "sette"), ("ten", "dieci")]
# subject pronouns: english, person index 0..5, gender of a predicate adjective
PRONOUNS = [("I", 0, "m"), ("you", 1, "m"), ("he", 2, "m"), ("she", 2, "f"), ("we", 3, "m"), ("they", 5, "m")]
POSSESSIVES = {"my": ("mio", "mia", "miei", "mie"), "your": ("tuo", "tua", "tuoi", "tue"),
                "his": ("suo", "sua", "suoi", "sue"), "her": ("suo", "sua", "suoi", "sue"),
                "our": ("nostro", "nostra", "nostri", "nostre"), "their": ("loro",) * 4}


@dataclass(frozen=True)
class Noun:
    en: str
    en_pl: str
    it: str
    it_pl: str
    gender: str
    cats: frozenset[str]

    def gender_of(self, number: str) -> str:
        return "f" if (self.it_pl == "uova" and number == "pl") else self.gender


@dataclass(frozen=True)
class Adj:
    en: str
    forms: tuple[str, str, str, str]  # m.sg f.sg m.pl f.pl
    cats: frozenset[str]

    def agree(self, gender: str, number: str) -> str:
        return self.forms[(gender == "f") + 2 * (number == "pl")]


def _table(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


NOUNS = [Noun(r[0], r[1], r[2], r[3], r[4], frozenset(r[5:])) for r in _table(_NOUN_TABLE)]
ADJECTIVES = [Adj(r[0], (r[1], r[2], r[3], r[4]), frozenset(r[5:])) for r in _table(_ADJ_TABLE)]
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


def vowel_initial(word: str) -> bool:
    return word[:1].lower() in "aeiouàèéìòù" or word[:1].lower() == "h"


def _lo_class(word: str) -> bool:
    """Masculine words taking ``lo/gli/uno``: s+consonant, z, gn, ps, pn, x, y, i+vowel."""
    w = word.lower()
    return ((w[:1] == "s" and len(w) > 1 and w[1] not in "aeiou") or w[:1] in "zxy"
            or w.startswith(("gn", "ps", "pn")) or (w[:1] == "i" and len(w) > 1 and w[1] in "aeiou"))


def definite_article(gender: str, number: str, next_word: str) -> str:
    """``il lo l' la i gli le`` for the word that follows (``l'`` elides into it)."""
    if number == "sg":
        if vowel_initial(next_word):
            return "l'"
        if gender == "f":
            return "la"
        return "lo" if _lo_class(next_word) else "il"
    if gender == "f":
        return "le"
    return "gli" if (vowel_initial(next_word) or _lo_class(next_word)) else "i"


def indefinite_article(gender: str, next_word: str) -> str:
    """``un uno una un'`` (``un'`` elides into the next word)."""
    if gender == "f":
        return "un'" if vowel_initial(next_word) else "una"
    return "uno" if _lo_class(next_word) else "un"


_ART_SUFFIX = {"il": "l", "lo": "llo", "l'": "ll'", "la": "lla", "i": "i", "gli": "gli", "le": "lle"}
PREP_STEM = {"di": "de", "a": "a", "da": "da", "in": "ne", "su": "su"}


def articulated(prep: str, article: str) -> str:
    """``di + il = del``, ``a + la = alla``, ``in + gli = negli``, ``su + l' = sull'``."""
    return PREP_STEM[prep] + _ART_SUFFIX[article]


def demonstrative(article: str) -> str:
    """``quel quello quell' quella quei quegli quelle`` (follows the article)."""
    return {"il": "quel", "lo": "quello", "l'": "quell'", "la": "quella", "i": "quei",
            "gli": "quegli", "le": "quelle"}[article]

"""The embedded corpus: synthetic English-like to French-like sentence pairs with gold alignments.

Nothing can be downloaded where this project runs, so its default corpus is generated. The source
language is English-like and the target language French-like; both are lowercase, whitespace
tokenised, and every sentence ends with a "." token. The grammar is built so that the phenomena an
attention-based translation model has to learn (Bahdanau et al., 2014) show up:

* Local reordering: French adjectives follow the noun, and a run of them is mirrored
  ("the european economic area" -> "la zone économique européenne"); English noun compounds become
  "N de N" ("the car industry" -> "l' industrie de voiture"); the Saxon genitive is turned round
  ("the man 's dog" -> "le chien de l' homme"); object pronouns move in front of the verb
  ("eats it" -> "le mange"); adverbs move behind the finite verb ("often ate" -> "a souvent mangé").
* Agreement: articles, determiners and adjectives agree with the noun in gender and number
  (le/la/les, un/une/des, ce/cette/ces, -e/-s/-es endings, irregular plurals), verbs agree with the
  subject (3sg/3pl, also for coordinated subjects), predicate adjectives agree with the subject and
  past participles with a preceding direct object ("la pomme que le chat a mangée").
* One-to-many and many-to-one words: "not"/"does not" -> "ne ... pas", "never" -> "ne ... jamais",
  "ate" -> "a mangé", "will eat" -> "mangera", "of the" -> "du"/"des", "to the" -> "au"/"aux",
  "there is" -> "il y a", "in front of" -> "devant", "many" -> "beaucoup de", plus elision
  ("l'", "d'", "n'", "qu'") and "cet"/"mon"/"son" before vowels, and "de" for an indefinite
  object under negation ("does not eat apples" -> "ne mange pas de pommes").
* Recursion: relative clauses ("who/which/that" -> "qui"/"que", with "that" optionally dropped),
  complement clauses ("says that ..." -> "dit que ..."), prepositional phrases, coordinated noun
  phrases and clauses joined by "and", "but", "because" (-> "parce que"), ...

Vocabulary. A core of a few hundred real English/French words (nouns with gender, adjectives with
their four French forms, verbs with their agreement, participle and future forms, determiners,
prepositions, pronouns, numbers, adverbs, conjunctions) is extended by a deterministic procedural
lexicon of invented, pronounceable words built from syllables, with different syllables and
suffixes per language (French procedural nouns get their gender from their suffix, adjectives and
verbs inflect regularly). `vocab_size` is the number of distinct English word types the generator
can produce; the French side has more (its adjectives and verbs have more forms). Each open word
class (nouns, adjectives, verbs of each kind, manner adverbs) is sampled with probability
proportional to 1/rank^1.05, core words taking the first ranks, so word frequencies are Zipfian and
a shortlist of the most frequent words leaves unknown words, as the paper's 30k shortlist does.
The lexicon depends only on `vocab_size`, never on the seed or the split.

Lengths. A target length is drawn from a log-normal distribution (median 20 words) truncated to
[min_len, max_len]; clauses and modifiers are added until the source sentence reaches it, and a
sentence whose length falls outside [min_len, max_len] is rejected and drawn again. Lengths count
English tokens including the final "."; the shortest possible sentence has 3 ("he sleeps ."). The
target side is not bounded.

Alignments. Every pair carries a word-level gold alignment, built while generating: each phrase
knows which English tokens produced which French tokens. Links are (source index, target index)
pairs, 0-based, sorted, written in Pharaoh format "i-j". Multi-word expressions are aligned
all-to-all ("in front of" - "devant", "because" - "parce que"); "not" and "never" are aligned to
both parts of "ne ... pas"/"ne ... jamais"; "does"/"did"/"will" are aligned to the French finite
verb or auxiliary ("does not eat" - "ne mange pas": does-mange, eat-mange; "ate" - "a mangé":
ate-a, ate-mangé); a contraction is aligned to both English words ("of the" - "du"). Every token
is aligned except these genuinely unaligned French function words, which have no counterpart in
the English:

* the article ("les", "des", or "de"/"d'" after a negation or "de"; none after "sans") in front
  of an English bare plural ("cats sleep" -> "les chats dorment", "with friends" -> "avec des
  amis"),
* the "de"/"d'" of a French "N de N" compound ("car industry" -> "industrie de voiture"),
* the "que"/"qu'" of a relative or complement clause whose English "that" was dropped
  ("the apple the cat eats" -> "la pomme que le chat mange").

Splits. Every split draws from its own random stream (seeded with the seed and the split name) and
keeps only sentences whose source hashes (CRC-32 of the UTF-8 text) into that split's buckets:
18 of 20 buckets for train, 1 for valid and 1 for test. A source sentence therefore belongs to
exactly one split, so the splits are disjoint by construction, even for short sentences that recur.

Command line, writing PREFIX.src, PREFIX.tgt and PREFIX.align::

  python -m seq2seq.data.synthetic --pairs 1000 --seed 0 --out /tmp/syn [--split train]
      [--min-len 3] [--max-len 80] [--vocab-size 40000]
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import functools
import math
import random
import statistics
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence

# ----------------------------------------------------------------------------- public types


@dataclasses.dataclass(frozen=True)
class Pair:
  """One sentence pair with its gold word alignment."""

  src: tuple[str, ...]  # Source (English-like) tokens.
  tgt: tuple[str, ...]  # Target (French-like) tokens.
  align: tuple[tuple[int, int], ...]  # (src_index, tgt_index) gold links, 0-based, sorted.


SPLITS = ("train", "valid", "test")
# Hash buckets of the source sentence per split; see the module docstring.
_NUM_BUCKETS = 20
_BUCKETS = {"train": range(0, 18), "valid": range(18, 19), "test": range(19, 20)}
_ZIPF_S = 1.05
_LEN_MEDIAN = 20.0
_LEN_SIGMA = 0.55
MIN_SENTENCE_LEN = 3

# ----------------------------------------------------------------------------- core lexicon

# Nouns: English singular, plural; French singular, plural; gender; "a" if animate.
_CORE_NOUNS = """
man men homme hommes m a
woman women femme femmes f a
child children enfant enfants m a
person people personne personnes f a
government governments gouvernement gouvernements m -
country countries pays pays m -
house houses maison maisons f -
city cities ville villes f -
car cars voiture voitures f -
friend friends ami amis m a
day days jour jours m -
year years année années f -
world worlds monde mondes m -
problem problems problème problèmes m -
question questions question questions f -
book books livre livres m -
dog dogs chien chiens m a
cat cats chat chats m a
family families famille familles f a
school schools école écoles f -
company companies entreprise entreprises f -
president presidents président présidents m a
area areas zone zones f -
state states état états m -
economy economies économie économies f -
industry industries industrie industries f -
market markets marché marchés m -
law laws loi lois f -
policy policies politique politiques f -
agreement agreements accord accords m -
report reports rapport rapports m -
boy boys garçon garçons m a
girl girls fille filles f a
teacher teachers professeur professeurs m a
student students étudiant étudiants m a
doctor doctors médecin médecins m a
mother mothers mère mères f a
father fathers père pères m a
sister sisters sœur sœurs f a
brother brothers frère frères m a
minister ministers ministre ministres m a
citizen citizens citoyen citoyens m a
member members membre membres m a
worker workers ouvrier ouvriers m a
farmer farmers fermier fermiers m a
king kings roi rois m a
queen queens reine reines f a
neighbour neighbours voisin voisins m a
soldier soldiers soldat soldats m a
journalist journalists journaliste journalistes m a
lawyer lawyers avocat avocats m a
judge judges juge juges m a
driver drivers conducteur conducteurs m a
artist artists artiste artistes m a
writer writers écrivain écrivains m a
customer customers client clients m a
player players joueur joueurs m a
horse horses cheval chevaux m a
bird birds oiseau oiseaux m a
cow cows vache vaches f a
mouse mice souris souris f a
fish fish poisson poissons m a
table tables table tables f -
chair chairs chaise chaises f -
door doors porte portes f -
window windows fenêtre fenêtres f -
village villages village villages m -
street streets rue rues f -
road roads route routes f -
river rivers rivière rivières f -
mountain mountains montagne montagnes f -
sea seas mer mers f -
tree trees arbre arbres m -
flower flowers fleur fleurs f -
garden gardens jardin jardins m -
church churches église églises f -
hospital hospitals hôpital hôpitaux m -
bank banks banque banques f -
idea ideas idée idées f -
plan plans plan plans m -
project projects projet projets m -
letter letters lettre lettres f -
newspaper newspapers journal journaux m -
story stories histoire histoires f -
word words mot mots m -
language languages langue langues f -
night nights nuit nuits f -
week weeks semaine semaines f -
morning mornings matin matins m -
evening evenings soir soirs m -
water waters eau eaux f -
bread breads pain pains m -
apple apples pomme pommes f -
wine wines vin vins m -
cheese cheeses fromage fromages m -
meal meals repas repas m -
room rooms chambre chambres f -
kitchen kitchens cuisine cuisines f -
office offices bureau bureaux m -
key keys clé clés f -
box boxes boîte boîtes f -
bag bags sac sacs m -
hat hats chapeau chapeaux m -
shirt shirts chemise chemises f -
shoe shoes chaussure chaussures f -
phone phones téléphone téléphones m -
computer computers ordinateur ordinateurs m -
film films film films m -
song songs chanson chansons f -
game games jeu jeux m -
price prices prix prix m -
job jobs emploi emplois m -
train trains train trains m -
plane planes avion avions m -
boat boats bateau bateaux m -
station stations gare gares f -
airport airports aéroport aéroports m -
island islands île îles f -
forest forests forêt forêts f -
field fields champ champs m -
sky skies ciel cieux m -
sun suns soleil soleils m -
moon moons lune lunes f -
star stars étoile étoiles f -
eye eyes œil yeux m -
hand hands main mains f -
head heads tête têtes f -
heart hearts cœur cœurs m -
voice voices voix voix f -
face faces visage visages m -
group groups groupe groupes m -
team teams équipe équipes f -
party parties parti partis m -
election elections élection élections f -
war wars guerre guerres f -
union unions union unions f -
council councils conseil conseils m -
parliament parliaments parlement parlements m -
commission commissions commission commissions f -
community communities communauté communautés f -
region regions région régions f -
system systems système systèmes m -
service services service services m -
product products produit produits m -
tax taxes impôt impôts m -
energy energies énergie énergies f -
museum museums musée musées m -
library libraries bibliothèque bibliothèques f -
restaurant restaurants restaurant restaurants m -
hotel hotels hôtel hôtels m -
bridge bridges pont ponts m -
wall walls mur murs m -
picture pictures tableau tableaux m -
glass glasses verre verres m -
cup cups tasse tasses f -
plate plates assiette assiettes f -
knife knives couteau couteaux m -
egg eggs œuf œufs m -
cake cakes gâteau gâteaux m -
soup soups soupe soupes f -
bottle bottles bouteille bouteilles f -
decision decisions décision décisions f -
change changes changement changements m -
crisis crises crise crises f -
risk risks risque risques m -
rule rules règle règles f -
right rights droit droits m -
power powers pouvoir pouvoirs m -
level levels niveau niveaux m -
number numbers nombre nombres m -
end ends fin fins f -
life lives vie vies f -
body bodies corps corps m -
land lands terre terres f -
stone stones pierre pierres f -
answer answers réponse réponses f -
"""

# Adjectives: English; French masc. sg, fem. sg, masc. pl, fem. pl; "p" if it precedes the noun.
_CORE_ADJS = """
new neuf neuve neufs neuves -
big grand grande grands grandes p
small petit petite petits petites p
good bon bonne bons bonnes p
bad mauvais mauvaise mauvais mauvaises p
young jeune jeune jeunes jeunes p
long long longue longs longues p
pretty joli jolie jolis jolies p
european européen européenne européens européennes -
economic économique économique économiques économiques -
political politique politique politiques politiques -
social social sociale sociaux sociales -
public public publique publics publiques -
national national nationale nationaux nationales -
international international internationale internationaux internationales -
local local locale locaux locales -
important important importante importants importantes -
red rouge rouge rouges rouges -
blue bleu bleue bleus bleues -
green vert verte verts vertes -
black noir noire noirs noires -
white blanc blanche blancs blanches -
yellow jaune jaune jaunes jaunes -
grey gris grise gris grises -
hot chaud chaude chauds chaudes -
cold froid froide froids froides -
happy heureux heureuse heureux heureuses -
sad triste triste tristes tristes -
rich riche riche riches riches -
poor pauvre pauvre pauvres pauvres -
strong fort forte forts fortes -
weak faible faible faibles faibles -
easy facile facile faciles faciles -
difficult difficile difficile difficiles difficiles -
free libre libre libres libres -
open ouvert ouverte ouverts ouvertes -
full plein pleine pleins pleines -
empty vide vide vides vides -
clean propre propre propres propres -
quiet calme calme calmes calmes -
dangerous dangereux dangereuse dangereux dangereuses -
famous célèbre célèbre célèbres célèbres -
modern moderne moderne modernes modernes -
ancient ancien ancienne anciens anciennes -
true vrai vraie vrais vraies -
false faux fausse faux fausses -
short court courte courts courtes -
high élevé élevée élevés élevées -
low bas basse bas basses -
heavy lourd lourde lourds lourdes -
light léger légère légers légères -
fast rapide rapide rapides rapides -
slow lent lente lents lentes -
different différent différente différents différentes -
final final finale finaux finales -
common commun commune communs communes -
serious sérieux sérieuse sérieux sérieuses -
beautiful magnifique magnifique magnifiques magnifiques -
kind gentil gentille gentils gentilles -
dark sombre sombre sombres sombres -
french français française français françaises -
english anglais anglaise anglais anglaises -
german allemand allemande allemands allemandes -
financial financier financière financiers financières -
environmental environnemental environnementale environnementaux environnementales -
military militaire militaire militaires militaires -
industrial industriel industrielle industriels industrielles -
main principal principale principaux principales -
general général générale généraux générales -
"""

# Verbs: kind (t: transitive, i: intransitive, c: takes a "that" clause); English base, 3sg, past;
# French present 3sg, 3pl, past participle (masc. sg), future 3sg, 3pl. Perfects use "avoir".
_CORE_VERBS = """
t eat eats ate | mange mangent mangé mangera mangeront
t see sees saw | voit voient vu verra verront
t like likes liked | aime aiment aimé aimera aimeront
t want wants wanted | veut veulent voulu voudra voudront
t take takes took | prend prennent pris prendra prendront
t make makes made | fait font fait fera feront
t find finds found | trouve trouvent trouvé trouvera trouveront
t buy buys bought | achète achètent acheté achètera achèteront
t sell sells sold | vend vendent vendu vendra vendront
t read reads read | lit lisent lu lira liront
t write writes wrote | écrit écrivent écrit écrira écriront
t open opens opened | ouvre ouvrent ouvert ouvrira ouvriront
t close closes closed | ferme ferment fermé fermera fermeront
t build builds built | construit construisent construit construira construiront
t visit visits visited | visite visitent visité visitera visiteront
t know knows knew | connaît connaissent connu connaîtra connaîtront
t help helps helped | aide aident aidé aidera aideront
t watch watches watched | regarde regardent regardé regardera regarderont
t carry carries carried | porte portent porté portera porteront
t receive receives received | reçoit reçoivent reçu recevra recevront
t support supports supported | soutient soutiennent soutenu soutiendra soutiendront
t accept accepts accepted | accepte acceptent accepté acceptera accepteront
t reject rejects rejected | rejette rejettent rejeté rejettera rejetteront
t present presents presented | présente présentent présenté présentera présenteront
t prepare prepares prepared | prépare préparent préparé préparera prépareront
t follow follows followed | suit suivent suivi suivra suivront
t leave leaves left | quitte quittent quitté quittera quitteront
t clean cleans cleaned | nettoie nettoient nettoyé nettoiera nettoieront
t paint paints painted | peint peignent peint peindra peindront
t drink drinks drank | boit boivent bu boira boiront
t use uses used | utilise utilisent utilisé utilisera utiliseront
t protect protects protected | protège protègent protégé protégera protégeront
t improve improves improved | améliore améliorent amélioré améliorera amélioreront
t destroy destroys destroyed | détruit détruisent détruit détruira détruiront
t understand understands understood | comprend comprennent compris comprendra comprendront
t learn learns learned | apprend apprennent appris apprendra apprendront
t hear hears heard | entend entendent entendu entendra entendront
t win wins won | gagne gagnent gagné gagnera gagneront
t lose loses lost | perd perdent perdu perdra perdront
t examine examines examined | examine examinent examiné examinera examineront
t love loves loved | adore adorent adoré adorera adoreront
i sleep sleeps slept | dort dorment dormi dormira dormiront
i work works worked | travaille travaillent travaillé travaillera travailleront
i sing sings sang | chante chantent chanté chantera chanteront
i dance dances danced | danse dansent dansé dansera danseront
i laugh laughs laughed | rit rient ri rira riront
i cry cries cried | pleure pleurent pleuré pleurera pleureront
i swim swims swam | nage nagent nagé nagera nageront
i run runs ran | court courent couru courra courront
i walk walks walked | marche marchent marché marchera marcheront
i wait waits waited | attend attendent attendu attendra attendront
i talk talks talked | parle parlent parlé parlera parleront
i play plays played | joue jouent joué jouera joueront
i live lives lived | vit vivent vécu vivra vivront
i succeed succeeds succeeded | réussit réussissent réussi réussira réussiront
i fail fails failed | échoue échouent échoué échouera échoueront
i travel travels travelled | voyage voyagent voyagé voyagera voyageront
c say says said | dit disent dit dira diront
c think thinks thought | pense pensent pensé pensera penseront
c believe believes believed | croit croient cru croira croiront
c know knows knew | sait savent su saura sauront
c explain explains explained | explique expliquent expliqué expliquera expliqueront
c announce announces announced | annonce annoncent annoncé annoncera annonceront
c hope hopes hoped | espère espèrent espéré espérera espéreront
"""

# Adverbs: kind (f: frequency, before the English verb and after the French finite verb;
# m: manner, after the English object and right after the French verb; t: time, at the end).
# French multi-word adverbs are joined with "_" here and split into tokens.
_CORE_ADVS = """
f often souvent
f always toujours
f sometimes parfois
f rarely rarement
f already déjà
f also aussi
f usually généralement
f probably probablement
f certainly certainement
m quickly rapidement
m slowly lentement
m carefully soigneusement
m well bien
m badly mal
m together ensemble
m easily facilement
m quietly tranquillement
m clearly clairement
m seriously sérieusement
m regularly régulièrement
m immediately immédiatement
t today aujourd'hui
t yesterday hier
t tomorrow demain
t now maintenant
t here ici
t again encore
t soon bientôt
t later plus_tard
t tonight ce_soir
"""

# Prepositions: English (words joined by "_"), French (likewise), weight. A French "de" or "à"
# contracts with a following "le"/"les" ("du", "des", "au", "aux").
_PREPS = """
in dans 20
on sur 10
with avec 12
for pour 10
without sans 3
under sous 3
near près_de 3
from de 6
to à 8
at à 4
by par 3
after après 3
before avant 3
behind derrière 2
during pendant 3
against contre 2
towards vers 2
in_front_of devant 2
next_to à_côté_de 2
because_of à_cause_de 2
according_to selon 1
instead_of au_lieu_de 1
inside à_l'_intérieur_de 1
outside hors_de 1
"""

# Determiners, singular and plural: English words ("_"-joined, "-" for none), French masculine and
# feminine ("_"-joined), weight. French words align to all English words of the determiner, except
# for "all the" ("tous les": all-tous, the-les) and the unaligned article of a bare plural, which is
# "les" for a generic subject ("cats sleep" -> "les chats dorment") and "des" elsewhere.
_DETS_SG = """
the le la 50
a un une 24
this ce cette 4
my mon ma 2
his son sa 3
her son sa 3
its son sa 1
our notre notre 2
their leur leur 3
your votre votre 1
every chaque chaque 2
one un une 1
"""
_DETS_PL = """
the les les 38
- les les 16
some des des 6
these ces ces 4
my mes mes 2
his ses ses 2
her ses ses 2
our nos nos 2
their leurs leurs 3
your vos vos 1
many beaucoup_de beaucoup_de 4
all_the tous_les toutes_les 3
two deux deux 4
three trois trois 3
four quatre quatre 2
five cinq cinq 2
six six six 1
seven sept sept 1
eight huit huit 1
ten dix dix 1
twelve douze douze 1
twenty vingt vingt 1
fifty cinquante cinquante 1
"""

# Clause conjunctions: English, French ("_"-joined), weight.
_CONJS = """
and et 40
but mais 15
because parce_que 12
when quand 10
while tandis_que 6
so alors 6
or ou 5
"""

# Fixed English words used by the grammar outside the tables above.
_EN_FUNCTION = (
  "a an . 's he she it they him her them who which that there is are was were be will "
  "do does did not never very too and of"
).split()
# Fixed French words, including the forms the final pass produces.
_FR_FUNCTION = (
  "il elle ils elles le la les l' y a ont avait aura est sont était étaient sera seront ne n' pas "
  "jamais très trop qui que qu' de d' du des au aux à et cet mon son ."
).split()

# French words starting with a vowel or mute h that nevertheless do not elide.
_NO_ELISION = frozenset("huit onze oui".split())
_FR_VOWELS = frozenset("aeiouhàâäéèêëîïôöûùüœæ")

# ----------------------------------------------------------------------------- procedural words

_EN_ONSETS = (
  "b bl br c ch cl cr d dr f fl fr g gl gr h j k l m n p pl pr r s sc sh sk sl sm sn sp st str "
  "sw t th tr tw v w wh z"
).split()
_EN_NUCLEI = "a e i o u a e i o u a e i o u ai ea ee oa oo ou".split()
_EN_CODAS = (
  "b ck d ft g k l ld lk ll lt m mp n nd ng nk nt p rd rk rm rn rt sh sk st t th x".split()
)
_EN_MID_CODAS = ["", "", "", "n", "r", "l", "s", "m"]
_EN_NOUN_SUFFIX_ANIMATE = "er ist or ian".split()
_EN_NOUN_SUFFIX = ["", "", "", "", "", "ment", "ness", "ity", "ation", "ship", "age", "ure", "ery"]
_EN_ADJ_SUFFIX = "ic al ous ive ful ish ent ary able y".split()
_EN_VERB_SUFFIX = ["", "", "", "", "ate", "ify", "ize", "en"]

_FR_ONSETS = "b bl br c ch cl cr d dr f fl fr g gr j l m n p pl pr qu r s t tr v vr".split()
_FR_NUCLEI = "a a a e i i o o u é é è ai au ou ou oi eu an on in".split()
_FR_FINALS = "r l n m t d s v ss ll nn ch g p c rt rd st".split()
# French noun suffixes: suffix, gender ("m", "f" or "mf": either).
_FR_NOUN_SUFFIX_ANIMATE = [("eur", "m"), ("ier", "m"), ("ière", "f"), ("iste", "mf"), ("ien", "m")]
_FR_NOUN_SUFFIX = [
  ("", "mf"),
  ("", "mf"),
  ("e", "f"),
  ("age", "m"),
  ("ment", "m"),
  ("eau", "m"),
  ("on", "m"),
  ("ion", "f"),
  ("ure", "f"),
  ("ette", "f"),
  ("ade", "f"),
  ("ance", "f"),
  ("té", "f"),
  ("oir", "m"),
  ("ule", "f"),
  ("isme", "m"),
]
# French adjective endings: masc. sg, fem. sg, masc. pl, fem. pl.
_FR_ADJ_ENDINGS = [
  ("ique", "ique", "iques", "iques"),
  ("ant", "ante", "ants", "antes"),
  ("ain", "aine", "ains", "aines"),
  ("if", "ive", "ifs", "ives"),
  ("el", "elle", "els", "elles"),
  ("eux", "euse", "eux", "euses"),
  ("é", "ée", "és", "ées"),
  ("al", "ale", "aux", "ales"),
  ("in", "ine", "ins", "ines"),
  ("ard", "arde", "ards", "ardes"),
  ("ible", "ible", "ibles", "ibles"),
  ("oire", "oire", "oires", "oires"),
]
# Order in which procedural entries are added: 11 nouns, 4 adjectives, 3 verbs, 2 adverbs.
_PROC_CYCLE = "nnnnnnnnnnnaaaavvvrr"

# ----------------------------------------------------------------------------- lexicon

# Entry layouts (plain tuples, for speed):
#   noun: (en_sg, en_pl, fr_sg, fr_pl, fem, animate)          fem: 0 or 1
#   adj:  (en, (fr_ms, fr_fs, fr_mp, fr_fp), prenominal)      French form index: fem + 2 * plural
#   verb: (en_base, en_3sg, en_past, fr_3sg, fr_3pl, (pp_ms, pp_fs, pp_mp, pp_fp), fut_3sg, fut_3pl)
#   adv:  (en, fr_tokens)


def _pp_forms(pp: str) -> tuple[str, str, str, str]:
  """The four agreeing forms of a French past participle."""
  return (pp, pp + "e", pp if pp.endswith("s") else pp + "s", pp + "es")


def _fr_plural(word: str) -> str:
  """Regular French noun plural."""
  if word.endswith(("s", "x", "z")):
    return word
  if word.endswith(("eau", "eu")):
    return word + "x"
  if word.endswith("al"):
    return word[:-2] + "aux"
  return word + "s"


def _en_plural(word: str) -> str:
  """Regular English noun plural (and verb third person singular)."""
  if word.endswith(("s", "x", "z", "sh", "ch")):
    return word + "es"
  if word.endswith("y") and word[-2:-1] not in ("a", "e", "o", "u"):
    return word[:-1] + "ies"
  return word + "s"


def _en_past(word: str) -> str:
  """Regular English past tense."""
  if word.endswith("e"):
    return word + "d"
  if word.endswith("y") and word[-2:-1] not in ("a", "e", "o", "u"):
    return word[:-1] + "ied"
  return word + "ed"


def _en_uses_an(word: str) -> bool:
  """Whether the English indefinite article before `word` is "an"."""
  return word[0] in "aeiou" and not word.startswith(("uni", "eu", "use", "usu", "one"))


def _zipf_cum(n: int, s: float = _ZIPF_S) -> list[float]:
  """Cumulative Zipf weights 1/rank^s for ranks 1..n."""
  cum, total = [], 0.0
  for r in range(1, n + 1):
    total += r**-s
    cum.append(total)
  return cum


def _weighted(rows: Sequence[tuple]) -> tuple[list, list[float]]:
  """Splits rows whose last field is a weight into (rows without it, cumulative weights)."""
  cum, total = [], 0.0
  for row in rows:
    total += float(row[-1])
    cum.append(total)
  return [row[:-1] for row in rows], cum


def _split_us(text: str) -> tuple[str, ...]:
  """Splits a "_"-joined table cell into tokens; "-" is no token."""
  return () if text == "-" else tuple(text.split("_"))


class _Procedural:
  """Deterministic invented words, one random stream per word class."""

  def __init__(self, en_used: set[str], fr_used: set[str]):
    self.en_used = en_used
    self.fr_used = fr_used
    self.rng = {k: random.Random(f"seq2seq-synthetic-lexicon:{k}") for k in "navr"}

  def _en_stem(self, rng: random.Random) -> str:
    syllables = 1 if rng.random() < 0.55 else 2
    parts = []
    for k in range(syllables):
      parts.append(rng.choice(_EN_ONSETS))
      parts.append(rng.choice(_EN_NUCLEI))
      parts.append(rng.choice(_EN_CODAS) if k == syllables - 1 else rng.choice(_EN_MID_CODAS))
    return "".join(parts)

  def _fr_stem(self, rng: random.Random) -> str:
    syllables = 1 if rng.random() < 0.4 else 2
    parts = []
    for _ in range(syllables):
      parts.append(rng.choice(_FR_ONSETS))
      parts.append(rng.choice(_FR_NUCLEI))
    parts.append(rng.choice(_FR_FINALS))
    return "".join(parts)

  def _claim(self, en_forms: Iterable[str], fr_forms: Iterable[str]) -> bool:
    """Reserves all forms if none is taken yet on its side."""
    en_new, fr_new = set(en_forms), set(fr_forms)
    if en_new & self.en_used or fr_new & self.fr_used:
      return False
    self.en_used |= en_new
    self.fr_used |= fr_new
    return True

  def noun(self) -> tuple:
    rng = self.rng["n"]
    while True:
      animate = rng.random() < 0.15
      en_sfx = rng.choice(_EN_NOUN_SUFFIX_ANIMATE if animate else _EN_NOUN_SUFFIX)
      fr_sfx, gender = rng.choice(_FR_NOUN_SUFFIX_ANIMATE if animate else _FR_NOUN_SUFFIX)
      fem = (rng.random() < 0.5) if gender == "mf" else gender == "f"
      en = self._en_stem(rng) + en_sfx
      fr = self._fr_stem(rng) + fr_sfx
      en_pl, fr_pl = _en_plural(en), _fr_plural(fr)
      if self._claim((en, en_pl), (fr, fr_pl)):
        return (en, en_pl, fr, fr_pl, int(fem), animate)

  def _adj_words(self, rng: random.Random) -> tuple[str, tuple[str, str, str, str]]:
    stem = self._en_stem(rng)
    sfx = rng.choice(_EN_ADJ_SUFFIX)
    en = stem + sfx
    fr_stem = self._fr_stem(rng)
    fr = tuple(fr_stem + e for e in rng.choice(_FR_ADJ_ENDINGS))
    return en, fr

  def adjective(self) -> tuple:
    rng = self.rng["a"]
    while True:
      en, fr = self._adj_words(rng)
      if self._claim((en,), fr):
        return (en, fr, False)

  def adverb(self) -> tuple:
    rng = self.rng["r"]
    while True:
      en, fr = self._adj_words(rng)
      if en.endswith("ic"):
        en_adv = en + "ally"
      elif en.endswith("le"):
        en_adv = en[:-1] + "y"
      elif en.endswith("y"):
        en_adv = en[:-1] + "ily"
      else:
        en_adv = en + "ly"
      fr_adv = fr[1] + "ment"
      if self._claim((en_adv,), (fr_adv,)):
        return (en_adv, (fr_adv,))

  def verb(self) -> tuple[str, tuple]:
    rng = self.rng["v"]
    while True:
      r = rng.random()
      kind = "t" if r < 0.6 else ("i" if r < 0.95 else "c")
      en = self._en_stem(rng) + rng.choice(_EN_VERB_SUFFIX)
      en_3sg, en_past = _en_plural(en), _en_past(en)
      stem = self._fr_stem(rng)
      if rng.random() < 0.75:
        fr = (stem + "e", stem + "ent", stem + "é", stem + "era", stem + "eront")
      else:
        fr = (stem + "it", stem + "issent", stem + "i", stem + "ira", stem + "iront")
      pp = _pp_forms(fr[2])
      if self._claim((en, en_3sg, en_past), fr[:2] + pp + fr[3:]):
        return kind, (en, en_3sg, en_past, fr[0], fr[1], pp, fr[3], fr[4])


class _Lexicon:
  """Word lists with Zipfian sampling weights; a pure function of `vocab_size`."""

  def __init__(self, vocab_size: int):
    en_used: set[str] = set(_EN_FUNCTION)
    fr_used: set[str] = set(_FR_FUNCTION)

    nouns = []
    for line in _CORE_NOUNS.strip().splitlines():
      en, en_pl, fr, fr_pl, g, a = line.split()
      nouns.append((en, en_pl, fr, fr_pl, int(g == "f"), a == "a"))
      en_used |= {en, en_pl}
      fr_used |= {fr, fr_pl}
    adjs = []
    for line in _CORE_ADJS.strip().splitlines():
      en, ms, fs, mp, fp, pre = line.split()
      adjs.append((en, (ms, fs, mp, fp), pre == "p"))
      en_used.add(en)
      fr_used |= {ms, fs, mp, fp}
    verbs: dict[str, list] = {"t": [], "i": [], "c": []}
    for line in _CORE_VERBS.strip().splitlines():
      left, right = line.split("|")
      kind, en, en_3sg, en_past = left.split()
      fr_3sg, fr_3pl, pp, fut_3sg, fut_3pl = right.split()
      pps = _pp_forms(pp)
      verbs[kind].append((en, en_3sg, en_past, fr_3sg, fr_3pl, pps, fut_3sg, fut_3pl))
      en_used |= {en, en_3sg, en_past}
      fr_used |= {fr_3sg, fr_3pl, fut_3sg, fut_3pl, *pps}
    advs: dict[str, list] = {"f": [], "m": [], "t": []}
    for line in _CORE_ADVS.strip().splitlines():
      kind, en, fr = line.split()
      advs[kind].append((en, _split_us(fr)))
      en_used.add(en)
      fr_used |= set(_split_us(fr))

    def table(text: str) -> list[tuple]:
      return [tuple(line.split()) for line in text.strip().splitlines()]

    self.preps, self.prep_cum = _weighted(
      [(_split_us(en), _split_us(fr), w) for en, fr, w in table(_PREPS)]
    )
    self.dets_sg, self.det_sg_cum = _weighted(
      [(_split_us(en), _split_us(m), _split_us(f), w) for en, m, f, w in table(_DETS_SG)]
    )
    self.dets_pl, self.det_pl_cum = _weighted(
      [(_split_us(en), _split_us(m), _split_us(f), w) for en, m, f, w in table(_DETS_PL)]
    )
    definite = {("the",), ("these",), ("my",), ("his",), ("her",), ("our",), ("their",), ("your",)}
    self.dets_indef, self.det_indef_cum = _weighted(
      [
        (_split_us(en), _split_us(m), _split_us(f), w)
        for en, m, f, w in table(_DETS_PL)
        if _split_us(en) not in definite and en != "all_the"
      ]
    )
    self.conjs, self.conj_cum = _weighted(
      [(_split_us(en), _split_us(fr), w) for en, fr, w in table(_CONJS)]
    )
    for rows in (self.preps, self.dets_sg, self.dets_pl, self.conjs):
      for row in rows:
        en_used |= set(row[0])
        for fr in row[1:]:
          fr_used |= set(fr)

    self.core_en_types = len(en_used)
    if vocab_size < self.core_en_types:
      raise ValueError(
        f"vocab_size={vocab_size} is smaller than the core lexicon ({self.core_en_types} types)"
      )
    # Procedural entries, cycling through the word classes until vocab_size English types exist.
    proc = _Procedural(en_used, fr_used)
    step = 0
    while len(en_used) < vocab_size:
      kind = _PROC_CYCLE[step % len(_PROC_CYCLE)]
      step += 1
      left = vocab_size - len(en_used)
      if kind == "n" and left >= 2:
        nouns.append(proc.noun())
      elif kind == "v" and left >= 3:
        vkind, verb = proc.verb()
        verbs[vkind].append(verb)
      elif kind == "r":
        advs["m"].append(proc.adverb())
      else:
        adjs.append(proc.adjective())
    self.en_types = len(en_used)
    self.fr_types = len(fr_used)

    self.nouns, self.noun_cum = nouns, _zipf_cum(len(nouns))
    self.adjs, self.adj_cum = adjs, _zipf_cum(len(adjs))
    self.vt, self.vt_cum = verbs["t"], _zipf_cum(len(verbs["t"]))
    self.vi, self.vi_cum = verbs["i"], _zipf_cum(len(verbs["i"]))
    self.vc, self.vc_cum = verbs["c"], _zipf_cum(len(verbs["c"]))
    self.adv_f, self.adv_f_cum = advs["f"], _zipf_cum(len(advs["f"]))
    self.adv_m, self.adv_m_cum = advs["m"], _zipf_cum(len(advs["m"]))
    self.adv_t, self.adv_t_cum = advs["t"], _zipf_cum(len(advs["t"]))
    self.noun_by_en = {n[0]: n for n in reversed(nouns)}
    self.adj_by_en = {a[0]: a for a in reversed(adjs)}
    self.det_by_en = {
      (" ".join(d[0]), pl): d
      for pl, ds in ((0, self.dets_sg), (1, self.dets_pl))
      for d in reversed(ds)
    }


@functools.lru_cache(maxsize=4)
def _lexicon(vocab_size: int) -> _Lexicon:
  return _Lexicon(vocab_size)


# ----------------------------------------------------------------------------- generator

# Subject pronouns: English, French masc., French fem., plural, probability of feminine.
_SUBJ_PRONOUNS = (
  ("he", "il", "il", 0, 0.0),
  ("she", "elle", "elle", 0, 1.0),
  ("it", "il", "elle", 0, 0.45),
  ("they", "ils", "elles", 1, 0.3),
)
_SUBJ_PRONOUN_CUM = [0.3, 0.5, 0.62, 1.0]
# Object pronouns: English, French clitic, (fem, plural) for participle agreement.
_OBJ_PRONOUNS = (
  ("it", "le", (0, 0)),
  ("it", "la", (1, 0)),
  ("him", "le", (0, 0)),
  ("her", "la", (1, 0)),
  ("them", "les", (0, 1)),
  ("them", "les", (1, 1)),
)
_EMPTY: tuple[int, ...] = ()
_bisect = bisect.bisect_right

# A French item: a token and the source positions it is aligned to.
_Item = tuple[str, tuple[int, ...]]


class _Rules:
  """What the grammar rules share: the lexicon, the random stream, the English sentence so far
  and its target length, and the draws of a word by its Zipfian rank.

  English tokens are appended to `self.src` in order, so a source position is known as soon as a
  word is emitted; French comes back from every rule as a list of (token, source links) items,
  which the caller arranges in French order.
  """

  def __init__(self, lex: _Lexicon, rng: random.Random):
    self.lex = lex
    self.rnd = rng.random
    self.src: list[str] = []
    self.target = 0

  def _noun(self) -> tuple:
    lex = self.lex
    return lex.nouns[_bisect(lex.noun_cum, self.rnd() * lex.noun_cum[-1])]

  def _adj(self) -> tuple:
    lex = self.lex
    return lex.adjs[_bisect(lex.adj_cum, self.rnd() * lex.adj_cum[-1])]

  def _pick(self, rows: list, cum: list[float]) -> tuple:
    return rows[_bisect(cum, self.rnd() * cum[-1])]


class _NounPhrases(_Rules):
  """The noun-phrase rules: subjects, noun phrases with their modifiers, prepositional phrases.

  A noun phrase may carry a relative clause, which is a clause rule (`_Generator._relative`).
  """

  def _relative(self, depth: int, animate: bool, fem: int, plural: int) -> list[_Item]:
    """A relative clause on a noun of the given animacy, gender and number (a clause rule)."""
    raise NotImplementedError

  def _subject(self, depth: int) -> tuple[list[_Item], int, int]:
    """A subject: pronoun, noun phrase or two coordinated noun phrases (plural)."""
    rnd, src = self.rnd, self.src
    room = self.target - len(src)
    if rnd() < (0.7 if room <= 5 else 0.2):
      en, fr_m, fr_f, plural, p_fem = _SUBJ_PRONOUNS[_bisect(_SUBJ_PRONOUN_CUM, rnd())]
      fem = int(rnd() < p_fem)
      src.append(en)
      return [(fr_f if fem else fr_m, (len(src) - 1,))], fem, plural
    if room >= 10 and rnd() < 0.06:
      items, fem1, _ = self._np(depth + 1, post=False)
      src.append("and")
      items.append(("et", (len(src) - 1,)))
      items2, fem2, _ = self._np(depth + 1, post=False)
      # French plural agreement is masculine unless every conjunct is feminine.
      return items + items2, fem1 & fem2, 1
    return self._np(depth, generic="les")

  def _np(
    self,
    depth: int,
    *,
    indefinite: bool = False,
    generic: str = "des",
    post: bool = True,
    singular: bool = False,
  ) -> tuple[list[_Item], int, int]:
    """A noun phrase; returns (French items, feminine, plural).

    Args:
      depth: nesting depth, which limits post-modifiers.
      indefinite: only indefinite determiners (for "there is").
      generic: French article of an English bare plural: "les" (generic subject) or "des".
      post: whether post-modifiers (PP, "of" NP, relative clause, possessor) are allowed.
      singular: force a singular noun phrase.
    """
    lex, rnd, src = self.lex, self.rnd, self.src
    room = self.target - len(src)
    noun = lex.nouns[_bisect(lex.noun_cum, rnd() * lex.noun_cum[-1])]
    plural = 0 if singular else int(rnd() < 0.3)
    if plural:
      if indefinite:
        det = lex.dets_indef[_bisect(lex.det_indef_cum, rnd() * lex.det_indef_cum[-1])]
      else:
        det = lex.dets_pl[_bisect(lex.det_pl_cum, rnd() * lex.det_pl_cum[-1])]
      if not det[0]:
        det = ((), ("des",) if indefinite else (generic,), ())
    elif indefinite:
      det = lex.det_by_en[("a", 0)]
    else:
      det = lex.dets_sg[_bisect(lex.det_sg_cum, rnd() * lex.det_sg_cum[-1])]
    adjs = []
    if room >= 3 and rnd() < 0.3:
      grow = min(2.0, room / 20.0)
      adjs.append(self._adj())
      if room >= 6 and rnd() < 0.2 * grow:
        a = self._adj()
        if a is not adjs[0]:
          adjs.append(a)
          if room >= 10 and rnd() < 0.1 * grow:
            a = self._adj()
            if a is not adjs[0] and a is not adjs[1]:
              adjs.append(a)
    mod = self._noun() if room >= 4 and rnd() < 0.07 else None
    if mod is noun:
      mod = None
    if post and depth < 2 and room >= 7 and not indefinite and rnd() < 0.05:
      # Saxon genitive: "the man 's dog" -> "le chien de l' homme"; "'s" gives "le" and "de".
      possessor = self._np(depth + 2, post=False, singular=True)[0]
      s = len(src)
      src.append("'s")
      the = lex.det_by_en[("the", plural)]
      items = self._realize_np(((), the[1], the[2]), noun, plural, adjs, mod, (s,))
      items.append(("de", (s,)))
      items.extend(possessor)
    else:
      items = self._realize_np(det, noun, plural, adjs, mod, None)
    if post and depth < 3:
      room = self.target - len(src)
      r = rnd()
      grow = min(2.0, room / 20.0)
      if room >= 4 and r < 0.08 * grow:
        src.append("of")
        items.append(("de", (len(src) - 1,)))
        items.extend(self._np(depth + 1)[0])
      elif room >= 4 and r < 0.18 * grow:
        items.extend(self._pp(depth + 1))
      elif room >= 5 and depth < 2 and r < 0.28 * grow:
        items.extend(self._relative(depth + 1, noun[5], noun[4], plural))
    return items, noun[4], plural

  def _realize_np(
    self,
    det: tuple,
    noun: tuple,
    plural: int,
    adjs: Sequence[tuple],
    mod: tuple | None,
    det_links: tuple[int, ...] | None,
  ) -> list[_Item]:
    """Emits the English of "DET ADJ* [MOD] NOUN" and returns its French items.

    French order: determiner, prenominal adjectives, noun, "de MOD", then the postnominal
    adjectives in mirrored order. A determiner with no English words is unaligned unless
    `det_links` gives its source positions (the possessive "'s").
    """
    src = self.src
    en_det, fr_m, fr_f = det
    fem = noun[4]
    fr_det = fr_f if (fem and fr_f) else fr_m
    i = len(src)
    if len(en_det) == 1:
      w = en_det[0]
      if w == "a":
        first = adjs[0][0] if adjs else (mod[0] if mod else noun[0])
        w = "an" if _en_uses_an(first) else "a"
      src.append(w)
      items = [(fr_det[0], (i,))] if len(fr_det) == 1 else [(x, (i,)) for x in fr_det]
    elif en_det:
      src.extend(en_det)
      if len(en_det) == 2 and len(fr_det) == 2:  # "all the" -> "tous les": word by word.
        items = [(fr_det[0], (i,)), (fr_det[1], (i + 1,))]
      else:
        links = tuple(range(i, len(src)))
        items = [(x, links) for x in fr_det]
    else:
      links = det_links if det_links is not None else _EMPTY
      items = [(x, links) for x in fr_det]
    if adjs:
      form = fem + 2 * plural
      post_adjs = []
      for a in adjs:
        src.append(a[0])
        if a[2]:
          items.append((a[1][form], (len(src) - 1,)))
        else:
          post_adjs.append((a[1][form], (len(src) - 1,)))
    else:
      post_adjs = None
    if mod is not None:
      src.append(mod[0])
      mod_links = (len(src) - 1,)
    src.append(noun[1] if plural else noun[0])
    items.append((noun[3] if plural else noun[2], (len(src) - 1,)))
    if mod is not None:
      items.append(("de", _EMPTY))
      items.append((mod[2], mod_links))
    if post_adjs:
      post_adjs.reverse()
      items.extend(post_adjs)
    return items

  def _pp(self, depth: int) -> list[_Item]:
    """A prepositional phrase; multi-word prepositions are aligned all-to-all."""
    lex, src = self.lex, self.src
    en_p, fr_p = self._pick(lex.preps, lex.prep_cum)
    links = tuple(range(len(src), len(src) + len(en_p)))
    src.extend(en_p)
    np_items = self._np(depth)[0]
    if np_items[0] == ("des", _EMPTY) and fr_p[-1] == "sans":  # "without cats" -> "sans chats".
      del np_items[0]
    return [(w, links) for w in fr_p] + np_items


class _Predicates(_NounPhrases):
  """The predicate rules: the verb group (tense, negation, adverbs, clitics), the verb phrase
  with its object and modifiers, and the copula with a predicate adjective."""

  def _verb_group(
    self,
    verb: tuple,
    plural: int,
    clitic: tuple | None,
    agree: tuple[int, int] | None,
  ) -> list[_Item]:
    """Emits the English verb group (and object pronoun) and returns the French verb group.

    Chooses tense (present, past -> passé composé, future), negation ("not" -> "ne ... pas",
    "never" -> "ne ... jamais") and a frequency adverb (placed after the French finite verb).
    `clitic` is an object pronoun row, placed before the French finite verb; `agree` is the
    (fem, plural) of a preceding direct object, which the past participle agrees with.
    """
    lex, rnd, src = self.lex, self.rnd, self.src
    r = rnd()
    tense = 0 if r < 0.5 else (1 if r < 0.8 else 2)
    r = rnd()
    neg = 1 if r < 0.1 else (2 if r < 0.13 else 0)
    freq = self._pick(lex.adv_f, lex.adv_f_cum) if neg != 2 and rnd() < 0.06 else None
    freq_at = -1
    i = len(src)
    lex_links = None
    if tense == 1:
      fin = "ont" if plural else "a"
      pp = verb[5][agree[0] + 2 * agree[1]] if agree else verb[5][0]
      if neg == 1:
        src.extend(("did", "not"))
        if freq:
          freq_at = len(src)
          src.append(freq[0])
        src.append(verb[0])
        fin_links, lex_links = (i,), (len(src) - 1,)
      else:
        if neg == 2:
          src.append("never")
        elif freq:
          freq_at = len(src)
          src.append(freq[0])
        src.append(verb[2])
        fin_links = lex_links = (len(src) - 1,)
      neg_links = (i + 1,) if neg == 1 else (i,)
    else:
      if tense == 0:
        fin = verb[4] if plural else verb[3]
        if neg == 1:
          src.extend(("do" if plural else "does", "not"))
      else:
        fin = verb[7] if plural else verb[6]
        src.append("will")
        if neg == 1:
          src.append("not")
      if neg == 2:
        src.append("never")
      neg_links = (len(src) - 1,)
      if freq:
        freq_at = len(src)
        src.append(freq[0])
      src.append(verb[0] if (plural or tense or neg == 1) else verb[1])
      fin_links = (i, len(src) - 1) if (tense or neg == 1) else (len(src) - 1,)
    items = []
    if neg:
      items.append(("ne", neg_links))
    if clitic is not None:
      src.append(clitic[0])
      items.append((clitic[1], (len(src) - 1,)))
    items.append((fin, fin_links))
    if neg:
      items.append(("pas" if neg == 1 else "jamais", neg_links))
    if freq:
      items.extend([(w, (freq_at,)) for w in freq[1]])
    if lex_links is not None:
      items.append((pp, lex_links))
    return items

  def _vp(self, depth: int, plural: int, gap: tuple[int, int] | None) -> list[_Item]:
    """The predicate after the subject; `gap` is the (fem, plural) of a relativised object."""
    lex, rnd, src = self.lex, self.rnd, self.src
    room = self.target - len(src)
    transitive = gap is not None or (room >= 3 and rnd() < 0.62)
    if transitive:
      verb = self._pick(lex.vt, lex.vt_cum)
    else:
      verb = self._pick(lex.vi, lex.vi_cum)
    clitic = None
    if transitive and gap is None and rnd() < 0.08:
      clitic = _OBJ_PRONOUNS[int(rnd() * len(_OBJ_PRONOUNS))]
    items = self._verb_group(verb, plural, clitic, gap or (clitic[2] if clitic else None))
    obj = self._np(depth + 1)[0] if transitive and gap is None and clitic is None else []
    if obj and items[0][0] == "ne":
      # Negated indefinite object: "does not eat an apple / apples" -> "ne mange pas de pomme(s)".
      w, links = obj[0]
      if w == "des" or ((w == "un" or w == "une") and src[links[0]] in ("a", "an")):
        obj[0] = ("de", links)
    if room >= 4 and rnd() < 0.06:
      # Manner adverb: after the English object, right after the French verb group.
      adv = self._pick(lex.adv_m, lex.adv_m_cum)
      src.append(adv[0])
      items.extend([(w, (len(src) - 1,)) for w in adv[1]])
    items.extend(obj)
    room = self.target - len(src)
    if room >= 3 and rnd() < 0.35 * min(2.0, room / 20.0):
      items.extend(self._pp(depth + 1))
      room = self.target - len(src)
      if room >= 3 and rnd() < 0.15 * min(2.0, room / 20.0):
        items.extend(self._pp(depth + 1))
    if (self.target - len(self.src)) >= 2 and rnd() < 0.04:
      adv = self._pick(lex.adv_t, lex.adv_t_cum)
      src.append(adv[0])
      items.extend([(w, (len(src) - 1,)) for w in adv[1]])
    return items

  def _copula(self, depth: int, fem: int, plural: int) -> list[_Item]:
    """ "is (not) (very) ADJ" -> "(ne) est (pas) (très) ADJ", the adjective agreeing."""
    rnd, src = self.rnd, self.src
    i = len(src)
    tense = rnd()
    neg = int(rnd() < 0.12)
    if tense < 0.55:
      src.append("are" if plural else "is")
      cop, cop_links = ("sont" if plural else "est"), (i,)
    elif tense < 0.85:
      src.append("were" if plural else "was")
      cop, cop_links = ("étaient" if plural else "était"), (i,)
    else:
      src.append("will")
      cop, cop_links = ("seront" if plural else "sera"), (i, i + 1 + neg)
    items = []
    if neg:
      src.append("not")
      items.append(("ne", (i + 1,)))
    if tense >= 0.85:
      src.append("be")
    items.append((cop, cop_links))
    if neg:
      items.append(("pas", (i + 1,)))
    r = rnd()
    if r < 0.18:
      src.append("very" if r < 0.15 else "too")
      items.append(("très" if r < 0.15 else "trop", (len(src) - 1,)))
    adj = self._adj()
    src.append(adj[0])
    items.append((adj[1][fem + 2 * plural], (len(src) - 1,)))
    if (self.target - len(self.src)) >= 3 and rnd() < 0.3:
      items.extend(self._pp(depth + 1))
    return items


class _Generator(_Predicates):
  """Generates one sentence pair at a time; see the module docstring for the grammar.

  The rules come in layers: the shared state (`_Rules`), noun phrases (`_NounPhrases`),
  predicates (`_Predicates`), and here sentences and clauses, relative clauses included.
  """

  def sentence(self, target: int) -> tuple[list[str], list[_Item]]:
    """English tokens and French items of one sentence of about `target` tokens."""
    self.src = src = []
    self.target = target
    lex = self.lex
    fr = self._clause(0)
    while target - len(src) >= 4:
      en_c, fr_c = self._pick(lex.conjs, lex.conj_cum)
      links = tuple(range(len(src), len(src) + len(en_c)))
      src.extend(en_c)
      fr.extend([(w, links) for w in fr_c])
      fr.extend(self._clause(0))
    src.append(".")
    fr.append((".", (len(src) - 1,)))
    return src, fr

  def _clause(self, depth: int) -> list[_Item]:
    r = self.rnd()
    room = self.target - len(self.src)
    if r < 0.05 and room >= 5:
      return self._there_clause(depth)
    if r < 0.12 and room >= 7 and depth < 2:
      return self._complement_clause(depth)
    subj, fem, plural = self._subject(depth)
    if r < 0.27:
      return subj + self._copula(depth, fem, plural)
    return subj + self._vp(depth, plural, None)

  def _there_clause(self, depth: int) -> list[_Item]:
    """ "there is/are/was/were/will be NP" -> "il y a/avait/aura NP" (no number agreement)."""
    rnd, src = self.rnd, self.src
    i = len(src)
    r = rnd()
    src.append("there")
    if r < 0.85:
      src.append("")  # "is"/"are" or "was"/"were", once the noun phrase's number is known.
      verb = ("a" if r < 0.6 else "avait", (i + 1,))
    else:
      src.extend(("will", "be"))
      verb = ("aura", (i + 1, i + 2))
    np_items, _, plural = self._np(depth, indefinite=True)
    if r < 0.85:
      src[i + 1] = ("are" if plural else "is") if r < 0.6 else ("were" if plural else "was")
    items = [("il", (i,)), ("y", (i,)), verb, *np_items]
    if (self.target - len(self.src)) >= 3 and rnd() < 0.5:
      items.extend(self._pp(depth + 1))
    return items

  def _complement_clause(self, depth: int) -> list[_Item]:
    """ "SUBJ says (that) CLAUSE" -> "SUBJ dit que CLAUSE"."""
    lex, rnd, src = self.lex, self.rnd, self.src
    subj, _, plural = self._subject(depth + 1)
    verb = self._pick(lex.vc, lex.vc_cum)
    items = subj + self._verb_group(verb, plural, None, None)
    if rnd() < 0.7:
      src.append("that")
      items.append(("que", (len(src) - 1,)))
    else:
      items.append(("que", _EMPTY))
    return items + self._clause(depth + 1)

  def _relative(self, depth: int, animate: bool, fem: int, plural: int) -> list[_Item]:
    """A relative clause on an antecedent with the given animacy, gender and number."""
    rnd, src = self.rnd, self.src
    if rnd() < 0.6 or (self.target - len(self.src)) < 6:
      # Subject relative: "(the cat) that sleeps" -> "qui dort".
      if animate:
        src.append("who" if rnd() < 0.6 else "that")
      else:
        src.append("which" if rnd() < 0.4 else "that")
      items = [("qui", (len(src) - 1,))]
      if rnd() < 0.2:
        return items + self._copula(depth, fem, plural)
      return items + self._vp(depth, plural, None)
    # Object relative: "(the apple) (that) the cat ate" -> "que le chat a mangée".
    r = rnd()
    if r < 0.3:
      items = [("que", _EMPTY)]
    else:
      if animate:
        src.append("who" if r < 0.6 else "that")
      else:
        src.append("which" if r < 0.6 else "that")
      items = [("que", (len(src) - 1,))]
    subj, _, s_plural = self._subject(depth + 1)
    return items + subj + self._vp(depth, s_plural, (fem, plural))


# French words the final pass may change, and their elided forms before a vowel.
_ELIDE = {"le": "l'", "la": "l'", "ne": "n'", "que": "qu'", "ce": "cet", "ma": "mon", "sa": "son"}
_SPECIAL = frozenset(("de", "à", *_ELIDE))


def _finish_french(items: Sequence[_Item]) -> tuple[list[str], list[tuple[int, int]]]:
  """Applies French contractions and elisions; returns target tokens and (src, tgt) links.

  "de le" -> "du", "de les" -> "des", "à le" -> "au", "à les" -> "aux", "de des" -> "de"; before a
  vowel: "le/la" -> "l'", "de" -> "d'", "ne" -> "n'", "que" -> "qu'", "ce" -> "cet", "ma/sa" ->
  "mon/son". A merged token keeps both words' links.
  """
  special = _SPECIAL
  words: list = [w for w, _ in items]
  links_of = [links for _, links in items]
  n = len(words)
  words.append("")  # Sentinels: "next word" of the last ones.
  words.append("")

  def vowel(w: str) -> bool:
    return bool(w) and w[0] in _FR_VOWELS and w not in _NO_ELISION

  merged = False
  for k in [k for k in range(n) if words[k] in special]:
    w = words[k]
    if w is None:  # Merged into the previous word.
      continue
    nxt = words[k + 1]
    if w == "de" or w == "à":
      if nxt == "le" and not vowel(words[k + 2]):
        words[k] = "du" if w == "de" else "au"
      elif nxt == "les":
        words[k] = "des" if w == "de" else "aux"
      elif w == "de" and nxt == "des":
        if vowel(words[k + 2]):
          words[k] = "d'"
      else:
        if w == "de" and vowel(nxt):
          words[k] = "d'"
        continue
      links_of[k] += links_of[k + 1]
      words[k + 1] = None
      merged = True
    elif vowel(nxt):
      words[k] = _ELIDE[w]
  del words[n:]
  if merged:
    links_of = [links for w, links in zip(words, links_of, strict=True) if w is not None]
    words = [w for w in words if w is not None]
  return words, [(s, j) for j, links in enumerate(links_of) for s in links]


class _LengthSampler:
  """Draws target lengths from a log-normal truncated to [min_len, max_len]."""

  def __init__(self, min_len: int, max_len: int):
    self.dist = statistics.NormalDist(math.log(_LEN_MEDIAN), _LEN_SIGMA)
    lo = self.dist.cdf(math.log(max(min_len, MIN_SENTENCE_LEN) - 0.5))
    hi = self.dist.cdf(math.log(max_len + 0.5))
    self.lo, self.width = lo, hi - lo
    self.min_len, self.max_len = min_len, max_len

  def __call__(self, u: float) -> int:
    p = self.lo + self.width * u
    p = min(max(p, 1e-12), 1 - 1e-12)
    t = round(math.exp(self.dist.inv_cdf(p)))
    return min(max(t, self.min_len, MIN_SENTENCE_LEN), self.max_len)


def generate(
  num_pairs: int,
  *,
  seed: int = 0,
  split: str = "train",
  vocab_size: int = 40_000,
  min_len: int = 3,
  max_len: int = 80,
) -> Iterator[Pair]:
  """Yields `num_pairs` sentence pairs of one split; the same arguments give the same pairs.

  Args:
    num_pairs: number of pairs to yield.
    seed: corpus seed; each split draws from a stream seeded with (seed, split).
    split: "train", "valid" or "test"; a source sentence can only occur in one split.
    vocab_size: English word types the lexicon can produce (at least the core lexicon's size).
    min_len: shortest source sentence, in tokens including the final ".".
    max_len: longest source sentence, in tokens including the final ".".
  """
  if split not in _BUCKETS:
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
  if num_pairs < 0:
    raise ValueError(f"num_pairs must be >= 0, got {num_pairs}")
  if max_len < MIN_SENTENCE_LEN or min_len > max_len:
    raise ValueError(
      f"need {MIN_SENTENCE_LEN} <= max_len and min_len <= max_len, got [{min_len}, {max_len}]"
    )
  _lexicon(vocab_size)  # Raises for a too small vocab_size now rather than on first use.
  return _generate(num_pairs, seed, split, vocab_size, min_len, max_len)


def _generate(
  num_pairs: int, seed: int, split: str, vocab_size: int, min_len: int, max_len: int
) -> Iterator[Pair]:
  lex = _lexicon(vocab_size)
  rng = random.Random(f"seq2seq-synthetic:{seed}:{split}")
  gen = _Generator(lex, rng)
  sample_len = _LengthSampler(min_len, max_len)
  buckets = _BUCKETS[split]
  lo, hi = buckets.start, buckets.stop
  crc32 = zlib.crc32
  made = 0
  while made < num_pairs:
    src, fr = gen.sentence(sample_len(rng.random()))
    n = len(src)
    if n < min_len or n > max_len:
      continue
    text = " ".join(src)
    if not lo <= crc32(text.encode()) % _NUM_BUCKETS < hi:
      continue
    tgt, align = _finish_french(fr)
    align.sort()
    yield Pair(tuple(src), tuple(tgt), tuple(align))
    made += 1


def render_noun_phrase(
  noun: str,
  adjectives: Sequence[str] = (),
  *,
  det: str = "the",
  plural: bool = False,
  compound: str | None = None,
  vocab_size: int = 40_000,
) -> Pair:
  """Renders one noun phrase from core lexicon entries, as the generator would (for tests).

  Args:
    noun: English singular of the head noun.
    adjectives: English adjectives, in English order.
    det: English determiner ("the", "a", "this", "my", "all the", "two", ...; "" for none).
    plural: whether the noun phrase is plural.
    compound: English singular of a modifier noun ("car" in "car industry").
    vocab_size: lexicon to use.
  """
  lex = _lexicon(vocab_size)
  try:
    head = lex.noun_by_en[noun]
    adjs = [lex.adj_by_en[a] for a in adjectives]
    mod = lex.noun_by_en[compound] if compound else None
    row = lex.det_by_en[(det, int(plural))]
  except KeyError as e:
    raise ValueError(f"not in the lexicon: {e.args[0]!r}") from None
  gen = _Generator(lex, random.Random(0))
  items = gen._realize_np(row, head, int(plural), adjs, mod, None)
  tgt, align = _finish_french(items)
  return Pair(tuple(gen.src), tuple(tgt), tuple(sorted(align)))


def lexicon_size(vocab_size: int = 40_000) -> tuple[int, int]:
  """(English, French) word types the generator can produce with this `vocab_size`."""
  lex = _lexicon(vocab_size)
  return lex.en_types, lex.fr_types


# ----------------------------------------------------------------------------- alignment I/O


def format_alignment(align: Iterable[tuple[int, int]]) -> str:
  """Pharaoh format: "0-0 1-2 2-1" (source index, target index)."""
  return " ".join(f"{i}-{j}" for i, j in align)


def parse_alignment(line: str) -> tuple[tuple[int, int], ...]:
  """Inverse of `format_alignment`; raises ValueError naming a malformed item."""
  links = []
  for item in line.split():
    i, sep, j = item.partition("-")
    if not sep or not i.isdigit() or not j.isdigit() or not i.isascii() or not j.isascii():
      raise ValueError(f"malformed alignment item {item!r} in {line!r}: expected 'i-j'")
    links.append((int(i), int(j)))
  return tuple(links)


# ----------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> None:
  """Writes PREFIX.src, PREFIX.tgt and PREFIX.align and prints the generation speed."""
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  p.add_argument("--pairs", type=int, default=1000, help="number of sentence pairs")
  p.add_argument("--seed", type=int, default=0, help="corpus seed")
  p.add_argument("--out", required=True, help="output prefix")
  p.add_argument("--split", default="train", choices=SPLITS)
  p.add_argument("--min-len", type=int, default=3, help="shortest source sentence (tokens)")
  p.add_argument("--max-len", type=int, default=80, help="longest source sentence (tokens)")
  p.add_argument("--vocab-size", type=int, default=40_000, help="English word types")
  args = p.parse_args(argv)
  try:  # A setting the generator refuses is a usage error: one line, exit status 2.
    _lexicon(args.vocab_size)  # Built once and cached; not part of the measured rate.
    start = time.perf_counter()
    pairs = list(
      generate(
        args.pairs,
        seed=args.seed,
        split=args.split,
        vocab_size=args.vocab_size,
        min_len=args.min_len,
        max_len=args.max_len,
      )
    )
  except ValueError as e:
    p.error(str(e))
  elapsed = time.perf_counter() - start
  for ext, lines in (
    ("src", (" ".join(q.src) for q in pairs)),
    ("tgt", (" ".join(q.tgt) for q in pairs)),
    ("align", (format_alignment(q.align) for q in pairs)),
  ):
    with open(f"{args.out}.{ext}", "w", encoding="utf-8") as f:
      f.writelines(line + "\n" for line in lines)
  rate = len(pairs) / elapsed if elapsed > 0 else float("inf")
  print(
    f"{len(pairs)} pairs in {elapsed:.2f} s ({rate:,.0f} pairs/s) -> {args.out}.{{src,tgt,align}}"
  )


if __name__ == "__main__":
  main()

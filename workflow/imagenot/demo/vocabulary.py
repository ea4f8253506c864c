"""Word pools and caption templates of the demo world (data only, no logic).

Synset pools name a WordNet noun by one lemma; :mod:`imagenot.demo.captions` resolves and checks
them against WordNet when the world is built (a pool entry that breaks its role's rule is an
error, not a silent skip). Filler words are checked too: any filler that is a WordNet noun lemma
is dropped, so captions mention exactly the nouns they were written around.
"""

from __future__ import annotations

# Ordinary candidates: monosemous lemmas (the string names exactly one noun synset, which is its
# first lemma), not ImageNet classes, sharing no lemma with one, WordNet leaves. The seed deals
# them out to the roles "intended survivor", "low similarity" and "rare".
ORDINARY_POOL = (
    "aardwolf baklava capybara cassowary chandelier colander cormorant crumpet cupcake "
    "easel falafel gnu harpoon hummus igloo kayak kookaburra manatee marshmallow meringue "
    "metronome minaret ocelot okapi pagoda ravioli sampan sauerkraut serval sitar "
    "strudel tadpole thermos tiara tiramisu toboggan wigwam"
).split()
# Left out after checking with MiniLM (caption vs "<name> which is <gloss>"): words whose bare
# mention already scores high (gyroscope, stapler, hovercraft, skateboard, sushi, risotto,
# gnocchi, trampoline, paella) or whose on-topic captions score low (lectern, brioche, narwhal,
# caracal), so "survivor" and "low similarity" stay apart whatever the seed deals; and words
# with another lemma naming an ImageNet class (aardvark and pangolin are both "anteater").

# ILSVRC-2012 classes named by a lemma no other noun synset has (clean ImageNet stand-in classes).
IMAGENET_POOL = (
    "accordion bagel banjo cello cheetah espresso flamingo forklift goldfish guacamole "
    "harmonica hippopotamus hourglass koala pretzel sundial trombone unicycle yurt zebra"
).split()

# Lemmas naming an ImageNet class and also other, non-ImageNet synsets (method step 2).
SHARES_IMAGENET_LEMMA_POOL = (
    "abacus anteater harp jellyfish lemon mushroom ostrich scooter snorkel strawberry "
    "tarantula tractor volcano wig"
).split()

# Hypernyms of ordinary candidates (method step 4 removes them as non-leaves).
ANCESTOR_POOL = (
    "cetacean clothing giraffe headdress mammal placental ratite rodent sled ungulate vertebrate"
).split()

# Class names WordNet files under the usage domain obscenity/vulgarism (method step 5).
NSFW_POOL = ("bullshit", "chickenshit", "motherfucker")

# Usage domains whose members a class-name NSFW filter must flag.
NSFW_USAGE_DOMAINS = ("obscenity.n.02", "vulgarism.n.01", "ethnic_slur.n.01")

# --- filler words (anything that is a WordNet noun lemma is removed when the world is built;
# "|" separates the entries that may hold spaces or be empty) ---
OPENERS = tuple("the|this|my|our|your|such a|just a|really|very||".split("|"))
ADJECTIVES = (
    "beautiful cute tiny huge big new tame happy sleepy rare wonderful amazing adorable "
    "majestic graceful colorful bright shiny golden handmade traditional fresh homemade tasty "
    "crispy warm gorgeous stunning elegant"
).split()
TAILS = tuple(
    "|||seen nearby|spotted again|resting quietly|photographed up close|photographed again|"
    "seen together again|indoors|alone|calmly resting|proudly".split("|")
)
# Shop-listing noise around an incidental mention (method step 7: low caption-gloss similarity).
JUNK = (
    "kaufen jetzt bestellen gratis descargar oferta envio rabatt versandkostenfrei angebot neu "
    "hochwertig billig schnell lieferung gebraucht guenstig ahora comprar nuevo barato mejor "
    "precio nuovo prezzo spedizione online cheap themed inspired printed random misc assorted "
    "various unrelated hd 4k xxl vs pcs 2017 2019 2020 4471 0815 007"
).split()
INCIDENTAL_TEMPLATES = tuple(
    "{j} {j} {j} {j} {lemma} {j} {j} {j} {j}|{j} {j} {j} {lemma} {j} {j} {j} {j} {j} {j}|"
    "{j} {j} {j} {j} {j} {j} {lemma} {j} {j}|{j} {j} {j} {j} {j} {j} {j} {j} {lemma} {j}".split("|")
)
TWO_CLASS_TEMPLATES = tuple(
    "{a} and {b} together|the {a} with the {b}|my {a} next to our {b}|{a} vs {b}".split("|")
)
# Caption pieces with no noun lemma at all: non-Latin scripts, emoji, digits, punctuation.
NO_NOUN_PIECES = tuple(
    "東京の夜景|海边日落|서울 여행|Привет|Москва 2019|καλημέρα|ঢাকা|שלום|مرحبا|✨✨|🌸🌸🌸|😍|🔥🔥|♥|★★★★☆|2019|"
    "2020|#4471|...|!!!|—|(0815)|№ 42|→".split("|")
)

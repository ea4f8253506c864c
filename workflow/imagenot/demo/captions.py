"""Which WordNet synsets the demo world plants, and the captions written around them.

Every caption is checked with :class:`NounLemmaIndex`, a reference word-boundary matcher over all
WordNet noun lemmas (case-insensitive), so a caption mentions exactly the lemmas it was written
around: one class lemma, two for two-class captions, none for no-noun captions.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from imagenot.core.wordnet import imagenet_wnids, lemma_text, synset_of, wnid
from imagenot.demo import vocabulary as vocab
from imagenot.demo.settings import DemoSettings

ROLES = (
    "intended_survivors",
    "imagenet_classes",
    "shares_imagenet_lemma",
    "rare",
    "ancestors",
    "nsfw",
    "low_similarity",
)
_ASCII_SEPARATORS = re.compile(r"[^a-z0-9]+")
_GLOSS_STOPWORDS = frozenset(
    "that which with from having used into than their there these those when where about "
    "other often some very usually especially chiefly being also".split()
)


def normalise(text: str, ascii_only: bool = False) -> str:
    """Lower-case ``text``; every run of characters other than letters and digits becomes one space.

    ``ascii_only`` treats every non-ASCII character as a separator too (a stricter check).
    """
    text = text.lower()
    if ascii_only or text.isascii():
        return _ASCII_SEPARATORS.sub(" ", text).strip()
    return " ".join("".join(ch if ch.isalnum() else " " for ch in text).split())


class NounLemmaIndex:
    """All WordNet noun lemma strings, matched on word boundaries, case-insensitively."""

    def __init__(self, wnids_of: dict[str, set[str]]):
        self.wnids_of = {k: tuple(sorted(v)) for k, v in wnids_of.items() if k}
        self.max_words = max(len(k.split()) for k in self.wnids_of)

    @classmethod
    def from_wordnet(cls, wn) -> NounLemmaIndex:
        """From WordNet's ``index.noun`` (every noun lemma and its synset offsets; fast)."""
        wnids_of: dict[str, set[str]] = defaultdict(set)
        with wn.open("index.noun") as f:
            for line in f:
                if line.startswith(" "):  # licence header
                    continue
                fields = line.split()
                n_synsets, n_pointers = int(fields[2]), int(fields[3])
                offsets = fields[6 + n_pointers : 6 + n_pointers + n_synsets]
                wnids_of[normalise(fields[0])].update(f"n{int(o):08d}" for o in offsets)
        return cls(wnids_of)

    def lemmas_in(self, text: str) -> set[str]:
        """Normalised noun lemma strings occurring in ``text``, under both normalisations."""
        found: set[str] = set()
        for ascii_only in (False, True):
            words = normalise(text, ascii_only).split()
            for n in range(1, min(self.max_words, len(words)) + 1):
                for i in range(len(words) - n + 1):
                    gram = " ".join(words[i : i + n])
                    if gram in self.wnids_of:
                        found.add(gram)
        return found

    def is_noun(self, phrase: str) -> bool:
        """True if ``phrase`` contains any noun lemma."""
        return bool(self.lemmas_in(phrase))


@dataclass(frozen=True)
class PlantedClass:
    """A synset the demo world writes captions around."""

    wnid: str
    lemma: str  # the word written into captions
    role: str
    name: str  # first WordNet lemma, as curation names the class
    gloss: str
    gloss_words: tuple[str, ...]  # non-noun gloss words that make captions on-topic


def _planted(wn, index: NounLemmaIndex, sid: str, lemma: str, role: str) -> PlantedClass:
    synset = synset_of(wn, sid)
    words = sorted(
        {
            w
            for w in re.findall(r"[a-z]+", synset.definition().lower())
            if len(w) >= 4 and w not in _GLOSS_STOPWORDS and not index.is_noun(w)
        }
    )
    name = lemma_text(synset.lemma_names()[0])
    return PlantedClass(sid, lemma, role, name, synset.definition(), tuple(words))


def _only_synset(index: NounLemmaIndex, lemma: str, role: str) -> str:
    sids = index.wnids_of.get(normalise(lemma), ())
    if len(sids) != 1:
        raise ValueError(
            f"demo vocabulary: {role} lemma {lemma!r} names {len(sids)} noun synsets, expected 1"
        )
    return sids[0]


def hypernym_ancestors(wn, sid: str) -> set[str]:
    """wnids of every hypernym ancestor of ``sid`` (instance hypernyms included)."""
    synset = synset_of(wn, sid)
    seen = {wnid(s) for s in synset.closure(lambda s: s.hypernyms() + s.instance_hypernyms())}
    seen.discard(sid)
    return seen


def _imagenet_lemmas(wn) -> set[str]:
    return {
        normalise(lemma_text(name))
        for sid in imagenet_wnids()
        for name in synset_of(wn, sid).lemma_names()
    }


def _sample(rng: np.random.Generator, pool: Sequence[str], n: int, key: str) -> list[str]:
    if n > len(pool):
        raise ValueError(f"config key demo_world.{key}: {n} requested, only {len(pool)} available")
    picked = rng.choice(len(pool), size=n, replace=False)
    return sorted(pool[i] for i in picked)


def plan_classes(wn, index: NounLemmaIndex, rng: np.random.Generator, counts: DemoSettings) -> dict:
    """Choose the planted synsets of each role (``ROLES``) from the vocabulary pools.

    ``counts`` (the demo settings) gives ``n_survivors``, ``n_low_similarity``, ``n_rare``, ``n_imagenet_classes``,
    ``n_shares_imagenet_lemma``, ``n_ancestors``, ``n_nsfw``. Returns role -> [PlantedClass].
    """
    imagenet = set(imagenet_wnids())
    imagenet_lemmas = _imagenet_lemmas(wn)

    ordinary = {}
    for lemma in vocab.ORDINARY_POOL:
        sid = _only_synset(index, lemma, "ordinary")
        synset = synset_of(wn, sid)
        shares = any(normalise(lemma_text(n)) in imagenet_lemmas for n in synset.lemma_names())
        if sid in imagenet or shares or synset.hyponyms():
            raise ValueError(
                f"demo vocabulary: {lemma!r} is or shares a lemma with ImageNet, or no leaf"
            )
        ordinary[lemma] = sid
    n_ord = counts.n_survivors + counts.n_low_similarity + counts.n_rare
    dealt = _sample(rng, sorted(ordinary), n_ord, "n_survivors")
    dealt = [dealt[i] for i in rng.permutation(len(dealt))]
    plan: dict[str, list[PlantedClass]] = {role: [] for role in ROLES}
    start = 0
    for role, n in (
        ("intended_survivors", counts.n_survivors),
        ("low_similarity", counts.n_low_similarity),
        ("rare", counts.n_rare),
    ):
        lemmas = sorted(dealt[start : start + n])
        plan[role] = [_planted(wn, index, ordinary[lem], lem, role) for lem in lemmas]
        start += n

    for lemma in _sample(rng, vocab.IMAGENET_POOL, counts.n_imagenet_classes, "n_imagenet_classes"):
        sid = _only_synset(index, lemma, "imagenet")
        if sid not in imagenet:
            raise ValueError(f"demo vocabulary: {lemma!r} is not an ImageNet class")
        plan["imagenet_classes"].append(_planted(wn, index, sid, lemma, "imagenet_classes"))

    n_shares = counts.n_shares_imagenet_lemma
    for lemma in _sample(
        rng, vocab.SHARES_IMAGENET_LEMMA_POOL, n_shares, "n_shares_imagenet_lemma"
    ):
        sids = index.wnids_of.get(normalise(lemma), ())
        in_net = sorted(s for s in sids if s in imagenet)
        if not in_net or len(in_net) == len(sids):
            raise ValueError(f"demo vocabulary: {lemma!r} does not share a lemma with ImageNet")
        # Captions are written for the ImageNet sense; the other senses ride along in matching.
        plan["shares_imagenet_lemma"].append(
            _planted(wn, index, in_net[0], lemma, "shares_imagenet_lemma")
        )

    leaves = [c.wnid for c in plan["intended_survivors"] + plan["low_similarity"]]
    ancestors = {lemma: _only_synset(index, lemma, "ancestor") for lemma in vocab.ANCESTOR_POOL}
    eligible = [
        lemma
        for lemma, sid in ancestors.items()
        if any(sid in hypernym_ancestors(wn, leaf) for leaf in leaves)
    ]
    for lemma in _sample(rng, eligible, min(counts.n_ancestors, len(eligible)), "n_ancestors"):
        plan["ancestors"].append(_planted(wn, index, ancestors[lemma], lemma, "ancestors"))

    for lemma in _sample(rng, vocab.NSFW_POOL, counts.n_nsfw, "n_nsfw"):
        sid = _only_synset(index, lemma, "nsfw")
        if not nsfw_by_usage_domain(wn, sid):
            raise ValueError(f"demo vocabulary: {lemma!r} has no NSFW usage domain in WordNet")
        plan["nsfw"].append(_planted(wn, index, sid, lemma, "nsfw"))
    return plan


def nsfw_by_usage_domain(wn, sid: str) -> bool:
    """True if WordNet files the synset under an obscenity/vulgarism/slur usage domain."""
    domains = {d.name() for d in synset_of(wn, sid).usage_domains()}
    return bool(domains & set(vocab.NSFW_USAGE_DOMAINS))


def shared_lemma_synsets(index: NounLemmaIndex, lemma: str) -> list[str]:
    """Non-ImageNet synsets named by ``lemma`` (the ones method step 2 removes by lemma)."""
    imagenet = set(imagenet_wnids())
    return [s for s in index.wnids_of.get(normalise(lemma), ()) if s not in imagenet]


class CaptionWriter:
    """Writes captions of each kind with a numpy Generator; fillers that are nouns are dropped."""

    def __init__(self, index: NounLemmaIndex, rng: np.random.Generator):
        self.index = index
        self.rng = rng
        self.openers = [p for p in vocab.OPENERS if not index.is_noun(p)]
        self.adjectives = [w for w in vocab.ADJECTIVES if not index.is_noun(w)]
        self.tails = [p for p in vocab.TAILS if not index.is_noun(p)]
        self.junk = [w for w in vocab.JUNK if not index.is_noun(w)]
        self.no_noun_pieces = [p for p in vocab.NO_NOUN_PIECES if not index.is_noun(p)]

    def _pick(self, items: Sequence[str]) -> str:
        return items[int(self.rng.integers(len(items)))]

    def _checked(self, make, expected: Iterable[str]) -> str:
        """Draw captions from ``make`` until one mentions exactly the ``expected`` lemmas."""
        want = {normalise(x) for x in expected}
        for _ in range(100):
            text = " ".join(make().split())
            if self.index.lemmas_in(text) == want:
                return text
        raise RuntimeError(f"could not write a caption mentioning exactly {sorted(want)}")

    def good(self, cls: PlantedClass) -> str:
        """An on-topic caption: opener, adjectives (often from the gloss), lemma, tail."""

        def make() -> str:
            adjectives = []
            for _ in range(int(self.rng.integers(1, 4))):
                use_gloss = cls.gloss_words and self.rng.random() < 0.8
                adjectives.append(self._pick(cls.gloss_words if use_gloss else self.adjectives))
            text = f"{self._pick(self.openers)} {' '.join(adjectives)} {cls.lemma} "
            text += self._pick(self.tails)
            if self.rng.random() < 0.5:
                text = text.strip().capitalize()
            return text + self._pick(("", "", ".", "!", " :)"))

        return self._checked(make, [cls.lemma])

    def best(self, cls: PlantedClass) -> str:
        """A caption written to rank first in its class: the lemma, "which is" and every
        non-noun word of the gloss, as the curation's query reads (``{name} which is {gloss}``);
        :meth:`good` where that would mention another noun lemma."""
        text = f"{cls.lemma} which is {' '.join(cls.gloss_words)}".strip()
        text += self._pick(("", ".", "!"))
        if self.index.lemmas_in(text) == {normalise(cls.lemma)}:
            return text
        return self.good(cls)

    def incidental(self, cls: PlantedClass) -> str:
        """The class word lost in shop-listing noise (low caption-gloss similarity)."""

        def make() -> str:
            template = self._pick(vocab.INCIDENTAL_TEMPLATES)
            parts = template.split(" ")
            return " ".join(cls.lemma if p == "{lemma}" else self._pick(self.junk) for p in parts)

        return self._checked(make, [cls.lemma])

    def two_class(self, a: PlantedClass, b: PlantedClass) -> str:
        """A caption naming two planted classes (method step 6 drops it)."""

        def make() -> str:
            return self._pick(vocab.TWO_CLASS_TEMPLATES).format(a=a.lemma, b=b.lemma)

        return self._checked(make, [a.lemma, b.lemma])

    def no_noun(self) -> str:
        """Emoji, digits, punctuation and non-Latin script: no WordNet noun lemma at all."""

        def make() -> str:
            n = int(self.rng.integers(1, 5))
            return " ".join(self._pick(self.no_noun_pieces) for _ in range(n))

        return self._checked(make, [])

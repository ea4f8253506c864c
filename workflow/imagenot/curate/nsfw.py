"""Step 5: not-safe-for-work filters over class names, pluggable by name.

``NSFW_FILTERS`` maps a filter name to a class built from the ``curate.nsfw`` config section and
WordNet (``Filter(cfg, wn)``).
Each filter takes a table of candidate synsets (``wnid``, ``name``, ``lemmas``, ``gloss``) and
returns a reason string per row (empty string = safe). Filters run in config order and the first
reason found is recorded in the audit trail.

- ``wordnet`` (default, licence-clean): WordNet usage domains such as obscenity or ethnic slur,
  cue words in the gloss ("obscene", "vulgar", ...), and a config word list matched against the
  lemmas (whole normalised words).
- ``hf_classifier``: a Hugging Face text-classification model named by hub id or local path, for
  real runs (not exercised offline); a class is flagged when the score of ``label`` reaches
  ``threshold``.
"""

from __future__ import annotations

import pyarrow as pa

from imagenot.core.registries import Registry
from imagenot.curate.text import normalise, normalise_one


class WordNetCueFilter:
    """WordNet usage domains, gloss cue words and a word list."""

    def __init__(self, cfg: dict, wn):
        self.wn = wn
        self.usage_domains = set(cfg["usage_domains"])
        self.gloss_cues = [normalise_one(c) for c in cfg["gloss_cues"] if c.strip()]
        self.words = {normalise_one(w) for w in cfg["words"] if w.strip()}

    def reason(self, wnid: str, lemmas: list[str], gloss: str) -> str:
        """Why a class is flagged ("" if not); ``lemmas`` and ``gloss`` are normalised
        (:func:`imagenot.curate.text.normalise`, one Arrow call for every class)."""
        from imagenot.core.wordnet import synset_of

        synset = synset_of(self.wn, wnid)
        domains = sorted(d.name() for d in synset.usage_domains() if d.name() in self.usage_domains)
        if domains:
            return f"usage domain {domains[0]}"
        padded_gloss = f" {gloss} "
        for cue in self.gloss_cues:
            if f" {cue}" in padded_gloss:
                return f"gloss cue {cue!r}"
        for lemma in lemmas:
            hits = sorted(w for w in self.words if f" {w} " in f" {lemma} ")
            if hits:
                return f"word list {hits[0]!r}"
        return ""

    def __call__(self, table: pa.Table) -> list[str]:
        # One vectorised normalisation for every gloss and lemma (a per-string Arrow call
        # compiles its regex each time: 1.5 ms, 30 s for the ~20k lemmas of 7k classes).
        glosses = normalise(table.column("gloss")).to_pylist()
        lemmas = table.column("lemmas").combine_chunks()
        flat = normalise(lemmas.flatten()).to_pylist()
        offsets = lemmas.offsets.to_pylist()
        return [
            self.reason(w, flat[offsets[i] : offsets[i + 1]], glosses[i])
            for i, w in enumerate(table.column("wnid").to_pylist())
        ]


class HFTextClassifierFilter:
    """A Hugging Face text classifier applied to "<name>: <gloss>" (for real runs)."""

    # Class names per forward pass: a few thousand short texts once per dataset, so no config
    # key (curate.encoder.batch_size is the caption encoder's, a different model).
    BATCH = 64

    def __init__(self, cfg: dict, wn):
        hf = cfg["hf_classifier"]
        self.model = hf["local_path"] or hf["model"]
        if not self.model:
            raise ValueError("config key curate.nsfw.hf_classifier.model (or local_path): unset")
        self.label, self.threshold = hf["label"], hf["threshold"]

    def __call__(self, table: pa.Table) -> list[str]:
        from transformers import pipeline

        classify = pipeline("text-classification", model=self.model, top_k=None)
        names, glosses = table.column("name").to_pylist(), table.column("gloss").to_pylist()
        texts = [f"{n}: {g}" for n, g in zip(names, glosses, strict=True)]
        reasons = []
        for scores in classify(texts, batch_size=self.BATCH, truncation=True):
            score = next((s["score"] for s in scores if s["label"] == self.label), 0.0)
            reasons.append(
                f"classifier {self.label} score {score:.3f}" if score >= self.threshold else ""
            )
        return reasons


#: Filter name -> its class, built as ``Filter(curate.nsfw config, wordnet)``; the one list of
#: filter names (the schema's ``curate.nsfw.filters`` items derive from it).
NSFW_FILTERS: Registry = Registry(
    "NSFW filter", {"wordnet": WordNetCueFilter, "hf_classifier": HFTextClassifierFilter}
)


def nsfw_reasons(table: pa.Table, cfg: dict, wn) -> list[str]:
    """First NSFW reason per row over the configured filters ('' = safe)."""
    reasons = [""] * table.num_rows
    for name in cfg["filters"]:  # registered names (the schema's x-registry)
        flagged = NSFW_FILTERS.entry(name)(cfg, wn)(table)
        reasons = [r or f for r, f in zip(reasons, flagged, strict=True)]
    return reasons

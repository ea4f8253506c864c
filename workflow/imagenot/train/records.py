"""The records the workflow writes and reads again (a final run's ``result.json``, a trial
slot's result, a rung's decision, a search's selection, the registered search a trials table
carries in its metadata): each declared once (:class:`Kind`: the
keys its producer always writes, the range of each number, the path layout that names it),
written sealed by :func:`write_record` and read by one reader, :func:`check_record`.

Why: a record is where every later number comes from (the evaluation's labels, the accuracy
table's rows, the run summary's best accuracies, a final run that reuses its trial). Its
numbers are checked once, where they are made: the writer refuses a record out of its
declaration (every key its kind's producer writes, each number in its range: accuracies finite
percentages that their image counts can give, counts integers, chance 100 / classes) and seals
what it writes; a producer takes what it copies (a slot's trial from its rung's decision, a
final run's trial from the selection) from records read by the one reader. The reader checks, in
this order, and a failed check is one line naming the file and the key (:class:`RecordError`):

- **its seal** (:func:`check_seal`): the producer stores the sha256 of the record's other keys
  under :data:`SEAL_KEY`; a record without one (64 lowercase hex digits) was not written by its
  producer, one whose contents no longer give that digest was edited or damaged after it was
  written. A sealed record's numbers are then those its writer checked: trusted, not checked
  again;
- **the keys its reader needs** (every key the producer writes by default): a record sealed by
  a producer that wrote fewer;
- **its identity**: the keys its path names (a final run's dataset, protocol, model and seed, a
  slot's model, stage and slot, a decision's rung, a trials table's dataset and protocol) are
  those of the path it is read from, of every path read or written beside it, and of the plan's
  run (:func:`path_identity`): a record copied into another run's folder keeps its seal.

A seal catches damage, not forgery (anyone can recompute a digest): a record resealed by hand is
read as its producer's.

A final run's record is typed (:class:`FinalRecord`), written by :func:`write_final` and read
by :func:`read_final`: both of its producers (a trained run, published weights) and every reader
that loads its model (evaluate, diagnostics, an FT/TL job's start) go through them. The run
summary checks the plain record (:func:`check_record` with the few keys it shows).

Light: no stage's libraries (the run summary's job reads records in the analyse environment).
Over 500 lines because the record kinds' declarations, their one writer and their one reader
are read together: apart, a new key would need three modules kept in step.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import string
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from imagenot.core.counts import count_problem
from imagenot.core.paths import DATASET
from imagenot.core.settings import to_json
from imagenot.train.paths import DECISION, FINAL_DIR, SLOT, TRIAL_SELECTION, TRIALS

log = logging.getLogger(__name__)

# The key under which a record holds the sha256 of its other keys (:func:`record_digest`).
SEAL_KEY = "record_sha256"
# What names a run: the wildcards of its folders (results/train/{dataset}/{protocol}/{model}/...)
IDENTITY = ("dataset", "protocol", "model", "seed")
WHOLE_NUMBERS = {"seed", "stage", "slot", "rung"}  # path wildcards the rules constrain so
REFUSED = "delete it and run the workflow again (it reruns the job that writes it)"


class RecordError(ValueError):
    """A record that is not what its path says, whose numbers are out of their range, or whose
    contents are not those its producer sealed; the message names the file and the key."""


def is_percent(value: Any) -> bool:
    """A finite number in [0, 100] (not a bool): what every accuracy read back must be."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and 0.0 <= value <= 100.0


def _integer(low: int) -> tuple[Callable, str]:
    def test(value, record):
        return isinstance(value, int) and not isinstance(value, bool) and value >= low

    return test, f"an integer of at least {low}"


# A range: (test(value, record), what the value must be). A trial that diverged before its
# first validation records -1 as its validation accuracy (loop.State.best_val's start).
PERCENT = (lambda v, r: is_percent(v), "a percentage in [0, 100]")
PERCENT_OR_NULL = (lambda v, r: v is None or is_percent(v), "a percentage in [0, 100] or null")
TRIAL_PERCENT = (
    lambda v, r: is_percent(v) or (v == -1.0 and r.get("stopped_by") == "diverged"),
    "a percentage in [0, 100]",
)
TEXT = (lambda v, r: isinstance(v, str) and v != "", "a non-empty string")
DIGEST = (
    lambda v, r: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None,
    "a sha256 digest (64 lowercase hex digits)",
)
COUNT, POSITIVE = _integer(0), _integer(1)
RANKING = (
    lambda v, r: (
        isinstance(v, dict)
        and all(str(t).isdigit() and (is_percent(a) or a == -1.0) for t, a in v.items())
    ),
    "a map of trials to accuracies",
)
PROMOTED = (
    lambda v, r: (
        isinstance(v, list)
        and all(COUNT[0](t, r) for t in v)
        and len(set(v)) == len(v) <= r["slots"]
        and {str(t) for t in v} <= {str(t) for t in r["val_accuracy"]}
    ),
    "a list of distinct trials the rung ranked, one per slot",
)
_RUN_RANGES = {
    "num_classes": POSITIVE, "image_size": POSITIVE, "n_val": COUNT, "seed": COUNT,
    "train_seed": COUNT, "epochs": COUNT, "best_epoch": COUNT, "trial": COUNT,
    "dataset": TEXT, "protocol": TEXT, "model": TEXT, "dataset_fingerprint": TEXT,
    "weights_sha256": DIGEST, "hyperparameters": (lambda v, r: isinstance(v, dict), "an object"),
}  # fmt: skip


@dataclass(frozen=True, eq=False)
class FinalRecord(Mapping):
    """A final run's ``result.json``, typed: the fields its readers use by name, and
    ``details``, the rest of what its producer recorded (a trained run's training summary and
    hyperparameters; a published weight's facts and preprocessing), written flat beside them,
    so that the file is one JSON object. A Mapping of that object too: a reader looks a detail
    up by its key. Built from a producer's keys by :meth:`of`, written by :func:`write_final`,
    read by :func:`read_final`."""

    dataset: str
    protocol: str
    model: str
    seed: int
    num_classes: int
    image_size: int
    dataset_fingerprint: str
    weights_sha256: str
    chance_accuracy: float | None = None
    val_accuracy: float | None = None  # None: published weights (nothing trained)
    record_sha256: str | None = None  # None: not written yet
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> FinalRecord:
        """The record of a producer's (or a file's) keys: each field's by name, the rest its
        ``details``. A missing key of :data:`FINAL` is a TypeError (a producer's bug;
        a file is checked by :func:`check_record` before it is built)."""
        names = {f.name for f in fields(cls)} - {"details"}
        typed = {k: data[k] for k in names if k in data}
        return cls(**typed, details={k: v for k, v in data.items() if k not in names})

    @cached_property
    def _json(self) -> dict:
        out = dict(self.details)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "details" and not (value is None and f.default is None):
                out[f.name] = value  # an optional field the producer did not record is absent
        return out

    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._json)

    def __len__(self) -> int:
        return len(self._json)


@dataclass(frozen=True)
class Kind:
    """One record the workflow writes and reads again, declared once: ``keys``, what its
    producer always writes (``empty_keys``: a slot nothing was promoted into, ``trial`` null,
    whose numbers are not checked); ``ranges``, key -> (test, what the value must be), checked
    by the writer (by every reader, for an unsealed table's rows: the evaluation's,
    :data:`imagenot.evaluate.outputs.EVALUATION_ROW`); ``shares``, (accuracy key, count key, what it counts): accuracies that must
    be a share of their count of images; ``patterns``, the path layouts whose wildcards of
    ``identity`` the record must match; ``what``, its name in a refusal."""

    what: str
    keys: tuple[str, ...]
    ranges: Mapping[str, tuple[Callable, str]]
    patterns: tuple[str, ...] = ()
    identity: tuple[str, ...] = ()
    empty_keys: tuple[str, ...] | None = None
    shares: tuple[tuple[str, str, str], ...] = ()


def _tail(pattern: str, start: str) -> str:
    """A layout's tail from ``start``: it names its record wherever a copy of the run lies."""
    return pattern[pattern.index(start) :]


# What says which run a path belongs to: a file in a final run's folder, the folder itself, and
# a dataset folder (dataset only). A later stage adds its own run folders (the evaluation's).
RUN_PATTERNS = (f"{FINAL_DIR}/{{name}}", FINAL_DIR, DATASET)
SLOT_PATTERN = _tail(SLOT, "{model}")
DECISION_PATTERN = _tail(DECISION, "{model}")
SELECTION_PATTERN = _tail(TRIAL_SELECTION, "{model}")

VAL_SHARE = (("val_accuracy", "n_val", "val images"),)
FINAL = Kind(
    "final run's result.json",
    tuple(f.name for f in fields(FinalRecord) if f.default is f.default_factory is MISSING),
    {**_RUN_RANGES, "val_accuracy": PERCENT, "chance_accuracy": PERCENT,
     "published_top1": PERCENT_OR_NULL, "published_top5": PERCENT_OR_NULL},
    RUN_PATTERNS,
    IDENTITY,
    shares=VAL_SHARE,
)  # fmt: skip
SLOT_RESULT = Kind(
    "trial slot's result",
    ("stage", "slot", "trial", "model", "num_classes", "n_val", "image_size", "val_accuracy",
     "best_epoch", "epochs", "stopped_by", "hyperparameters", "seed", "dataset_fingerprint"),
    {**_RUN_RANGES, "val_accuracy": TRIAL_PERCENT, "stage": COUNT, "slot": COUNT},
    (SLOT_PATTERN,),
    ("model", "stage", "slot"),
    empty_keys=("stage", "slot", "trial"),
    shares=VAL_SHARE,
)  # fmt: skip
RUNG_DECISION = Kind(
    "rung decision",
    ("rung", "eta", "slots", "val_accuracy", "promoted"),
    {"rung": COUNT, "eta": POSITIVE, "slots": COUNT, "val_accuracy": RANKING, "promoted": PROMOTED},
    (DECISION_PATTERN,),
    ("rung",),
)
SELECTION = Kind(
    "selection",
    ("trial", "model", "val_accuracy", "hyperparameters", "result"),
    {},  # its numbers are those of the slot result it copies, read sealed by its producer
    (SELECTION_PATTERN,),
    ("model",),
)
# what a trials table carries (imagenot.train.trials.write_trials): the registered search it was
# drawn from, whose definition the drawing job checked to be the preregistration record's
SEARCH = Kind(
    "trials table's registered search",
    ("dataset", "protocol", "definition"),
    {},
    (TRIALS,),
    ("dataset", "protocol"),
)
# what a trained run's result.json holds besides every final record's keys (_check_trained)
TRAINED_FINAL = Kind("trained final run's result.json", ("trial", "hyperparameters"), {})
KINDS = {
    "final": FINAL,
    "slot": SLOT_RESULT,
    "decision": RUNG_DECISION,
    "selection": SELECTION,
    "search": SEARCH,
}


# ------------------------------------------------------------------------------------- seal


def record_digest(record: Mapping[str, Any]) -> str:
    """sha256 of the record's keys but :data:`SEAL_KEY`, as sorted, compact JSON
    (:func:`imagenot.core.settings.to_json`)."""
    body = {k: v for k, v in record.items() if k != SEAL_KEY}
    return hashlib.sha256(to_json(body).encode()).hexdigest()


def seal(record: Mapping[str, Any]) -> dict:
    """``record`` as it will read back from JSON (``str`` of what JSON cannot hold, as
    :func:`imagenot.core.io.write_json` writes it), with its digest under :data:`SEAL_KEY`."""
    plain = json.loads(json.dumps(dict(record), default=str))
    plain.pop(SEAL_KEY, None)
    return {**plain, SEAL_KEY: record_digest(plain)}


def is_sealed(record: Mapping[str, Any]) -> bool:
    """Whether the record carries a seal, a sha256 digest as :func:`record_digest` writes it
    (64 lowercase hex digits; verified by :func:`check_seal`)."""
    return DIGEST[0](record.get(SEAL_KEY), record)


def check_seal(record: Mapping[str, Any], where: str | os.PathLike) -> None:
    """RecordError when the record carries no seal, a seal that is no digest, or one that is
    not the digest of its contents: in each case not what its producer wrote."""
    if SEAL_KEY not in record:
        problem = f"has no {SEAL_KEY}, so it was not written by this workflow's producer"
    elif not is_sealed(record):
        problem = f"its {SEAL_KEY} is {_short(record[SEAL_KEY])}, not a sha256 digest"
    elif record[SEAL_KEY] != record_digest(record):
        problem = "its contents are not those its producer wrote (edited or damaged since)"
    else:
        return
    raise RecordError(f"{where}: {problem}; {REFUSED}")


def _short(value: Any, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else f"{text[: width - 3]}..."


def write_record(
    record: Mapping[str, Any], path: str | os.PathLike, record_kind: str = "final"
) -> dict:
    """Check the record against its declaration (:func:`check_numbers`), seal it and write it
    atomically as JSON; return what was written. The one writer of records: where their
    numbers are checked."""
    from imagenot.core.io import write_json

    sealed = seal(record)
    check_numbers(sealed, path, KINDS[record_kind])
    write_json(sealed, path)
    return sealed


# ---------------------------------------------------------------------------------- numbers


def _is_empty(record: Mapping[str, Any], kind: Kind) -> bool:
    """Whether the record is an empty slot's (nothing promoted into it: ``trial`` null)."""
    return kind.empty_keys is not None and record.get("trial") is None


def check_keys(
    record: Mapping[str, Any],
    where: str | os.PathLike,
    kind: Kind,
    required: Iterable[str] | None = None,
) -> None:
    """RecordError naming ``where`` and the keys of ``kind`` (or ``required``) it lacks."""
    keys = kind.keys if required is None else required
    missing = [k for k in (kind.empty_keys if _is_empty(record, kind) else keys) if k not in record]
    if missing:
        raise RecordError(
            f"{where}: lacks key(s) {', '.join(missing)}, which every {kind.what} holds; {REFUSED}"
        )


def check_numbers(record: Mapping[str, Any], where: str | os.PathLike, kind: Kind) -> None:
    """RecordError naming ``where`` and the key when a key of ``kind`` is missing or a value is
    out of its range: accuracies finite percentages that their image counts can give
    (:func:`imagenot.core.counts.count_problem`: no 55 % of 3 images), counts integers, chance
    100 / classes; a final run's record names its trial as its source says
    (:func:`_check_trained`). What the writer checks before sealing."""
    check_keys(record, where, kind)
    if _is_empty(record, kind):
        return  # nothing was promoted into the slot
    if kind is FINAL:
        _check_trained(record, where)
    for key, (test, what) in kind.ranges.items():
        if key in record and not test(record[key], record):
            raise RecordError(f"{where}: {key} is {_short(record[key])}, not {what}; {REFUSED}")
    for key, count, of in kind.shares:
        value, n = record.get(key), record.get(count)
        number = isinstance(value, int | float) and n is not None and value != -1.0
        if number and (problem := count_problem(value, n, value, 1.0, count, of)):
            raise RecordError(f"{where}: {key} {problem}; {REFUSED}")
    classes, chance = record.get("num_classes"), record.get("chance_accuracy")
    if classes and chance is not None and not math.isclose(chance, 100.0 / classes):
        raise RecordError(f"{where}: chance_accuracy is {chance!r}, not 100 / {classes}; {REFUSED}")


# --------------------------------------------------------------------------------- identity


def _pattern_regex(pattern: str) -> re.Pattern:
    body = ""
    for literal, wildcard, _, _ in string.Formatter().parse(pattern):
        body += re.escape(literal)
        if wildcard is not None:
            body += f"(?P<{wildcard}>[^/]+)"
    return re.compile(f"(?:^|/){body}$")


def path_identity(path: str | os.PathLike, pattern: str) -> dict | None:
    """The wildcards of ``path`` when it ends as the workflow ``pattern`` (``results/...``
    with ``{wildcards}``) says, in whichever working directory (``seed`` as an int); None when
    it does not (a file outside the workflow's results folder; a seed, stage, slot or rung
    that is not a whole number, as the rules constrain them: ``slot-0.json.job-status.json``)."""
    match = _pattern_regex(pattern).search(Path(os.path.abspath(path)).as_posix())
    if match is None:
        return None
    found: dict[str, Any] = match.groupdict()
    for key in WHOLE_NUMBERS & found.keys():
        if not found[key].isdigit():
            return None
        found[key] = int(found[key])
    return found


def run_identity(
    path: str | os.PathLike, patterns: Iterable[str] = RUN_PATTERNS, keys: Iterable[str] = IDENTITY
) -> dict | None:
    """What the workflow's layout (``patterns``, the first that matches) says of the run at
    ``path``: its ``keys`` (None: a path outside the layout)."""
    for pattern in patterns:
        found = path_identity(path, pattern)
        if found is not None:
            return {k: v for k, v in found.items() if k in keys}
    return None


def check_identity(
    record: Mapping[str, Any],
    where: str | os.PathLike,
    kind: Kind,
    paths: Iterable[str | os.PathLike] = (),
    expected: Mapping[str, Any] | None = None,
    patterns: Iterable[str] | None = None,
) -> None:
    """RecordError naming the record and the path when a key of ``kind.identity`` that the
    record holds is not what ``where`` (its own path), each of ``paths`` (the files read or
    written beside it: its weights, the evaluation's outputs, the dataset folder) or
    ``expected`` (a plan's run) says. Paths outside the layout (``patterns``, the kind's by
    default) say nothing."""
    patterns = tuple(kind.patterns if patterns is None else patterns)
    sources = [("the plan", expected or {})]
    for path in (where, *paths):
        found = run_identity(path, patterns, kind.identity)
        if found is not None:
            sources.append(("its path" if path is where else str(path), found))
    for source, identity in sources:
        for key in kind.identity:
            have = record.get(key)
            if key in identity and key in record and str(have) != str(identity[key]):
                said = f"{source} says {key} {identity[key]!r}"
                raise RecordError(f"{where}: records {key} {have!r}, but {said}; {REFUSED}")


def check_fingerprint(
    record: Mapping[str, Any], where: str | os.PathLike, dataset_dir: str | os.PathLike, actual: str
) -> None:
    """RecordError when the record's ``dataset_fingerprint`` (the data it was trained on, or
    scored by published weights on) is not ``actual``, that of ``dataset_dir``."""
    recorded = record.get("dataset_fingerprint")
    if recorded != actual:
        raise RecordError(
            f"{where}: the run was made on dataset fingerprint {str(recorded)[:16]}..., but "
            f"{dataset_dir} has {actual[:16]}... (the dataset was rebuilt since): {REFUSED}"
        )


# ----------------------------------------------------------------------------------- reader


def check_record(
    record: Any,
    where: str | os.PathLike,
    *,
    record_kind: str = "final",
    paths: Iterable[str | os.PathLike] = (),
    expected: Mapping[str, Any] | None = None,
    required: Iterable[str] | None = None,
    patterns: Iterable[str] | None = None,
) -> dict:
    """The one reader of a record read from ``where`` (module docstring): its seal
    (:func:`check_seal`), the keys this reader needs (``required``; every key the producer of
    its kind, ``record_kind``, a key of :data:`KINDS`, writes by default) and its identity
    (``paths``, ``expected``, ``patterns``: :func:`check_identity`). Its numbers are trusted:
    its writer checked them (:func:`write_record`). The record."""
    kind = KINDS[record_kind]
    if not isinstance(record, Mapping):
        raise RecordError(f"{where}: not a {kind.what} (a {type(record).__name__}); {REFUSED}")
    check_seal(record, where)
    check_keys(record, where, kind, required)
    check_identity(record, where, kind, paths, expected, patterns)
    return dict(record)


def read_record(path: str | os.PathLike, **how: Any) -> dict:
    """The record at ``path``, read and checked (:func:`check_record`, with ``how``)."""
    from imagenot.core.io import read_json

    return check_record(read_json(path), path, **how)


def read_registration(path: Path) -> dict:
    """The preregistration record at ``path`` (:mod:`imagenot.train.prereg`; no experiment
    registered when it is absent). Not sealed: it is the record of what was registered, never
    moved aside, since a new one would register anew."""
    from imagenot.core.io import read_json

    if not path.is_file():
        return {"experiments": {}}
    return read_json(path, hint="restore the record (a copy, version control); never delete it")


# ---------------------------------------------------------------------------- a final's trial

# A published weights' record says so (imagenot.train.published): it trained nothing, so it
# names no trial and no validation accuracy; every other final record is a trained run's.
PUBLISHED_SOURCE = "published"


def _check_trained(record: Mapping[str, Any], where: str | os.PathLike) -> None:
    """RecordError naming ``where`` when a published weights' record (``source`` published)
    names a trial or a validation accuracy, or a trained run's lacks its trial or
    hyperparameters."""
    if record.get("source") == PUBLISHED_SOURCE:
        for key in ("trial", "val_accuracy"):
            if record.get(key) is not None:
                raise RecordError(
                    f"{where}: a published weights' record (source {PUBLISHED_SOURCE}) that "
                    f"records {key} {record[key]!r}: published weights train no trial; {REFUSED}"
                )
        return
    check_keys(record, where, TRAINED_FINAL)


# ------------------------------------------------------------------------------ final record


def write_final(record: FinalRecord, path: str | os.PathLike) -> FinalRecord:
    """Write a final run's record (:func:`write_record`: checked, sealed, atomic) where its
    identity says (:func:`check_identity` against ``path``: a job handed another run's folder
    writes nothing); the record as written, its seal included, whose digest is logged."""
    check_identity(record, path, FINAL)
    written = FinalRecord.of(write_record(record, path))
    # in the producer's job log: the digest the evaluation's rows, the accuracy table and the run
    # summary name, so that a number shown can be traced to the job that wrote it
    log.info("%s written: %s %s", path, SEAL_KEY, written.record_sha256)
    return written


def read_final(
    path: str | os.PathLike,
    *,
    paths: Iterable[str | os.PathLike] = (),
    patterns: Iterable[str] = RUN_PATTERNS,
) -> FinalRecord:
    """The final run's record at ``path``, checked (:func:`read_record`: its seal, keys, and
    identity against ``path`` and ``paths``, in the layout ``patterns``)."""
    return FinalRecord.of(read_record(path, paths=paths, patterns=patterns))

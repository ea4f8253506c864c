"""A run's result record (a final run's ``result.json``, a trial's slot result): written once by
its producer with the digest of its contents, and checked wherever it is read.

Why: a record is where every later number comes from (the evaluation's labels, the accuracy
table's rows, the run summary's best accuracies, a final run that reuses its trial). Read on
trust, a final run's folder copied from one protocol's path into another's would be evaluated
under the wrong label at exit 0, a NaN test accuracy printed as -1.00, 250 % shown as is, and a
hand-edited accuracy shown as the run's result. Where a record is read it is checked four
ways, and a failed check is one line naming the file and the key (:class:`RecordError`):

- **its seal**: the producer stores the sha256 of the record's other keys under
  :data:`SEAL_KEY` (:func:`seal`); a record whose contents no longer give that digest was edited
  or damaged after it was written. The workflow seals every record it writes (a final run's and
  a trial slot's, an empty slot's too), so a record whose seal is absent or is not a digest (64
  lowercase hex digits: null, a word, a number) was not written by its producer: refused like an
  edited one, since its numbers cannot be traced to a producer (:func:`check_unsealed`).
- **its provenance**: a seal catches damage, not forgery (anyone can recompute a digest), so a
  trial slot's result lying in the slot layout is also checked against what its producer could
  have written there: a trial of the run's trials table with that trial's hyperparameters and
  seed, the trial its slot trains (the slot itself at stage 0, else the one the previous rung
  promoted into it, that rung's sealed decision being what halving computes from its own
  slots: :func:`imagenot.train.trials.check_decision`), and a table whose hyperparameters are
  of the space's types and ranges (:func:`imagenot.train.trials.check_slot_provenance`, through
  :func:`imagenot.train.trials.check_slot`). A
  trained final run's record names the trial its run's selection selected, with that trial's
  hyperparameters (:func:`check_final_trial`); a published weights' record names none.
- **its identity**: dataset, protocol, model and seed are those of the path it is read from
  (:func:`path_identity` of the workflow's patterns) and of every path read or written beside
  it (:func:`check_identity`); the dataset it was trained on is the one it is evaluated on
  (:func:`check_fingerprint`). A trial's slot result: its model, stage and slot are those of
  its path (:func:`check_slot_identity`), wherever the path ends as the slot layout does.
- **its numbers**: accuracies are finite percentages in [0, 100] that their image counts can
  give, counts are integers in their range, chance is 100 / classes (:func:`check_numbers`).

A final run's record is typed (:class:`FinalRecord`), written by :func:`write_final` and read
by :func:`read_final`: both of its producers (a trained run, published weights) and every reader
that loads its model (evaluate, diagnostics, an FT/TL job's start) go through them. The run
summary checks the plain record (:func:`check_record` with the few keys it shows).

Over 500 lines because the four checks share one reading of a record (its keys, its path's
identity, its seal) and every reader of a final run's or a slot's record calls them together
(:func:`check_record`); the slot's provenance, which reads the run's trials table and rung
decisions, is the trial jobs' (:func:`imagenot.train.trials.check_slot`).

Light: no stage's libraries (the run summary's job reads records in the analyse environment);
a slot result's provenance imports the train stage's bookkeeping (:mod:`imagenot.train.trials`)
when one is checked, in the train environment, where slot results are read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import string
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from imagenot.counts import count_problem
from imagenot.paths import DATASET
from imagenot.settings import to_json
from imagenot.train.paths import FINAL_DIR, SLOT

log = logging.getLogger(__name__)

# The key under which a record holds the sha256 of its other keys (:func:`record_digest`).
SEAL_KEY = "record_sha256"
# What names a run: the wildcards of its folders (results/train/{dataset}/{protocol}/{model}/...)
IDENTITY = ("dataset", "protocol", "model", "seed")
# What the workflow writes into every final run's result.json (train_final, train_published):
# a record without one of these was not written by it.
FINAL_KEYS = (*IDENTITY, "num_classes", "image_size", "dataset_fingerprint", "weights_sha256")
# What the workflow writes into every trial slot's result (train_trial): an empty slot (nothing
# promoted into it) its place alone, a slot that trained a trial what the trial reached.
SLOT_KEYS = ("stage", "slot", "trial")
TRIAL_KEYS = (*SLOT_KEYS, "model", "num_classes", "n_val", "image_size", "val_accuracy",
              "best_epoch", "epochs", "stopped_by", "hyperparameters", "seed",
              "dataset_fingerprint")  # fmt: skip
REFUSED = "delete it and run the workflow again (it reruns the job that writes it)"


class RecordError(ValueError):
    """A record that is not what its path says, whose numbers are out of their range, or whose
    contents are not those its producer sealed; the message names the file and the key."""


# ------------------------------------------------------------------------------------- seal


def record_digest(record: Mapping[str, Any]) -> str:
    """sha256 of the record's keys but :data:`SEAL_KEY`, as sorted, compact JSON
    (:func:`imagenot.settings.to_json`)."""
    body = {k: v for k, v in record.items() if k != SEAL_KEY}
    return hashlib.sha256(to_json(body).encode()).hexdigest()


def seal(record: Mapping[str, Any]) -> dict:
    """``record`` as it will read back from JSON (``str`` of what JSON cannot hold, as
    :func:`imagenot.io.write_json` writes it), with its digest under :data:`SEAL_KEY`."""
    plain = json.loads(json.dumps(dict(record), default=str))
    plain.pop(SEAL_KEY, None)
    return {**plain, SEAL_KEY: record_digest(plain)}


# What a seal is: a sha256 digest as hexdigest() writes it.
DIGEST = re.compile(r"[0-9a-f]{64}")


def is_digest(value: Any) -> bool:
    """Whether ``value`` is a sha256 digest as :func:`record_digest` writes it (64 lowercase
    hex digits)."""
    return isinstance(value, str) and DIGEST.fullmatch(value) is not None


def is_sealed(record: Mapping[str, Any]) -> bool:
    """Whether the record carries a seal, a digest (verified by :func:`check_seal`): a seal of
    null, a word or a number is no seal."""
    return is_digest(record.get(SEAL_KEY))


def check_seal(record: Mapping[str, Any], where: str | os.PathLike) -> None:
    """RecordError when the record's seal is not the digest of its contents (a record that
    carries no digest is refused by :func:`check_unsealed`)."""
    if is_sealed(record) and record[SEAL_KEY] != record_digest(record):
        raise RecordError(
            f"{where}: its contents are not those its producer wrote ({SEAL_KEY} does not match "
            f"them: edited or damaged after writing); {REFUSED}"
        )


def _short(value: Any, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else f"{text[: width - 3]}..."


def check_unsealed(record: Mapping[str, Any], where: str | os.PathLike) -> None:
    """RecordError when a result record (a final run's, a trial slot's) carries no seal, or a
    seal that is not a digest: every producer of one seals it (:func:`write_record`), so such a
    record was written by hand or by another program, or by a version of the workflow that
    predates the seal."""
    if SEAL_KEY not in record:
        raise RecordError(
            f"{where}: has no {SEAL_KEY}, so it was not written by this workflow's producer (or "
            f"predates the seal) and its numbers cannot be traced to one; {REFUSED}"
        )
    if not is_sealed(record):
        raise RecordError(
            f"{where}: its {SEAL_KEY} is {_short(record[SEAL_KEY])}, not a sha256 digest (64 "
            f"lowercase hex digits), so it was not written by this workflow's producer and its "
            f"numbers cannot be traced to one; {REFUSED}"
        )


def write_record(
    record: Mapping[str, Any], path: str | os.PathLike, record_kind: str = "final"
) -> dict:
    """Check the record's numbers (:func:`check_numbers`), seal it and write it atomically as
    JSON; return what was written. The one writer of result records."""
    from imagenot.io import write_json

    sealed = seal(record)
    check_numbers(sealed, path, record_kind)
    write_json(sealed, path)
    return sealed


# ---------------------------------------------------------------------------------- numbers


def is_percent(value: Any) -> bool:
    """A finite number in [0, 100] (not a bool): what every accuracy read back must be."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0.0 <= value <= 100.0
    )


def _integer(low: int):
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and value >= low


# key -> (test, what it must be)
_NUMBERS: dict[str, tuple[Any, str]] = {
    "val_accuracy": (is_percent, "a percentage in [0, 100]"),
    "chance_accuracy": (is_percent, "a percentage in [0, 100]"),
    "published_top1": (lambda v: v is None or is_percent(v), "a percentage in [0, 100] or null"),
    "published_top5": (lambda v: v is None or is_percent(v), "a percentage in [0, 100] or null"),
    "num_classes": (_integer(1), "an integer of at least 1"),
    "image_size": (_integer(1), "an integer of at least 1"),
    "n_val": (_integer(0), "an integer of at least 0"),
    "seed": (_integer(0), "an integer of at least 0"),
    "train_seed": (_integer(0), "an integer of at least 0"),
    "epochs": (_integer(0), "an integer of at least 0"),
    "best_epoch": (_integer(0), "an integer of at least 0"),
    "trial": (_integer(0), "an integer of at least 0"),
    "stage": (_integer(0), "an integer of at least 0"),
    "slot": (_integer(0), "an integer of at least 0"),
}
# accuracy, the count of images it was measured on, what they are
_COUNTED = (("val_accuracy", "n_val", "val images"),)
_TEXT = ("dataset", "protocol", "model", "dataset_fingerprint", "weights_sha256")


def check_numbers(
    record: Any,
    where: str | os.PathLike,
    record_kind: str = "final",
    required: Iterable[str] = FINAL_KEYS,
) -> None:
    """RecordError naming ``where`` and the key when a key the workflow always writes is missing
    or a value is out of its range: accuracies finite percentages that their image counts can
    give (:func:`imagenot.counts.count_problem`: no 55 % of 3 images), counts integers, chance
    100 / classes; ``record_kind`` ``final`` (a final run's result.json, holding the keys
    ``required``) or ``slot`` (a trial's slot result, holding :data:`SLOT_KEYS`, and
    :data:`TRIAL_KEYS` when a trial was trained in it: a trial that diverged before its first
    validation records -1 as its validation accuracy)."""
    if not isinstance(record, Mapping):
        raise RecordError(f"{where}: not a result record (a {type(record).__name__})")
    if record_kind == "slot":
        required = TRIAL_KEYS if record.get("trial") is not None else SLOT_KEYS
    missing = [k for k in required if k not in record]
    if missing:
        holds = (
            "every final run's result.json"
            if record_kind == "final"
            else "every trial slot's result"
        )
        raise RecordError(
            f"{where}: lacks key(s) {', '.join(missing)}, which {holds} holds; {REFUSED}"
        )
    if record_kind == "slot" and record.get("trial") is None:
        return  # an empty slot: nothing was promoted into it
    for key, (test, what) in _NUMBERS.items():
        if key not in record:
            continue
        value = record[key]
        if (
            key == "val_accuracy"
            and record_kind == "slot"
            and record.get("stopped_by") == "diverged"
            and value == -1.0
        ):
            continue  # diverged before any validation (loop.State.best_val's start)
        if not test(value):
            raise RecordError(f"{where}: {key} is {value!r}, not {what}; {REFUSED}")
    for key in _TEXT:
        if key in record and not (isinstance(record[key], str) and record[key]):
            raise RecordError(f"{where}: {key} is {record[key]!r}, not a non-empty string")
    for key, count, of in _COUNTED:
        value, n = record.get(key), record.get(count)
        if value is None or n is None or value == -1.0:  # -1: a diverged slot's (above)
            continue
        problem = count_problem(value, n, value, 1.0, count, of)
        if problem:
            raise RecordError(f"{where}: {key} {problem}; {REFUSED}")
    classes, chance = record.get("num_classes"), record.get("chance_accuracy")
    if classes and chance is not None and not math.isclose(chance, 100.0 / classes):
        raise RecordError(
            f"{where}: chance_accuracy is {chance!r}, but {classes} classes give "
            f"{100.0 / classes:g}; {REFUSED}"
        )


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
    it does not (a file outside the workflow's results folder)."""
    text = Path(os.path.abspath(path)).as_posix()
    match = _pattern_regex(pattern).search(text)
    if match is None:
        return None
    found: dict[str, Any] = match.groupdict()
    if "seed" in found:
        if not found["seed"].isdigit():
            return None
        found["seed"] = int(found["seed"])
    return found


# What says which run a path belongs to: a file in a final run's folder, the folder itself, and
# a dataset folder (dataset only). A later stage adds its own run folders (the evaluation's).
RUN_PATTERNS = (f"{FINAL_DIR}/{{name}}", FINAL_DIR, DATASET)


def run_identity(path: str | os.PathLike, patterns: Iterable[str] = RUN_PATTERNS) -> dict | None:
    """What the workflow's layout (``patterns``) says of the run at ``path``: its keys of
    :data:`IDENTITY` (None: a path outside the layout)."""
    for pattern in patterns:
        found = path_identity(path, pattern)
        if found is not None:
            return {k: v for k, v in found.items() if k in IDENTITY}
    return None


def check_identity(
    record: Mapping[str, Any],
    where: str | os.PathLike,
    paths: Iterable[str | os.PathLike] = (),
    expected: Mapping[str, Any] | None = None,
    patterns: Iterable[str] = RUN_PATTERNS,
) -> None:
    """RecordError naming the record and the path when the record's dataset, protocol, model or
    seed is not what ``where`` (the record's own path), each of ``paths`` (the files read or
    written beside it: its weights, the evaluation's outputs, the dataset folder) or
    ``expected`` (a plan's run) says. Paths outside the workflow's layout (``patterns``) say
    nothing."""
    sources: list[tuple[str, Mapping[str, Any]]] = []
    if expected is not None:
        sources.append(("the plan", {k: v for k, v in expected.items() if k in IDENTITY}))
    patterns = tuple(patterns)
    for path in (where, *paths):
        found = run_identity(path, patterns)
        if found:
            sources.append((str(path), found))
    for source, identity in sources:
        for key, want in identity.items():
            have = record.get(key)
            if str(have) != str(want):
                raise RecordError(
                    f"{where}: records {key} {have!r}, but {source} says {key} {want!r}: a "
                    "run's result is used only under its own path (delete the run's folder and "
                    "run the workflow again)"
                )


# What says which trial slot a slot record belongs to: the slot layout's last three parts
# ({model}/stage-{stage}/slot-{slot}.json, the tail of the plan's slot path), in the workflow's
# results folder or wherever a copy of it lies.
SLOT_PATTERN = SLOT[SLOT.index("{model}") :]
SLOT_IDENTITY = ("model", "stage", "slot")


def check_slot_identity(record: Mapping[str, Any], where: str | os.PathLike) -> None:
    """RecordError naming the record when its model, stage or slot is not what its path
    (:data:`SLOT_PATTERN`) says: a slot's result read from another slot's, stage's or model's
    path, inside the results folder or out of it. A path of another form (no
    ``stage-*/slot-*.json`` tail) says nothing; a slot with no trial (nothing promoted into it)
    records no model (its stage and slot are checked)."""
    found = path_identity(where, SLOT_PATTERN)
    if found is None:
        return
    for key in SLOT_IDENTITY:
        if key == "model" and record.get("trial") is None:
            continue
        have = record.get(key)
        if str(have) != found[key]:
            raise RecordError(
                f"{where}: records {key} {have!r}, but its path says {key} {found[key]!r}: a "
                "trial's result is used only under its own slot's path (delete it and run the "
                "workflow again)"
            )


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


# ---------------------------------------------------------------------------- final's trial

# A published weights' record says so (imagenot.train.published): it trained nothing, so it
# names no trial and no validation accuracy; every other final record is a trained run's.
PUBLISHED_SOURCE = "published"


def selection_of(where: str | os.PathLike) -> Path | None:
    """The selection (``selection.json``) beside a final run's record at ``where`` when the
    path ends as the final runs' layout does (``{run}/final/seed-{seed}/result.json``, wherever
    it lies); None otherwise."""
    from imagenot.train.paths import FINAL_RESULT, TRIAL_SELECTION

    if path_identity(where, FINAL_RESULT[FINAL_RESULT.index("{model}") :]) is None:
        return None
    return Path(where).parents[2] / Path(TRIAL_SELECTION).name


def check_final_trial(record: Mapping[str, Any], where: str | os.PathLike) -> dict | None:
    """RecordError naming ``where`` when a trained final run's record is not a run of the trial
    its run selected: its ``trial`` and ``hyperparameters`` are those of the sealed slot result
    that the selection beside it (:func:`selection_of`) copies, whose own trial and
    hyperparameters are the selection's. A published weights' record (``source`` published)
    names no trial and no validation accuracy. Light (the selection is JSON): the run summary
    checks it so; :func:`read_final` also traces the selection to its slots and trials table
    (:func:`imagenot.train.trials.read_selection`). The selection read (None: a published
    record, or a record outside the layout)."""
    from imagenot.io import read_json

    if record.get("source") == PUBLISHED_SOURCE:
        for key in ("trial", "val_accuracy"):
            if record.get(key) is not None:
                raise RecordError(
                    f"{where}: a published weights' record (source {PUBLISHED_SOURCE}) that "
                    f"records {key} {record[key]!r}: published weights train no trial; {REFUSED}"
                )
        return None
    missing = [k for k in ("trial", "hyperparameters") if k not in record]
    if missing:
        raise RecordError(
            f"{where}: lacks key(s) {', '.join(missing)}, which every trained final run's "
            f"result.json holds; {REFUSED}"
        )
    selection = selection_of(where)
    if selection is None:
        return None
    if not selection.is_file():
        raise RecordError(
            f"{where}: a trained final run, but its run has no selection ({selection}), so its "
            f"trial cannot be traced; {REFUSED}"
        )
    chosen = read_json(selection)
    result = chosen.get("result") if isinstance(chosen, Mapping) else None
    if not isinstance(result, Mapping):
        raise RecordError(f"{selection}: holds no trial result (key result); {REFUSED}")
    check_seal(result, f"{selection} (its result)")
    check_unsealed(result, f"{selection} (its result)")
    for key in ("trial", "hyperparameters"):
        if to_json(chosen.get(key)) != to_json(result.get(key)):
            raise RecordError(
                f"{selection}: {key} is {_short(chosen.get(key))}, but the trial result it "
                f"copies records {_short(result.get(key))}; {REFUSED}"
            )
    if record["trial"] != result.get("trial") or isinstance(record["trial"], bool):
        raise RecordError(
            f"{where}: records trial {record['trial']!r}, but {selection} selected trial "
            f"{result.get('trial')!r}: its producer could not have written it; {REFUSED}"
        )
    have, drawn = record["hyperparameters"], result.get("hyperparameters")
    if to_json(have) != to_json(drawn):
        both = isinstance(have, Mapping) and isinstance(drawn, Mapping)
        names = sorted(set(have) | set(drawn)) if both else []
        differs = [n for n in names if to_json(have.get(n)) != to_json(drawn.get(n))]
        shown = (
            ", ".join(f"{n} {have.get(n)!r} (selected: {drawn.get(n)!r})" for n in differs)
            if differs
            else _short(have)
        )
        raise RecordError(
            f"{where}: records hyperparameters {shown}, but trial {result.get('trial')!r} that "
            f"{selection} selected has its own: its producer could not have written it; "
            f"{REFUSED}"
        )
    return dict(chosen)


# ----------------------------------------------------------------------------------- reader


def check_record(
    record: Any,
    where: str | os.PathLike,
    *,
    record_kind: str = "final",
    paths: Iterable[str | os.PathLike] = (),
    expected: Mapping[str, Any] | None = None,
    required: Iterable[str] = FINAL_KEYS,
    patterns: Iterable[str] = RUN_PATTERNS,
) -> dict:
    """Every check of a record read from ``where`` (module docstring); the record. ``required``:
    the keys a final run's record must hold for this reader (every key the workflow writes,
    by default); ``patterns``: the layout that says which run a path belongs to."""
    if isinstance(record, Mapping):
        check_seal(record, where)  # first: an edited number is said to be an edit
    check_numbers(record, where, record_kind, required)
    if record_kind == "final":
        check_identity(record, where, paths, expected, patterns)
    elif record_kind == "slot":
        check_slot_identity(record, where)
    check_unsealed(record, where)  # a number or name that is wrong is named first
    if record_kind == "final":  # sealed: then the trial its run selected
        check_final_trial(record, where)
    return dict(record)


def read_record(
    path: str | os.PathLike,
    *,
    record_kind: str = "final",
    paths: Iterable[str | os.PathLike] = (),
    expected: Mapping[str, Any] | None = None,
    patterns: Iterable[str] = RUN_PATTERNS,
) -> dict:
    """The record at ``path``, checked (:func:`check_record`)."""
    from imagenot.io import read_json

    return check_record(
        read_json(path),
        path,
        record_kind=record_kind,
        paths=paths,
        expected=expected,
        patterns=patterns,
    )


# ------------------------------------------------------------------------------ final record


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
        ``details``. A missing field of :data:`FINAL_KEYS` is a TypeError (a producer's bug;
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

    def as_json(self) -> dict:
        """The JSON object of ``result.json`` (without the seal until written)."""
        return dict(self._json)

    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._json)

    def __len__(self) -> int:
        return len(self._json)


def write_final(record: FinalRecord, path: str | os.PathLike) -> FinalRecord:
    """Write a final run's record (:func:`write_record`: checked, sealed, atomic) where its
    identity says (:func:`check_identity` against ``path``: a job handed another run's folder
    writes nothing); the record as written, its seal included, whose digest is logged."""
    check_identity(record, path)
    written = FinalRecord.of(write_record(record.as_json(), path))
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
    """The final run's record at ``path``, checked (:func:`read_record`: its seal, numbers, and
    identity against ``path`` and ``paths``, in the layout ``patterns``)."""
    return FinalRecord.of(read_record(path, paths=paths, patterns=patterns))

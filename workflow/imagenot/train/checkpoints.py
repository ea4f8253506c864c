"""Checkpoints and weights of a training job: one safetensors file each, written atomically.

A checkpoint holds the model and optimizer tensors, the random-number state and the job's
progress (:class:`State`, JSON in the metadata), so a job stopped after any optimizer step
resumes at that step. It carries the sha256 of its contents (:func:`checkpoint_digest`). A
checkpoint written for another job definition or another dataset, or one whose contents do not
give its digest or are not finite, is set aside, never resumed (:func:`set_aside_stale_checkpoint`).

Durability (:func:`save_checkpoint`): the new file is written beside the old one and fsynced;
the old one is linked (copied where the filesystem has no hard links) to ``<name>.prev``, and
only then is the new one renamed over it; the directory is fsynced too. ``<name>`` therefore
always holds a complete checkpoint, the old or the new one, whatever step a kill or Ctrl-C
interrupts (renaming the old one away first would leave no ``<name>`` between the two
renames). When the filesystem lost the newest file,
:func:`imagenot.train.loop.fit` falls back to ``<name>.prev``: the job repeats one checkpoint
interval, never the whole run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from imagenot.core.io import atomic_path, sha256_file
from imagenot.core.settings import to_json
from imagenot.train.paths import previous, remove_checkpoint  # noqa: F401 (torch-free, here too)

log = logging.getLogger(__name__)


@dataclass
class State:
    """Progress of a job, stored in the checkpoint's metadata."""

    identity: str
    fingerprint: str
    epoch: int = 0
    step: int = 0
    best_val: float = -1.0
    best_epoch: int = 0
    bad_epochs: int = 0
    stopped_by: str | None = None
    history: list[dict] = field(default_factory=list)
    # Within the current epoch (a step-level checkpoint): global batches done, and each one's
    # summed loss and correct count over all ranks (summed in order at the epoch's end, so a
    # resumed epoch adds the same numbers in the same order as an uninterrupted one).
    batch: int = 0
    step_losses: list[float] = field(default_factory=list)
    step_correct: list[int] = field(default_factory=list)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(path: Path, model: nn.Module, optimizer, state: State) -> None:
    """Model and optimizer tensors, the random-number state (a mid-epoch checkpoint resumes
    dropout exactly) and the JSON state as one safetensors file, durably (module docstring):
    temporary file, fsync, the current checkpoint kept as ``<name>.prev`` (:func:`_keep_previous`),
    the new one renamed over it, the directory fsynced."""
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    tensors["rng.cpu"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    opt = optimizer.state_dict()
    scalars: dict = {}
    for pid, slots in opt["state"].items():
        for key, value in slots.items():
            if torch.is_tensor(value):
                tensors[f"optim.{pid}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{pid}.{key}"] = value
    meta = {
        "state": json.dumps(asdict(state)),
        "param_groups": json.dumps(opt["param_groups"]),
        "optim_scalars": json.dumps(scalars),
    }
    meta[DIGEST_KEY] = checkpoint_digest(tensors, meta)
    # a recovery file, not an output: written even when the job has ended (the next attempt
    # resumes from it; imagenot.core.lifeline)
    with atomic_path(path, ".safetensors", output=False) as tmp:
        save_file(tensors, str(tmp), metadata=meta)
        with open(tmp, "rb") as f:  # on disk before any rename makes it the checkpoint
            os.fsync(f.fileno())
        if path.is_file():
            _keep_previous(path)
    _fsync_dir(path.parent)


def checkpoint_digest(tensors: Mapping[str, torch.Tensor], meta: Mapping[str, str]) -> str:
    """sha256 of a checkpoint's tensors (:func:`tensors_digest`) and its metadata but
    :data:`DIGEST_KEY` (the job's progress, the optimizer's settings): stored in the file by
    :func:`save_checkpoint`, so that a flipped bit anywhere in what is resumed is found."""
    text = to_json({k: v for k, v in meta.items() if k != DIGEST_KEY})
    return hashlib.sha256(f"{tensors_digest(tensors)}\0{text}".encode()).hexdigest()


def checkpoint_problem(path: Path) -> tuple[str, str] | None:
    """(reason, detail) when the checkpoint at ``path`` must not be resumed although its state
    reads: ``unreadable`` (its tensors cannot be read) or ``damaged`` (its tensors or metadata
    do not give the digest stored when it was written, or a value is NaN or infinite); None
    when it may be resumed. A checkpoint that carries no digest is checked for
    finiteness only."""
    try:
        tensors, meta = _read(path)
    except Exception as exc:  # SafetensorError, a short read: the tensors are not all there
        return "unreadable", f"{type(exc).__name__}: {exc}"
    stored = meta.get(DIGEST_KEY)
    if stored is not None and stored != checkpoint_digest(tensors, meta):
        return "damaged", "its contents do not match the sha256 stored when it was written"
    try:
        check_finite(tensors, path)
    except WeightsError as exc:
        return "damaged", str(exc).removeprefix(f"{path}: ").removesuffix("; refused")
    return None


def _keep_previous(path: Path) -> None:
    """Make ``<name>.prev`` the checkpoint now at ``path``, leaving ``path`` in place: a hard
    link (a copy where the filesystem refuses links) under a temporary name, renamed over the
    old ``.prev``, so every step of it leaves both names holding complete files."""
    with atomic_path(previous(path), output=False) as tmp:
        tmp.unlink()
        try:
            os.link(path, tmp)
        except OSError:  # no hard links here (some network filesystems): copy, and sync it
            shutil.copyfile(path, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())


def _read(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, metadata) of a safetensors file."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}, dict(f.metadata() or {})  # noqa: SIM118


def load_checkpoint(path: Path, model: nn.Module, optimizer) -> State:
    """Restore model and optimizer from ``path``; return the saved State."""
    tensors, meta = _read(path)
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    slots: dict[int, dict] = {}
    held = {k.removeprefix("optim."): v for k, v in tensors.items() if k.startswith("optim.")}
    for key, value in {**held, **json.loads(meta["optim_scalars"])}.items():  # "{pid}.{name}"
        pid, name = key.split(".", 1)
        slots.setdefault(int(pid), {})[name] = value
    optimizer.load_state_dict({"state": slots, "param_groups": json.loads(meta["param_groups"])})
    if "rng.cpu" in tensors:
        torch.set_rng_state(tensors["rng.cpu"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    return State(**json.loads(meta["state"]))


def read_state(path: Path) -> State:
    """The State stored in a checkpoint, without loading tensors."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return State(**json.loads(f.metadata()["state"]))


def set_aside_stale_checkpoint(path: Path, identity: str, fingerprint: str) -> str | None:
    """Rename a checkpoint this job must not resume; return the reason (None: resumable or none).

    Reasons: ``unreadable`` (truncated or damaged: safetensors or its metadata cannot be
    read), ``damaged`` (a bit flipped, a value not finite: :func:`checkpoint_problem`),
    ``data-changed`` (written for another dataset fingerprint), ``other-job`` (another
    job definition: hyperparameters, seed, epochs). The file becomes
    ``<name>.set-aside-<reason>`` beside it (replacing an older one of the same reason, so
    set-aside files never pile up) and a warning is logged: a rerun after any config change
    trains afresh with no manual step, and nothing is deleted that a user may want to inspect.
    Why not resume anyway or stop: resuming other data or another job would mix two
    experiments; stopping would leave every rerun at a dead end until the file is deleted by hand.
    """
    if not path.is_file():
        return None
    try:
        saved = read_state(path)
    except Exception as exc:  # SafetensorError, JSON, missing metadata: all mean unreadable
        reason, detail = "unreadable", f"{type(exc).__name__}: {exc}"
    else:
        if saved.fingerprint != fingerprint:
            reason = "data-changed"
            detail = f"written for dataset {saved.fingerprint[:12]}..., not {fingerprint[:12]}..."
        elif saved.identity != identity:
            reason, detail = "other-job", "written for another job definition"
        else:
            problem = checkpoint_problem(path)
            if problem is None:
                return None
            reason, detail = problem
    aside = path.with_name(f"{path.name}.set-aside-{reason}")
    os.replace(path, aside)
    log.warning("%s: %s; set aside as %s, training starts afresh", path, detail, aside.name)
    return reason


AGAIN = "delete it and run the workflow again"
# The safetensors metadata key holding :func:`tensors_digest` of the file's tensors.
DIGEST_KEY = "imagenot.sha256"


class WeightsError(ValueError):
    """Weights or features that must not be used: non-finite values, or tensors that are not
    the ones written (the message names the file and the tensor)."""


def check_finite(tensors: Mapping[str, torch.Tensor], where: str | os.PathLike) -> None:
    """WeightsError naming ``where`` and the first floating-point tensor holding NaN or
    infinity. Why refuse: a network with one non-finite weight predicts garbage (top-1 at
    chance) and was evaluated as a normal result at exit 0."""
    for name, tensor in tensors.items():
        if tensor.is_floating_point() or tensor.is_complex():
            bad = int((~torch.isfinite(tensor)).sum())
            if bad:
                raise WeightsError(
                    f"{where}: tensor {name!r} holds {bad} non-finite value(s) (NaN or "
                    f"infinity) of {tensor.numel()}; refused"
                )


def tensors_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    """sha256 over the tensors in name order: name, dtype, shape and raw bytes of each. Stored
    in the file's own metadata (:data:`DIGEST_KEY`), so the file checks itself wherever it is
    read, whatever its name (a trial's best weights become a final run's model)."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        h.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def save_tensors(
    tensors: Mapping[str, torch.Tensor], path: Path, metadata: Mapping[str, str] | None = None
) -> None:
    """The one writer of weights and features: refuses non-finite values (:func:`check_finite`),
    stores :func:`tensors_digest` in the metadata, writes atomically."""
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    check_finite(tensors, path)
    meta = {**(metadata or {}), DIGEST_KEY: tensors_digest(tensors)}
    with atomic_path(path, ".safetensors") as tmp:
        save_file(tensors, str(tmp), metadata=meta)


def load_tensors(
    path: str | os.PathLike, require_digest: bool = False
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The one reader of weights and features: (tensors, metadata), after checking the digest
    :func:`save_tensors` stored and that every value is finite. A damaged file, or one whose
    tensors are not those written, is a WeightsError naming it. A file without a digest (e.g.
    published weights) has nothing to check, unless ``require_digest``: where the workflow
    always writes one (a run's weights, features), a file without it was not written by it."""
    from safetensors import SafetensorError

    try:
        tensors, meta = _read(path)
    except SafetensorError as exc:
        raise WeightsError(f"{path}: not a readable safetensors file ({exc})") from None
    stored = meta.get(DIGEST_KEY)
    if stored is None and require_digest:
        raise WeightsError(f"{path}: lacks the digest ({DIGEST_KEY}) the workflow writes; {AGAIN}")
    if stored is not None and stored != tensors_digest(tensors):
        raise WeightsError(f"{path}: its tensors do not match the sha256 written in it; {AGAIN}")
    check_finite(tensors, path)
    return tensors, meta


def save_weights(model: nn.Module, path: Path) -> None:
    """``model.state_dict()`` as safetensors, atomically (:func:`save_tensors`)."""
    save_tensors(model.state_dict(), path)


def load_weights(
    path: str | os.PathLike, sha256: str | None = None, require_digest: bool = True
) -> dict[str, torch.Tensor]:
    """A state dict written by :func:`save_weights`, checked (:func:`load_tensors`, its digest
    required unless ``require_digest`` is false); with ``sha256`` (what a ``result.json``
    records of the file it describes) the file's own sha256 must be it: a result is never
    paired with other weights."""
    if sha256 is not None:
        actual = sha256_file(path)
        if actual != sha256:
            raise WeightsError(
                f"{path}: sha256 {actual[:16]}... is not the {sha256[:16]}... that its "
                "result.json records; delete the run's folder and run the workflow again"
            )
    return load_tensors(path, require_digest)[0]


def history_csv(state: State) -> str:
    """The per-epoch metrics as CSV text."""
    if not state.history:
        return "epoch\n"
    cols = list(state.history[0])
    lines = [",".join(cols)]
    lines += [
        ",".join(f"{row[c]:.6g}" if isinstance(row[c], float) else str(row[c]) for c in cols)
        for row in state.history
    ]
    return "\n".join(lines) + "\n"

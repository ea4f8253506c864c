"""Which study the results in a working directory belong to, so that another one is not read
as its own.

Why: the demo and the paper share dataset names (``imagenot``, ``imagenet``) but not their data.
Run in the same working directory, the paper would read the demo's preregistration record (and
stop asking for an amendment nobody made) and take the demo's ``imagenet`` manifest for the real
ImageNet's. So the first run in a working directory records what made its results
(``results/run.json``: the world its LAION captions come from, each dataset's kind, the config
files), and every later config is checked against that record before any job runs: one that
builds another world's datasets under the same names is refused in one line that says to run it
in a working directory of its own. A change within one study (an overlay, a new threshold, an
amendment, a new dataset) keeps the world and the kinds, and is not refused here.

Results without a record (a results/ folder with no ``run.json``) are recognised by the demo or
scale world's own folder under results/.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from imagenot.core.io import read_json, write_json
from imagenot.core.paths import RESULTS
from imagenot.core.typed_json import read_object

RUN_RECORD = f"{RESULTS}/run.json"
# the folders a demo or scale world writes (imagenot.demo.plan.DEMO_DIR, scale_plan's): evidence
# of which world made results that carry no record
_WORLD_DIRS = {"demo": f"{RESULTS}/demo_world", "scale": f"{RESULTS}/scale_world"}
_WORLD_WORDS = {
    "demo": "the demo world",
    "scale": "the scale world",
    "laion": "LAION metadata (laion.dir)",
}


@dataclass(frozen=True)
class RunRecord:
    """What :data:`RUN_RECORD` holds (:func:`identity`, and when it was first written)."""

    world: str
    datasets: dict[str, str]
    description: str
    configfiles: list[str]
    written: str | None = None


def world(config: dict) -> str:
    """Where the config's LAION captions come from: ``demo``, ``scale`` or ``laion`` (a copy of
    LAION's metadata on disk)."""
    if config["demo_world"]["enabled"]:  # (imagenot.demo.plan.enabled: a later stage's)
        return "demo"
    if config["scale_world"]["enabled"]:
        return "scale"
    return "laion"


def identity(config: dict, configfiles: list[str] | None = None) -> dict:
    """What :data:`RUN_RECORD` holds for ``config`` (its description as the config file spells
    it: take it before the Snakefile escapes it for the report) and its ``configfiles`` (named
    relative to the working directory when they lie inside it)."""
    files = []
    for name in configfiles or []:
        relative = os.path.relpath(name)
        files.append(str(name) if relative.startswith("..") else relative)
    return {
        "world": world(config),
        "datasets": {name: spec["kind"] for name, spec in config["datasets"].items()},
        "description": config.get("description", ""),
        "configfiles": files,
    }


def _read(path: Path) -> dict | None:
    """The record at ``path``, read by the one JSON reader and checked against
    :class:`RunRecord`; None for a damaged one (written again by the next run)."""
    try:
        record = read_json(path)
        read_object(RunRecord, record, source=str(path))
    except (OSError, ValueError):
        return None
    return record


def _recorded(root: Path) -> dict | None:
    """The record of the results under ``root`` (the working directory), or what the world
    folders say of results without one; None when there are no results to compare with."""
    if (root / RUN_RECORD).is_file():
        return _read(root / RUN_RECORD)
    for name, folder in _WORLD_DIRS.items():
        if (root / folder).is_dir():
            return {"world": name, "datasets": {}, "description": "", "configfiles": []}
    return None


def differences(recorded: dict, current: dict) -> list[str]:
    """How the study of identity ``current`` builds other datasets than the run ``recorded``:
    its LAION captions from another world, or a dataset of the same name of another kind; []
    for the same study."""
    out = []
    has_laion = "laion" in current["datasets"].values()
    recorded_laion = "laion" in recorded["datasets"].values() or not recorded["datasets"]
    if has_laion and recorded_laion and recorded["world"] != current["world"]:
        there, here = (_WORLD_WORDS.get(w, w) for w in (recorded["world"], current["world"]))
        out.append(f"LAION captions from {there} there, from {here} here")
    for name, kind in current["datasets"].items():
        old = recorded["datasets"].get(name)
        if old is not None and old != kind:
            out.append(f"dataset {name} of kind {old} there, {kind} here")
    return out


def foreign_results(config: dict, root: Path | None = None) -> str | None:
    """The one-line refusal when the results in ``root`` (default: the working directory) were
    made by a config of another study, else None."""
    root = Path.cwd() if root is None else Path(root)
    recorded = _recorded(root)
    if recorded is None:
        return None
    found = differences(recorded, identity(config))
    if not found:
        return None
    made_by = ", ".join(recorded["configfiles"]) or recorded["description"] or "another config"
    return (
        f"{root / RESULTS} holds the results of another study (made by {made_by}: "
        f"{'; '.join(found)}), which this config must not read as its own; run this config in "
        f"a working directory of its own: add --directory ../imagenot-run (any new folder) to "
        f"the snakemake command, and `.venv/bin/imagenot validate-config FILES --directory "
        f"../imagenot-run` (FILES: the --configfile files) checks it there (or delete "
        f"{RESULTS}/ and .snakemake/, `make clean`, to discard that run)"
    )


def owns_results(config: dict, root: Path | None = None) -> bool:
    """Whether the results in ``root`` (default: the working directory), if any, are this
    config's study: what the checks may read as already built."""
    return foreign_results(config, root) is None


def record(current: dict) -> None:
    """Write (or extend with new datasets) :data:`RUN_RECORD` at the start of a run, once its
    config passed every check (the Snakefile's ``onstart``), from the config's
    :func:`identity`: the first run's config files stay the record's, a later run of the same
    study adds the datasets it is the first to build."""
    path = Path(RUN_RECORD)
    old = _read(path) if path.is_file() else None
    new = dict(current)
    if old is not None and not differences(old, current):
        new = {**old, "datasets": {**current["datasets"], **old["datasets"]}}
        if new == old:
            return
    new.setdefault("written", datetime.datetime.now().astimezone().isoformat(timespec="seconds"))
    write_json(new, path)  # (its folder made)

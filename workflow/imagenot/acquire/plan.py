"""Config lookups for the acquire stage's rules (pure functions of the workflow config).

The rule file rules/acquire.smk calls these; Snakemake files themselves define no functions.
File lists and job enumeration only: each rule's settings object is its class's ``from_config``
in :mod:`imagenot.acquire.settings`.
"""

from __future__ import annotations

from pathlib import Path

from imagenot.acquire.kinds import DATASET_KINDS, adapter_kinds
from imagenot.acquire.paths import (
    ACQUIRE,
    DOWNLOAD_STATS,
    PART_STATUS,
    RANGE_PART,
    ROUND_PART_STATUS,
    ROUND_SELECTION,
    WRITE_PART,
)
from imagenot.core.paths import DATASET, FINGERPRINT, MANIFEST
from imagenot.curate import paths as curate_paths

# Keys every dataset kind takes: what the dataset is, and the name figures show for it
# (imagenot.figures.names); a kind's own keys are its entry's in DATASET_KINDS.
EVERY_KIND = ("kind", "description", "display_name")


def dataset_dir(name: str) -> str:
    """Directory of a materialised dataset (manifest, classes, fingerprint, shards)."""
    return DATASET.format(dataset=name)


def acquire_dir(name: str) -> str:
    """Download work, per-part tables and reports of a LAION-built dataset."""
    return ACQUIRE.format(dataset=name)


def _kinds(config: dict, kinds: tuple[str, ...]) -> list[str]:
    return [n for n, spec in config["datasets"].items() if spec["kind"] in kinds]


def adapter_datasets(config: dict) -> list[str]:
    """Configured datasets materialised from files on disk by an adapter."""
    return _kinds(config, adapter_kinds())


def _pattern(names: list[str]) -> str:
    return "|".join(names) if names else "(?!)"


def laion_pattern(config: dict) -> str:
    """Wildcard constraint matching the LAION-built dataset names (never matches if none)."""
    return _pattern(_kinds(config, ("laion",)))


def adapter_pattern(config: dict) -> str:
    """Wildcard constraint matching the adapter dataset names (never matches if none)."""
    return _pattern(adapter_datasets(config))


def part_ids(config: dict) -> list[str]:
    """Download part ids of every LAION-built dataset ('00000', ...)."""
    return [f"{i:05d}" for i in range(config["acquire"]["download_parts"])]


def topup_rounds(config: dict) -> int:
    """Download rounds after the first: acquire.topup_rounds, or none when the curation holds
    no reserve to top up from (curate.reserve 0)."""
    if not config["curate"]["reserve"]:
        return 0
    return config["acquire"]["topup_rounds"]


def all_rounds(config: dict) -> int:
    """The number of download rounds: round 0 and the top-up rounds."""
    return topup_rounds(config) + 1


def selections_before(name: str, rnd: int | str) -> list[str]:
    """Captions fetched in each download round before ``rnd`` (a top-up round's input; with
    ``rnd = all_rounds(config)``, every round's: the fill's): round 0's are the curate stage's
    selection, each top-up round's its own choice."""
    return [
        curate_paths.SELECTION.format(dataset=name)
        if r == 0
        else ROUND_SELECTION.format(dataset=name, round=r)
        for r in range(int(rnd))
    ]


def status_before(config: dict, name: str, rnd: int | str) -> list[str]:
    """Part status tables of the download rounds before ``rnd``."""
    return [
        (PART_STATUS if r == 0 else ROUND_PART_STATUS).format(dataset=name, round=r, part=p)
        for r in range(int(rnd))
        for p in part_ids(config)
    ]


def plan_reserve(config: dict, name: str) -> list[str]:
    """The fill's reserve input: the curate stage's reserve (per class, the next-best captions
    after the selected ones) when there are top-up rounds (for the shortfall message), else
    none."""
    return [curate_paths.RESERVE.format(dataset=name)] if topup_rounds(config) else []


def write_manifests(config: dict, name: str) -> list[str]:
    """Part manifests of a LAION-built dataset's write jobs (one per download part)."""
    return [WRITE_PART.format(dataset=name, part=p) for p in part_ids(config)]


def range_ids(config: dict, name: str) -> list[str]:
    """Range job ids of adapter dataset ``name`` ('00000', ...): as many as its settings plan
    (:class:`imagenot.acquire.settings.MaterialiseSettings` ``jobs``)."""
    from imagenot.acquire.settings import MaterialiseSettings

    jobs = MaterialiseSettings.from_config(config, dataset=name).jobs
    return [f"{j:05d}" for j in range(jobs)]


def range_manifests(config: dict, name: str) -> list[str]:
    """Part manifests of adapter dataset ``name``'s range jobs (the gather's inputs)."""
    return [RANGE_PART.format(dataset=name, job=j) for j in range_ids(config, name)]


def url_map_dirs(config: dict) -> list[str]:
    """Local directories served by the download job (inputs of the download rule); generated
    images (``generate:<seed>``, the scale world) need no input."""
    from imagenot.acquire.generated import is_generated

    return [v for v in config["acquire"]["url_map"].values() if not is_generated(v)]


def download_local(config: dict, site: dict | None) -> bool:
    """Whether download jobs run on the submitting node (``acquire.download_on: local`` and no
    download partition in the site profile; with one, they are jobs there)."""
    on_local = config["acquire"]["download_on"] == "local"
    return on_local and not (site and site["download_partition"])


def check(config: dict) -> None:
    """Each dataset against its kind's declaration in the registry
    (:class:`imagenot.acquire.kinds.DatasetKind` ``keys``, ``required_keys``): a required key
    set, no key the kind would ignore, and a ``path`` that is a directory holding something (what
    the materialisation job reads; one stat and one listing, so every job's own planning can
    afford it) unless the dataset is materialised already (its manifest under results/, made by
    this study: the data may be gone, as on a machine that only analyses; another study's
    manifest of the same name is not this one's, :mod:`imagenot.run.run_identity`). Raises one
    ValueError naming every ``datasets.<name>.<key>`` at fault, one a line, before planning
    reads the keys (without this a missing ``path`` stops the DAG as a KeyError)."""
    from imagenot.core.io import folder_problem
    from imagenot.run.run_identity import owns_results

    own = owns_results(config)
    problems = []
    for name, spec in config["datasets"].items():
        kind = spec["kind"]
        entry = DATASET_KINDS.entry(kind)
        for key in [key for key in entry.required_keys if key not in spec]:
            problems.append(
                f"config key datasets.{name}.{key} is required for kind {kind!r}"
                + (" (where the data lies on disk)" if key == "path" else "")
            )
        if entry.keys is not None:
            ignored = sorted(set(spec) - {*EVERY_KIND, *entry.keys})
            if ignored:
                problems.append(
                    f"config key datasets.{name}.{ignored[0]} does not apply to kind {kind!r} "
                    f"(its keys: {', '.join(entry.keys)})"
                )
        built = own and Path(MANIFEST.format(dataset=name)).is_file()
        if "path" in spec and not built:
            problem = folder_problem(spec["path"])
            if problem:
                problems.append(f"config key datasets.{name}.path: {spec['path']} {problem}")
    if problems:
        raise ValueError("\n".join(problems))


def targets(config: dict) -> list[str]:
    """Manifest and fingerprint of every configured dataset some rule of the config reads
    (:func:`imagenot.plan.split_readers.read_datasets`: a dataset nothing reads is not built), and
    the LAION download reports."""
    from imagenot.plan.split_readers import read_datasets

    out = []
    for name in read_datasets(config):
        spec = config["datasets"][name]
        if spec["kind"] not in DATASET_KINDS:
            continue
        out += [MANIFEST.format(dataset=name), FINGERPRINT.format(dataset=name)]
        if spec["kind"] == "laion":
            out.append(DOWNLOAD_STATS.format(dataset=name))
    return out

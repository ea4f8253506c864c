"""The acquire stage's step handlers (declared in :mod:`imagenot.core.steps`, one per rule).

Each takes its files by role (a class of :mod:`imagenot.acquire.files`) and everything the
config decides as one settings object (a class of :mod:`imagenot.acquire.settings`, built by
its ``from_config`` in rules/acquire.smk), then the step's options by name.
"""

from __future__ import annotations


def download(f, settings, part: int, work_dir: str, processes: int) -> None:
    """Download and validate one part of a caption selection."""
    from imagenot.acquire.download import download_part

    download_part(f.selection, part, work_dir, f.tar, f.status, settings, processes=processes)


def topup(f, settings) -> None:
    """Select the next top-up round: reserve captions of short classes."""
    from imagenot.acquire.build import select_topup

    select_topup(f.selections, f.status, f.reserve, f.selection, settings)


def plan(f, settings, name: str) -> None:
    """Fill and split a LAION-built dataset from every download round."""
    from imagenot.acquire.build import plan_build

    # A shortfall (ShortfallError, a ValueError) ends in its message alone: imagenot.cli.main.
    plan_build(f, settings, name=name)


def write(f, settings, job: str, out: str) -> None:
    """Store one download part's kept images."""
    from imagenot.acquire.build import write_build_part

    write_build_part(f.assignment, job, out, f.part, settings)


def gather(f, settings) -> None:
    """Write manifest, classes and fingerprint from part manifests."""
    from pathlib import Path

    from imagenot.acquire.dataset import gather_parts
    from imagenot.core.paths import CLASSES_FILE, FINGERPRINT_FILE, MANIFEST_FILE

    out = Path(f.manifest).parent
    for role, name in (
        ("manifest", MANIFEST_FILE),
        ("classes", CLASSES_FILE),
        ("fingerprint", FINGERPRINT_FILE),
    ):
        if Path(getattr(f, role)) != out / name:
            raise ValueError(
                f"--{role} {getattr(f, role)}: a dataset's {role} is {out / name} (beside its "
                "manifest)"
            )
    gather_parts(out, f.parts, seed=settings.seed)


def materialise_range(f, settings, out: str, job: int) -> None:
    """Write one class range of a dataset on disk (parallel jobs)."""
    from imagenot.acquire.materialise import materialise_range as write_range

    write_range(out, f.part, settings, job=job)

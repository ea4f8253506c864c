"""`imagenot` subcommands of the acquire stage (one per rule).

Each takes its files by role (a class of :mod:`imagenot.acquire.files`, whose fields are the
command's flags) and everything the config decides as one ``--settings`` JSON object (a class of
:mod:`imagenot.acquire.settings`, built by its ``from_config`` in rules/acquire.smk): defaults
live in the schema only. ``@FILE`` reads the object from a file.
"""

from __future__ import annotations

import argparse

from imagenot.acquire import files
from imagenot.acquire.settings import (
    DownloadSettings,
    FillSettings,
    GatherSettings,
    MaterialiseSettings,
    TopupSettings,
    WriteSettings,
)
from imagenot.cli import subcommand


def _parse(cls, args: argparse.Namespace):
    from imagenot.settings import parse

    return parse(cls, args.settings)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands."""
    p = subcommand(
        subparsers,
        "acquire-download",
        _download,
        files=files.DownloadFiles,
        settings=DownloadSettings,
    )
    p.add_argument("--part", type=int, required=True)
    p.add_argument("--work-dir", required=True, help="img2dataset work folder (kept to resume)")
    p.add_argument("--processes", type=int, required=True, help="download processes (threads)")

    subcommand(subparsers, "acquire-topup", _topup, files=files.TopupFiles, settings=TopupSettings)

    p = subcommand(subparsers, "acquire-plan", _plan, files=files.PlanFiles, settings=FillSettings)
    p.add_argument("--name", required=True, help="dataset name (for messages)")

    p = subcommand(
        subparsers, "acquire-write", _write, files=files.WriteFiles, settings=WriteSettings
    )
    p.add_argument("--job", required=True, help="download part, e.g. part-00003")
    p.add_argument("--out", required=True, help="dataset directory")

    subcommand(
        subparsers, "acquire-gather", _gather, files=files.GatherFiles, settings=GatherSettings
    )

    p = subcommand(
        subparsers,
        "materialise-range",
        _materialise_range,
        files=files.RangeFiles,
        settings=MaterialiseSettings,
    )
    p.add_argument("--out", required=True, help="dataset directory")
    p.add_argument("--job", type=int, required=True)


def _download(args: argparse.Namespace) -> None:
    """Download and validate one part of a caption selection."""
    from imagenot.acquire.download import download_part

    f = files.DownloadFiles.from_args(args)
    download_part(
        f.selection,
        args.part,
        args.work_dir,
        f.tar,
        f.status,
        _parse(DownloadSettings, args),
        processes=args.processes,
    )


def _topup(args: argparse.Namespace) -> None:
    """Select the next top-up round: reserve captions of short classes."""
    from imagenot.acquire.build import select_topup

    f = files.TopupFiles.from_args(args)
    select_topup(f.selections, f.status, f.reserve, f.selection, _parse(TopupSettings, args))


def _plan(args: argparse.Namespace) -> None:
    """Fill and split a LAION-built dataset from every download round."""
    from imagenot.acquire.build import plan_build

    # A shortfall (ShortfallError, a ValueError) ends in its message alone: imagenot.cli.main.
    plan_build(files.PlanFiles.from_args(args), _parse(FillSettings, args), name=args.name)


def _write(args: argparse.Namespace) -> None:
    """Store one download part's kept images."""
    from imagenot.acquire.build import write_build_part

    f = files.WriteFiles.from_args(args)
    write_build_part(f.assignment, args.job, args.out, f.part, _parse(WriteSettings, args))


def _gather(args: argparse.Namespace) -> None:
    """Write manifest, classes and fingerprint from part manifests."""
    from pathlib import Path

    from imagenot.acquire.dataset import gather_parts
    from imagenot.paths import CLASSES_FILE, FINGERPRINT_FILE, MANIFEST_FILE

    f = files.GatherFiles.from_args(args)
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
    gather_parts(out, f.parts, seed=_parse(GatherSettings, args).seed)


def _materialise_range(args: argparse.Namespace) -> None:
    """Write one class range of a dataset on disk (parallel jobs)."""
    from imagenot.acquire.materialise import materialise_range

    f = files.RangeFiles.from_args(args)
    materialise_range(args.out, f.part, _parse(MaterialiseSettings, args), job=args.job)

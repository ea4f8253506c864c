"""`imagenot` subcommands of the acquire stage (one per rule).

Each takes its paths as arguments and everything the config decides as one ``--settings`` JSON
object (a class of :mod:`imagenot.acquire.settings`, built by its ``from_config`` in
rules/acquire.smk): defaults live in the schema only. ``@FILE`` reads the object from a file.
"""

from __future__ import annotations

import argparse

from imagenot.cli import subcommand


def _command(subparsers, name: str, func, cls: str) -> argparse.ArgumentParser:
    """Subcommand ``name``, run by ``func`` (its docstring is the command's help), with its
    settings object (``cls``) as one ``--settings`` argument: every command of the stage is
    registered so."""
    p = subcommand(subparsers, name, func)
    p.add_argument(
        "--settings",
        required=True,
        metavar="JSON",
        help=f"JSON object (imagenot.acquire.settings.{cls}, built by its from_config)",
    )
    return p


def _rounds_args(p: argparse.ArgumentParser, *, reserve_required: bool) -> None:
    """The download rounds so far and the caption reserve, which ``acquire-topup`` and
    ``acquire-plan`` both read (:func:`imagenot.acquire.build.read_rounds`); the plan reads the
    reserve only for its shortfall message."""
    p.add_argument("--selection", action="append", required=True, help="round 0's, then top-ups'")
    p.add_argument("--status", action="append", required=True, help="every part of those rounds")
    p.add_argument(
        "--reserve", required=reserve_required, default=None, help="reserve.parquet of curate"
    )


def _parse(cls, args: argparse.Namespace):
    from imagenot.settings import parse

    return parse(cls, args.settings)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands."""
    p = _command(subparsers, "acquire-download", _download, "DownloadSettings")
    p.add_argument("selection", help="selection.parquet of the curate stage")
    p.add_argument("--part", type=int, required=True)
    p.add_argument("--work-dir", required=True, help="img2dataset work folder (kept to resume)")
    p.add_argument("--out-status", required=True, help="status table (parquet), tar beside it")
    p.add_argument("--processes", type=int, required=True, help="download processes (threads)")

    p = _command(subparsers, "acquire-topup", _topup, "TopupSettings")
    _rounds_args(p, reserve_required=True)
    p.add_argument("--out", required=True, help="this round's selection (parquet)")

    p = _command(subparsers, "acquire-plan", _plan, "FillSettings")
    _rounds_args(p, reserve_required=False)
    p.add_argument("--assignment", required=True, help="output: the kept images (parquet)")
    p.add_argument("--report-dir", required=True, help="where download and class reports go")
    p.add_argument("--name", required=True, help="dataset name (for messages)")

    p = _command(subparsers, "acquire-write", _write, "WriteSettings")
    p.add_argument("assignment", help="output of acquire-plan")
    p.add_argument("--job", required=True, help="download part, e.g. part-00003")
    p.add_argument("--out", required=True, help="dataset directory")
    p.add_argument("--part-manifest", required=True)

    p = _command(subparsers, "acquire-gather", _gather, "GatherSettings")
    p.add_argument("parts", nargs="+", help="part manifests, in job order")
    p.add_argument("--out", required=True, help="dataset directory")

    p = _command(subparsers, "materialise-range", _materialise_range, "MaterialiseSettings")
    p.add_argument("out", help="dataset directory")
    p.add_argument("--job", type=int, required=True)
    p.add_argument("--part-manifest", required=True)
    p.add_argument(
        "--keep-originals",
        action="store_true",
        help="also store the test images' original files (a dataset published weights are "
        "evaluated on: rule acquire_materialise_reference_range)",
    )


def _download(args: argparse.Namespace) -> None:
    """Download and validate one part of a caption selection."""
    from pathlib import Path

    from imagenot.acquire.download import download_part
    from imagenot.acquire.settings import DownloadSettings

    status = Path(args.out_status)
    download_part(
        args.selection,
        args.part,
        args.work_dir,
        status.with_suffix(".tar"),
        status,
        _parse(DownloadSettings, args),
        processes=args.processes,
    )


def _topup(args: argparse.Namespace) -> None:
    """Select the next top-up round: reserve captions of short classes."""
    from imagenot.acquire.build import select_topup
    from imagenot.acquire.settings import TopupSettings

    select_topup(args.selection, args.status, args.reserve, args.out, _parse(TopupSettings, args))


def _plan(args: argparse.Namespace) -> None:
    """Fill and split a LAION-built dataset from every download round."""
    from imagenot.acquire.build import plan_build
    from imagenot.acquire.settings import FillSettings

    # A shortfall (ShortfallError, a ValueError) ends in its message alone: imagenot.cli.main.
    plan_build(
        args.selection,
        args.status,
        args.report_dir,
        args.assignment,
        _parse(FillSettings, args),
        reserve_path=args.reserve,
        name=args.name,
    )


def _write(args: argparse.Namespace) -> None:
    """Store one download part's kept images."""
    from imagenot.acquire.build import write_build_part
    from imagenot.acquire.settings import WriteSettings

    write_build_part(
        args.assignment, args.job, args.out, args.part_manifest, _parse(WriteSettings, args)
    )


def _gather(args: argparse.Namespace) -> None:
    """Write manifest, classes and fingerprint from part manifests."""
    from imagenot.acquire.dataset import gather_parts
    from imagenot.acquire.settings import GatherSettings

    gather_parts(args.out, args.parts, seed=_parse(GatherSettings, args).seed)


def _materialise_range(args: argparse.Namespace) -> None:
    """Write one class range of a dataset on disk (parallel jobs)."""
    from imagenot.acquire.materialise import materialise_range
    from imagenot.acquire.settings import MaterialiseSettings

    settings = _parse(MaterialiseSettings, args)
    materialise_range(
        args.out, args.part_manifest, settings, job=args.job, keep_originals=args.keep_originals
    )

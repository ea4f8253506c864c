"""`imagenot` subcommands of the acquire stage."""

from __future__ import annotations

import argparse


def _image_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--image-size", type=int, required=True, help="side of stored square images")
    p.add_argument("--resize-mode", choices=["center_crop", "border"], default="center_crop")
    p.add_argument("--quality", type=int, default=95, help="JPEG quality")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands."""
    p = subparsers.add_parser(
        "acquire-download", help="download and validate one part of a caption selection"
    )
    p.add_argument("selection", help="selection.parquet of the curate stage")
    p.add_argument("--part", type=int, required=True)
    p.add_argument("--parts", type=int, required=True, help="number of parts")
    p.add_argument("--work-dir", required=True, help="img2dataset work folder (kept to resume)")
    p.add_argument("--out-status", required=True, help="status table (parquet), tar beside it")
    _image_args(p)
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--threads-per-process", type=int, default=16)
    p.add_argument("--timeout", type=float, default=10)
    p.add_argument("--retries", type=int, default=0)
    p.add_argument(
        "--max-unreachable",
        type=float,
        default=None,
        help="fail when network errors and timeouts reach this fraction of the part's rows "
        "(config acquire.max_unreachable_fraction; unset: never)",
    )
    p.add_argument("--shard-size", type=int, default=10000)
    p.add_argument("--min-size", type=int, default=0)
    p.add_argument("--max-pixels", type=int, default=89_478_485)
    p.add_argument(
        "--min-success-rate",
        type=float,
        default=0.0,
        help="fail a part with a smaller share of valid images (acquire.min_success_rate)",
    )
    p.add_argument(
        "--max-response-bytes",
        type=int,
        default=1 << 62,
        help="a larger body is refused as too_large (acquire.max_response_bytes)",
    )
    p.add_argument(
        "--image-deadline",
        type=float,
        default=float("inf"),
        help="seconds for one image's body in all (acquire.image_deadline_s)",
    )
    p.add_argument("--user-agent", default=None)
    p.add_argument(
        "--url-map",
        action="append",
        default=[],
        metavar="PREFIX=DIR",
        help="serve DIR on a loopback port and rewrite URLs starting with PREFIX to it",
    )
    p.set_defaults(func=_download)

    p = subparsers.add_parser(
        "acquire-topup", help="select the next top-up round: reserve captions of short classes"
    )
    p.add_argument("--selection", action="append", required=True, help="each earlier round's")
    p.add_argument("--status", action="append", required=True, help="each earlier part's table")
    p.add_argument("--reserve", required=True, help="reserve.parquet of the curate stage")
    p.add_argument("--out", required=True, help="this round's selection (parquet)")
    p.add_argument("--images-per-class", type=int, required=True)
    p.add_argument("--oversample", type=float, required=True, help="curate.oversample")
    _dedup_args(p)
    p.set_defaults(func=_topup)

    p = subparsers.add_parser(
        "acquire-plan", help="fill and split a LAION-built dataset from every download round"
    )
    p.add_argument("--selection", action="append", required=True, help="round 0's, then top-ups'")
    p.add_argument("--status", action="append", required=True, help="every part of every round")
    p.add_argument("--reserve", default=None, help="reserve.parquet (for the shortfall message)")
    p.add_argument("--assignment", required=True, help="output: the kept images (parquet)")
    p.add_argument("--report-dir", required=True, help="where download and class reports go")
    p.add_argument("--name", required=True, help="dataset name (for messages)")
    _fill_args(p)
    p.set_defaults(func=_plan)

    p = subparsers.add_parser("acquire-write", help="store one download part's kept images")
    p.add_argument("assignment", help="output of acquire-plan")
    p.add_argument("--job", required=True, help="download part, e.g. part-00003")
    p.add_argument("--out", required=True, help="dataset directory")
    p.add_argument("--part-manifest", required=True)
    p.add_argument("--shard-size", type=int, required=True)
    p.set_defaults(func=_write)

    p = subparsers.add_parser(
        "acquire-gather", help="write manifest, classes and fingerprint from part manifests"
    )
    p.add_argument("parts", nargs="+", help="part manifests, in job order")
    p.add_argument("--out", required=True, help="dataset directory")
    p.add_argument("--seed", type=int, required=True)
    p.set_defaults(func=_gather)

    p = subparsers.add_parser(
        "acquire-build", help="fill, split and write a LAION-built dataset in one process"
    )
    p.add_argument("selection", help="selection.parquet of the curate stage")
    p.add_argument("parts", nargs="+", help="per-part status tables (tars beside them)")
    p.add_argument("--out", required=True, help="dataset directory")
    p.add_argument("--report-dir", required=True, help="where download and class reports go")
    _fill_args(p)
    p.add_argument("--shard-size", type=int, required=True)
    p.set_defaults(func=_build)

    p = subparsers.add_parser(
        "materialise-range", help="write one class range of a dataset on disk (parallel jobs)"
    )
    p.add_argument("out", help="dataset directory")
    _adapter_args(p)
    p.add_argument("--job", type=int, required=True)
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--classes-per-job", type=int, required=True)
    p.add_argument("--part-manifest", required=True)
    p.set_defaults(func=_materialise_range)

    p = subparsers.add_parser(
        "materialise", help="write a dataset on disk (fashion_mnist, cifar10, ...) in our format"
    )
    p.add_argument("out", help="dataset directory")
    _adapter_args(p)
    p.add_argument("--classes-per-job", type=int, default=None, help="ranges run in turn")
    p.set_defaults(func=_materialise)


def _dedup_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--near-duplicates", choices=["off", "phash"], required=True)
    p.add_argument("--near-distance", type=int, required=True)


def _fill_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--images-per-class", type=int, required=True)
    p.add_argument("--test-per-class", type=int, required=True)
    p.add_argument("--val-per-class", type=int, required=True)
    p.add_argument("--short-classes", choices=["drop", "keep"], required=True)
    p.add_argument(
        "--allow-fewer", action="store_true", help="go on when classes are short (else stop)"
    )
    _dedup_args(p)
    p.add_argument("--seed", type=int, required=True)


def _adapter_args(p: argparse.ArgumentParser) -> None:
    from imagenot.acquire.kinds import adapter_kinds

    p.add_argument("--kind", required=True, choices=adapter_kinds())
    p.add_argument("--path", required=True, help="where the dataset lies on disk")
    _image_args(p)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--val-per-class", type=int, required=True)
    p.add_argument("--test-per-class", type=int, default=None)
    p.add_argument("--max-train-per-class", type=int, default=None)
    p.add_argument("--shard-size", type=int, required=True)
    p.add_argument(
        "--max-unreadable-share",
        type=float,
        default=0.0,
        help="skip (and count) up to this share of unreadable files (acquire.max_unreadable_share)",
    )
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="go on past empty class folders and classes without training images",
    )


def _fill_kwargs(args: argparse.Namespace) -> dict:
    return {
        "images_per_class": args.images_per_class,
        "test_per_class": args.test_per_class,
        "val_per_class": args.val_per_class,
        "short_classes": args.short_classes,
        "allow_fewer": args.allow_fewer,
        "near_duplicates": args.near_duplicates,
        "near_distance": args.near_distance,
        "seed": args.seed,
    }


def _adapter_kwargs(args: argparse.Namespace) -> dict:
    return {
        "image_size": args.image_size,
        "resize_mode": args.resize_mode,
        "quality": args.quality,
        "seed": args.seed,
        "val_per_class": args.val_per_class,
        "test_per_class": args.test_per_class,
        "max_train_per_class": args.max_train_per_class,
        "shard_size": args.shard_size,
        "max_unreadable_share": args.max_unreadable_share,
        "allow_empty": args.allow_empty,
    }


def _download(args: argparse.Namespace) -> None:
    from pathlib import Path

    from imagenot.acquire.download import download_part

    url_map = {}
    for item in args.url_map:
        prefix, sep, path = item.rpartition("=")
        if not sep or not prefix:
            raise SystemExit(f"--url-map {item!r}: expected PREFIX=DIR")
        url_map[prefix] = path
    status = Path(args.out_status)
    download_part(
        args.selection,
        args.part,
        args.parts,
        args.work_dir,
        status.with_suffix(".tar"),
        status,
        fetch_options={
            "processes": args.processes,
            "threads": args.threads_per_process,
            "timeout": args.timeout,
            "retries": args.retries,
            "shard_size": args.shard_size,
            "user_agent_token": args.user_agent,
            "url_map": url_map,
            "max_bytes": args.max_response_bytes,
            "deadline": args.image_deadline,
        },
        validate_options={
            "size": args.image_size,
            "resize_mode": args.resize_mode,
            "quality": args.quality,
            "max_pixels": args.max_pixels,
            "min_size": args.min_size,
            "min_success_rate": args.min_success_rate,
        },
        max_unreachable=args.max_unreachable,
    )


def _topup(args: argparse.Namespace) -> None:
    from imagenot.acquire.build import select_topup

    select_topup(
        args.selection,
        args.status,
        args.reserve,
        args.out,
        images_per_class=args.images_per_class,
        oversample=args.oversample,
        near_duplicates=args.near_duplicates,
        near_distance=args.near_distance,
    )


def _plan(args: argparse.Namespace) -> None:
    from imagenot.acquire.build import plan_build

    # A shortfall (ShortfallError, a ValueError) ends in its message alone: imagenot.cli.main.
    plan_build(
        args.selection,
        args.status,
        args.report_dir,
        args.assignment,
        reserve=args.reserve,
        name=args.name,
        **_fill_kwargs(args),
    )


def _write(args: argparse.Namespace) -> None:
    from imagenot.acquire.build import write_build_part

    write_build_part(
        args.assignment, args.job, args.out, args.part_manifest, shard_size=args.shard_size
    )


def _gather(args: argparse.Namespace) -> None:
    from imagenot.acquire.dataset import gather_parts

    gather_parts(args.out, args.parts, seed=args.seed)


def _build(args: argparse.Namespace) -> None:
    from imagenot.acquire.build import build_dataset

    build_dataset(
        args.selection,
        args.parts,
        args.out,
        args.report_dir,
        shard_size=args.shard_size,
        **_fill_kwargs(args),
    )


def _materialise_range(args: argparse.Namespace) -> None:
    from imagenot.acquire.adapters import materialise_range

    materialise_range(
        args.kind,
        args.path,
        args.out,
        args.part_manifest,
        job=args.job,
        jobs=args.jobs,
        classes_per_job=args.classes_per_job,
        **_adapter_kwargs(args),
    )


def _materialise(args: argparse.Namespace) -> None:
    from imagenot.acquire.adapters import materialise

    materialise(
        args.kind,
        args.path,
        args.out,
        classes_per_job=args.classes_per_job,
        **_adapter_kwargs(args),
    )

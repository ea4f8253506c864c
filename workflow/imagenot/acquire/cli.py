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
    p.add_argument("--shard-size", type=int, default=10000)
    p.add_argument("--min-size", type=int, default=0)
    p.add_argument("--max-pixels", type=int, default=89_478_485)
    p.add_argument("--user-agent", default=None)
    p.add_argument(
        "--url-map",
        action="append",
        default=[],
        metavar="PREFIX=DIR",
        help="serve DIR on a loopback port and rewrite URLs starting with PREFIX to it",
    )
    p.set_defaults(func=_download)

    p = subparsers.add_parser("acquire-build", help="fill, split and write a LAION-built dataset")
    p.add_argument("selection", help="selection.parquet of the curate stage")
    p.add_argument("parts", nargs="+", help="per-part status tables (tars beside them)")
    p.add_argument("--out", required=True, help="dataset directory")
    p.add_argument("--report-dir", required=True, help="where download and class reports go")
    p.add_argument("--images-per-class", type=int, required=True)
    p.add_argument("--test-per-class", type=int, required=True)
    p.add_argument("--val-per-class", type=int, required=True)
    p.add_argument("--short-classes", choices=["drop", "keep"], default="drop")
    p.add_argument("--near-duplicates", choices=["off", "phash"], default="off")
    p.add_argument("--near-distance", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shard-size", type=int, default=5000)
    p.set_defaults(func=_build)

    p = subparsers.add_parser(
        "materialise", help="write a dataset on disk (fashion_mnist, cifar10, ...) in our format"
    )
    p.add_argument("out", help="dataset directory")
    p.add_argument(
        "--kind", required=True, choices=["fashion_mnist", "cifar10", "imagenet", "imagefolder"]
    )
    p.add_argument("--path", required=True, help="where the dataset lies on disk")
    _image_args(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--val-per-class", type=int, default=0)
    p.add_argument("--test-per-class", type=int, default=None)
    p.add_argument("--max-train-per-class", type=int, default=None)
    p.add_argument("--shard-size", type=int, default=5000)
    p.set_defaults(func=_materialise)


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
        },
        validate_options={
            "size": args.image_size,
            "resize_mode": args.resize_mode,
            "quality": args.quality,
            "max_pixels": args.max_pixels,
            "min_size": args.min_size,
        },
    )


def _build(args: argparse.Namespace) -> None:
    from imagenot.acquire.build import build_dataset

    build_dataset(
        args.selection,
        args.parts,
        args.out,
        args.report_dir,
        images_per_class=args.images_per_class,
        test_per_class=args.test_per_class,
        val_per_class=args.val_per_class,
        short_classes=args.short_classes,
        near_duplicates=args.near_duplicates,
        near_distance=args.near_distance,
        seed=args.seed,
        shard_size=args.shard_size,
    )


def _materialise(args: argparse.Namespace) -> None:
    from imagenot.acquire.adapters import materialise

    materialise(
        args.kind,
        args.path,
        args.out,
        image_size=args.image_size,
        resize_mode=args.resize_mode,
        quality=args.quality,
        seed=args.seed,
        val_per_class=args.val_per_class,
        test_per_class=args.test_per_class,
        max_train_per_class=args.max_train_per_class,
        shard_size=args.shard_size,
    )

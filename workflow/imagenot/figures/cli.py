"""`imagenot` subcommands of the figures stage: one figure or one table per call."""

from __future__ import annotations

import argparse
import json

from imagenot.figures.plan import FIGURE_KINDS, TABLE_NAMES


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("accuracy", help="results/analyse/accuracy.csv")
    p.add_argument("--datasets", nargs="*", default=[], help="dataset drawing order")
    p.add_argument("--reference", default="imagenet_published")
    p.add_argument("--downstream", default="fashion_mnist")
    p.add_argument("--baseline", default="alexnet")
    p.add_argument("--standard-transform", default="Identity")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--axis", choices=["linear", "probit", "logit"], default="linear")
    p.add_argument("--imagenet-axis", choices=["published", "reference"], default="published")
    p.add_argument("--width", type=float, default=6.75, help="figure width (inches)")
    p.add_argument("--font-size", type=float, default=8.0)
    p.add_argument("--dpi", type=int, default=300)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``figure`` and ``table``."""
    p = subparsers.add_parser("figure", help="draw one figure (PDF + PNG) from accuracy.csv")
    p.add_argument("kind", choices=list(FIGURE_KINDS))
    _common(p)
    p.add_argument("--dataset", help="accuracy_vs_imagenet, per_transform: the dataset")
    p.add_argument("--protocol", default="st", help="accuracy_vs_imagenet: the protocol")
    p.add_argument("--pdf", required=True)
    p.add_argument("--png", required=True)
    p.set_defaults(func=_figure)

    p = subparsers.add_parser("table", help="write one table (CSV + Markdown)")
    p.add_argument("name", choices=list(TABLE_NAMES))
    _common(p)
    p.add_argument("--rankings", nargs=2, required=True, metavar=("STANDARD", "ROBUST"))
    p.add_argument("--csv", required=True)
    p.add_argument("--md", required=True)
    p.set_defaults(func=_table)


def _options(args: argparse.Namespace):
    from imagenot.figures.data import Options
    from imagenot.figures.style import Style

    opts = Options(
        datasets=args.datasets,
        reference=args.reference,
        downstream=args.downstream,
        baseline=args.baseline,
        standard_transform=args.standard_transform,
        confidence=args.confidence,
        axis=args.axis,
        imagenet_axis=args.imagenet_axis,
    )
    return opts, Style(width_in=args.width, font_size=args.font_size, dpi=args.dpi)


def _load(args: argparse.Namespace, command: str):
    """accuracy.csv, or None after a one-line error on stderr."""
    import sys

    from imagenot.analyse.table import TableError
    from imagenot.figures import data

    try:
        return data.load_accuracy(args.accuracy)
    except TableError as exc:
        print(f"imagenot {command}: {exc}", file=sys.stderr)
        return None


def _figure(args: argparse.Namespace) -> int:
    from imagenot.figures import data
    from imagenot.figures.style import save

    opts, style = _options(args)
    acc = _load(args, "figure")
    if acc is None:
        return 2
    if args.kind in ("accuracy_vs_imagenet", "per_transform") and not args.dataset:
        raise SystemExit(f"imagenot figure {args.kind}: --dataset is required")
    if args.kind == "rankings_st":
        from imagenot.figures import rankings

        labels = data.ordered_labels(acc, opts, "st")
        fig = rankings.draw(acc, labels, opts, style, "Standard training (ST), test top-1")
    elif args.kind == "rankings_transfer":
        from imagenot.figures import rankings

        labels = data.transfer_labels(acc, opts)
        title = f"Fine-tuning (FT) and linear probe (TL) on {args.downstream}"
        fig = rankings.draw(acc, labels, opts, style, title)
    elif args.kind == "relative_progress":
        from imagenot.figures import relative_progress

        fig = relative_progress.draw(acc, opts, style)
    elif args.kind == "accuracy_vs_imagenet":
        from imagenot.figures import accuracy_vs_imagenet

        fig = accuracy_vs_imagenet.draw(acc, args.dataset, args.protocol, opts, style)
    elif args.kind == "per_transform":
        from imagenot.figures import per_transform

        fig = per_transform.draw(acc, args.dataset, opts, style)
    else:  # any other registered kind: its "module:draw", draw(accuracy, options, style)
        from imagenot.figures.registry import WORKFLOW_FIGURES
        from imagenot.registries import resolve

        fig = resolve(WORKFLOW_FIGURES[args.kind])(acc, opts, style)
    save(fig, args.pdf, args.png, style.dpi)
    print(f"wrote {args.pdf} and {args.png}")
    return 0


def _table(args: argparse.Namespace) -> int:
    from imagenot.figures import tables

    opts, _ = _options(args)
    acc = _load(args, "table")
    if acc is None:
        return 2
    reports = {}
    for variant, path in zip(("standard", "robust"), args.rankings, strict=True):
        with open(path) as f:
            reports[variant] = json.load(f)
    builder = tables.builder(args.name)
    df = builder(acc, reports, opts)
    tables.write(df, args.csv, args.md, (builder.__doc__ or args.name).strip().rstrip("."))
    print(f"wrote {args.csv} and {args.md}: {len(df)} rows")
    return 0

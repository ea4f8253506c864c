"""``imagenot validate-config``: the workflow's own config checks, for people (no rule runs it,
so no job's environment carries the imports of every stage plan that it needs)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from imagenot.cli import subcommand

    p = subcommand(
        subparsers,
        "validate-config",
        _validate_config,
        description="Later files override earlier ones key by key, as Snakemake's --configfile. "
        "Every problem is listed at once. Run it where the workflow runs (or name that folder "
        "with --directory): the config is also checked against the results there (results of "
        "another study, such as the demo's when checking the paper, are refused; a changed "
        "search definition or model setting is checked against the preregistration record).",
    )
    p.add_argument("config", nargs="+", help="YAML config file(s), read from where you are")
    p.add_argument(
        "--directory",
        metavar="DIR",
        default=None,
        help="the working directory the workflow will run in (snakemake's --directory; created "
        "if missing): relative paths in the config and results/ are read from there "
        "(default: the current folder)",
    )


def _validate_config(args: argparse.Namespace) -> None:
    """Check config files exactly as the workflow does (schema and cross-key checks)."""
    from imagenot.config import ConfigError, read_config_files
    from imagenot.stages import check_workflow_config

    config = read_config_files(args.config)
    if args.directory:
        import os
        from pathlib import Path

        Path(args.directory).mkdir(parents=True, exist_ok=True)
        os.chdir(args.directory)
    try:
        check_workflow_config(config)
    except (ConfigError, ValueError) as exc:
        raise ConfigError(f"{', '.join(args.config)}: {exc}") from exc
    print(f"{', '.join(args.config)}: valid")

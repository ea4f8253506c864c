"""``imagenot validate-config``: the workflow's own config checks, for people (no rule runs it,
so no job's environment carries the imports of every stage plan that it needs)."""

from __future__ import annotations

import argparse
from pathlib import Path


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
    p.add_argument(
        "--allow-templates",
        action="store_true",
        help="render YTE-templated config files (top-level __use_yte__), running the Python "
        "code they hold, as Snakemake does; without it such a file is refused unread",
    )


def templates(paths: list[str]) -> list[str]:
    """The files of ``paths`` that are YTE templates: parsed as data (JSON, else safe YAML, as
    Snakemake tries them), nothing in them run. A file that does not parse is left to the
    reader's own refusal."""
    import json

    import yaml

    from imagenot.config import YTE_KEY

    found = []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        try:
            json.loads(text)
            continue  # Snakemake reads JSON as JSON: no template
        except ValueError:
            pass
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        if isinstance(data, dict) and YTE_KEY in data:
            found.append(path)
    return found


def _refuse_templates(args: argparse.Namespace) -> None:
    """A config someone sent is read, not run: a YTE template (:func:`templates`) is refused
    unless ``--allow-templates`` asks for its code to run."""
    from imagenot.config import YTE_KEY, ConfigError

    found = [] if args.allow_templates else templates(args.config)
    if found:
        raise ConfigError(
            f"config file {found[0]} is a YTE template ({YTE_KEY}): reading it runs the Python "
            "code it holds; read what it does, then pass --allow-templates to render it"
        )


def _validate_config(args: argparse.Namespace) -> None:
    """Check config files exactly as the workflow does (schema and cross-key checks)."""
    from imagenot.config import ConfigError, read_config_files
    from imagenot.stages import check_workflow_config

    _refuse_templates(args)
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

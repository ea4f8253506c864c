"""``imagenot validate-config``: the workflow's own config checks, for people (no rule runs it,
so no job's environment carries the imports of every stage plan that it needs).

It checks the files through the function the workflow calls (``imagenot.core.config.check_config_files``
with ``imagenot.core.stages.check_workflow_config``), so "valid" means the workflow accepts them. What
depends on the folder it runs in (the results there, the config's relative paths) it checks in
that folder, and says what it could not check there: no results/ to compare the config with, or
a folder that is not where the workflow runs (a subfolder of a folder with results/, a
Snakefile or .snakemake/), with the relative paths that resolve from there but not from here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from imagenot.core.paths import RESULTS, shipped

# what marks the folder a workflow runs in (a working directory, or the clone's root)
RUN_MARKS = (RESULTS, ".snakemake", "Snakefile")


def templates(paths: list[str]) -> list[str]:
    """The files of ``paths`` that are YTE templates: parsed as data (JSON, else safe YAML, as
    Snakemake tries them), nothing in them run. A file that does not parse is left to the
    reader's own refusal."""
    from imagenot.core.config import YTE_KEY, ConfigError, parse_config_text

    found = []
    for path in paths:
        try:
            data, is_json = parse_config_text(Path(path).read_text(encoding="utf-8"), path)
        except (OSError, UnicodeDecodeError, ConfigError):
            continue
        # Snakemake reads JSON as JSON (no template); yte renders only a true value
        if not is_json and isinstance(data, dict) and data.get(YTE_KEY):
            found.append(path)
    return found


def _relative_paths(node: Any, at: tuple = ()) -> Iterator[tuple[str, str]]:
    """(dotted key, value) of each string of ``node`` that reads as a relative file path: a
    slash in it, no URL scheme or ``pkg:`` prefix, not absolute."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from _relative_paths(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _relative_paths(value, (*at, i))
    elif isinstance(node, str) and "/" in node and ":" not in node and not node.startswith("/"):
        yield ".".join(map(str, at)), node


def run_folder(where: Path) -> tuple[Path, str] | None:
    """The nearest folder above ``where`` that the workflow runs in (it holds results/,
    .snakemake/ or a Snakefile: :data:`RUN_MARKS`) when ``where`` holds none of them, with the
    first mark it holds; else None."""
    if any((where / mark).exists() for mark in RUN_MARKS):
        return None
    marked = ((parent, m) for parent in where.parents for m in RUN_MARKS if (parent / m).exists())
    return next(marked, None)


def misplaced(where: Path, config: Mapping) -> str | None:
    """What the check could not do because ``where`` lies below the folder the workflow runs in
    (:func:`run_folder`): read the config's relative paths and results/ from there (naming the
    relative paths found from there but not from here); None elsewhere."""
    above = run_folder(where)
    if above is None:
        return None
    parent, mark = above
    missed = [  # a file the clone ships is found from anywhere (imagenot.core.paths.shipped)
        f"{key} ({value})"
        for key, value in _relative_paths(config)
        if not Path(shipped(value)).exists() and (parent / value).exists()
    ]
    found = f"; found from there, not from here: {', '.join(missed)}" if missed else ""
    return (
        f"{where} is below {parent} (which has {mark}), where the workflow runs: the config's "
        f"relative paths and {RESULTS}/ were read from {where}, not from there{found}; run "
        f"validate-config there, or name it with --directory {parent}"
    )


def no_results(where: Path) -> str | None:
    """The check against earlier results, when ``where`` has none to check against."""
    if (where / RESULTS).is_dir():
        return None
    return (
        f"the config against earlier results: {where} has no {RESULTS}/ (the study recorded "
        "there, the preregistration record), as for a first run"
    )


def validate_config(config: list[str], directory: str | None, allow_templates: bool) -> None:
    """Check config files exactly as the workflow does (schema and cross-key checks)."""
    from imagenot.core import config as loader
    from imagenot.core.stages import check_workflow_config

    # a config someone sent is read, not run: a YTE template is refused unless
    # --allow-templates asks for its code to run
    if found := [] if allow_templates else templates(config):
        raise loader.ConfigError(
            f"config file {found[0]} is a YTE template ({loader.YTE_KEY}): reading it runs the Python "
            "code it holds; read what it does, then pass --allow-templates to render it"
        )
    sources = loader.config_sources(config)  # read from where you are
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        os.chdir(directory)
    where = Path.cwd()
    merged = loader.merge_sources(sources)
    wrong_folder = misplaced(where, merged)
    try:
        loader.check_config_files(merged, sources, check_workflow_config)
    except ValueError as exc:
        # relative paths read from the wrong folder may explain a refusal ("does not exist")
        extra = f"\nnot checked: {wrong_folder}" if wrong_folder else ""
        raise loader.ConfigError(f"{exc}{extra}") from exc
    print(f"{', '.join(config)}: valid")
    for note in (wrong_folder, no_results(where)):
        if note is not None:
            print(f"not checked: {note}")

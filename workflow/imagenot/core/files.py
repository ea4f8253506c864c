"""One files object per step: every file a rule hands its command, named once, by its role.

Why: a file written five times - the rule's ``input``/``output`` key, the shell flag,
``add_argument`` in the stage's CLI, ``args.x`` and the library's parameter - can drift apart
where only a Snakemake run would notice. So a step's files are a frozen dataclass
deriving :class:`Files` (in the stage's ``files.py``): a field per role, declared with
:func:`given` (an input) or :func:`made` (an output). The field's name is the rule's key
(``output: summary=...``), the command's flag (``--summary {output.summary}``; ``_`` reads
``-``) and the attribute the library reads (``files.summary``). The command's parser is built
from the fields (:meth:`Files.add_arguments`), so a command typed by hand has readable flags
from the same declaration, and so is the shell line of a rule that runs a declared step
(:mod:`imagenot.core.steps`). ``tests/test_rule_files.py`` reads every rule as Snakemake holds it and
checks that its input and output keys are exactly its command's fields and that each is handed
over under its own flag.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

INPUT = "input"
OUTPUT = "output"

F = TypeVar("F", bound="Files")


def _role(side: str, help: str, *, many: bool, optional: bool, positional: bool) -> Any:
    return dataclasses.field(
        metadata=dict(side=side, help=help, many=many, optional=optional, positional=positional)
    )


def given(
    help: str, *, many: bool = False, optional: bool = False, positional: bool = False
) -> Any:
    """A file the step reads (the rule's ``input``). ``many``: a list of files (one flag, each
    path after it); ``optional``: the rule may hand none (``None``, or ``[]`` when ``many``),
    either by listing no such key or by handing the key an empty list (the flag with no path
    after it: a file the config may or may not produce); ``positional``: a command typed by
    hand takes it without a flag (``imagenot rankings TABLE``)."""
    return _role(INPUT, help, many=many, optional=optional, positional=positional)


def made(help: str, *, many: bool = False, optional: bool = False) -> Any:
    """A file the step writes (the rule's ``output``); ``many``/``optional`` as :func:`given`."""
    return _role(OUTPUT, help, many=many, optional=optional, positional=False)


def flag(role: str) -> str:
    """The command-line flag of a role: ``summary_out`` -> ``--summary-out``."""
    return "--" + role.replace("_", "-")


def check_layout(files: Files, folder: Path, layout: Mapping[str, str], what: str) -> None:
    """Refuse a role of ``files`` handed elsewhere than where ``what``'s folder layout puts it
    (``layout``: role -> its name under ``folder``), one line naming the flag, the path handed
    and the one expected; a role handed no file is not checked. Why: a step that writes a
    folder of its own format finds its files by the format, so the rule's list must say the
    same."""
    for role, name in layout.items():
        handed = getattr(files, role)
        if handed is not None and Path(handed) != folder / name:
            raise ValueError(f"{flag(role)} {handed}: {what}'s {role} is {folder / name}")


@dataclasses.dataclass(frozen=True)
class Files:
    """Base of every step's files (module docstring). A subclass is a frozen dataclass whose
    every field is a :func:`given` or :func:`made` role."""

    @classmethod
    def roles(cls, side: str | None = None) -> tuple[str, ...]:
        """The roles of ``side`` (:data:`INPUT`, :data:`OUTPUT`; None: both), in declared
        order."""
        return tuple(
            f.name
            for f in dataclasses.fields(cls)
            if side is None or f.metadata["side"] == side  # type: ignore[arg-type]
        )

    @classmethod
    def role(cls, name: str) -> dict[str, Any]:
        """The declaration of role ``name`` (side, help, many, optional, positional)."""
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        return {f.name: dict(f.metadata) for f in fields}[name]

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """One argument per role: ``--role PATH`` (``PATH [PATH ...]`` when ``many``), required
        unless ``optional``; an optional role's flag may come without a path (none handed); a
        ``positional`` role is taken without a flag."""
        group = parser.add_argument_group("files")
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            meta = f.metadata
            if meta["many"]:
                nargs = "*" if meta["optional"] else "+"
            else:
                nargs = "?" if meta["optional"] and not meta["positional"] else None
            help = f"{meta['side']}: {meta['help']}"  # the side: "input" or "output"
            if meta["positional"]:
                group.add_argument(f.name, nargs=nargs, metavar=f.name.upper(), help=help)
                continue
            group.add_argument(
                flag(f.name),
                dest=f.name,
                nargs=nargs,
                required=not meta["optional"],
                default=[] if meta["many"] and meta["optional"] else None,
                metavar="PATH",
                help=help,
            )

    @classmethod
    def from_args(cls: type[F], args: argparse.Namespace) -> F:
        """The files of a parsed command line (:meth:`add_arguments`)."""
        return cls(**{name: getattr(args, name) for name in cls.roles()})


ORDER_ONLY = {
    "preflight": "the GPU check's verdict (rules/common.smk preflight_gate): the job waits for it",
    "served": "the local folders acquire.url_map serves (read through the settings): waited for",
    "results": "everything the run summary reads (through its settings): it comes last",
    "class_list": "a dataset's class list (read through the settings): a changed list reruns",
    "init": "an FT or TL job's starting weights (named in its settings): waited for, reruns",
    "trials_tables": "every experiment's trials table: the record is read once every draw is done",
}
"""Rule input keys that are no role of their command: the job waits for the file (or reruns
when it changes), but the command does not take it as an argument. The rule-wiring test allows
exactly these beside a step's roles."""

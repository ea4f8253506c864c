"""Rules' shell lines pass every value literally.

A rule's shell line is a Snakemake format string: ``{input.shard}``, ``{params.settings}``,
``{wildcards.dataset}``. Values from the config reach it (``laion.dir`` in a shard's path, a
class list of ``diagnostics.class_lists``, ``train.weights_dir``, a dataset's ``path`` inside the
settings JSON), and the shell reads whatever it is handed: a path holding ``$(...)``, a backtick
or a ``;`` would run a command, one holding a space would be two arguments. So every field of a
rule's line is shell-quoted by Snakemake (its ``:q`` format spec, one quoted word per list
element; an empty value stays empty): :func:`quoted` adds the spec to each field of the line that
rules/common.smk's ``job()`` builds, and ``tests/test_shell_quoting.py`` fails on any rule whose
line has a field without it, other than those of :data:`PREQUOTED`.

A quoted word that starts with ``-`` still reads as an option to the command's parser. The
config paths that reach a shell line outside the settings JSON (:data:`ARGUMENT_PATHS`) are
therefore refused by :func:`check` (validate-config, and the workflow before any job) when they
start with ``-``; ``./-name`` names the same file.
"""

from __future__ import annotations

import string
from collections.abc import Iterator

from imagenot.core.config import ConfigError

# Fields a rule's line takes unquoted, and why: each is already a shell fragment made by library
# code from values it has quoted or checked itself.
PREQUOTED = {
    # imagenot.core.settings.to_arg: the settings object's JSON, shell-quoted as one word
    "params.settings": "imagenot.core.settings.to_arg quotes the JSON as one word",
    # lifeline.job_prefix(launch.launcher(config)): the start of a training job's line, integers
    # from the config and the shell's own $(hostname) / $SLURM_JOB_ID, which must expand
    "params.launch": "lifeline.job_prefix: a command prefix built from integers",
}

# Config keys whose path value reaches a rule's shell line as an argument of its own (not inside
# the settings JSON); `*`: each value of the mapping.
ARGUMENT_PATHS = (
    "laion.dir",  # curate_match, curate_captions: the shard's path
    "train.weights_dir",  # train_published: the weights file's path
    "diagnostics.reference_classes",  # diagnostics_wordnet_stats --reference
    "diagnostics.class_lists.*",  # diagnostics_wordnet_stats --classes
    "scale_world.captions",  # scale_world --captions
)


def unquoted(line: str) -> list[str]:
    """The fields of ``line`` that Snakemake would hand the shell unquoted: no ``q`` spec and
    not in :data:`PREQUOTED`."""
    return [
        "{" + name + (":" + spec if spec else "") + "}"
        for _, name, spec, _ in string.Formatter().parse(line)
        if name is not None and not (spec or "").endswith("q") and name not in PREQUOTED
    ]


def quoted(line: str) -> str:
    """``line`` with Snakemake's ``:q`` on every field that has no format spec and is not in
    :data:`PREQUOTED`; literal text (``{{`` and ``}}`` included) unchanged."""

    out = []
    for literal, name, spec, conversion in string.Formatter().parse(line):
        out.append(literal.replace("{", "{{").replace("}", "}}"))
        if name is not None:
            conversion = f"!{conversion}" if conversion else ""
            spec = f":{spec}" if spec else "" if name in PREQUOTED else ":q"
            out.append(f"{{{name}{conversion}{spec}}}")
    return "".join(out)


def _values(config: dict, key: str) -> Iterator[tuple[str, object]]:
    """(dotted key, value) of ``key`` in ``config`` (``*``: every entry of that mapping)."""
    nodes: list[tuple[str, object]] = [("", config)]
    for part in key.split("."):
        found = []
        for where, node in nodes:
            if not isinstance(node, dict):
                continue
            items = node.items() if part == "*" else [(part, node[part])] if part in node else []
            found += [(f"{where}.{k}" if where else str(k), v) for k, v in items]
        nodes = found
    return iter(nodes)


def check(config: dict) -> None:
    """Refuse a config path of :data:`ARGUMENT_PATHS` that starts with ``-`` (one line naming
    the key): its command would read it as an option."""
    for key in ARGUMENT_PATHS:
        for where, value in _values(config, key):
            if isinstance(value, str) and value.startswith("-"):
                raise ConfigError(
                    f"config key {where}: {value!r} starts with '-', which the job's command "
                    f"would read as an option; write './{value}' for the same path"
                )

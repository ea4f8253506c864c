"""The one rule for names that a config gives and the workflow turns into paths, wildcards or
lookup keys (datasets, spaces, models, class lists, experiments' ``{dataset}/{protocol}``).

Why one rule: the schema (``x-name`` markers, expanded by ``imagenot.core.config.load_schema``), the
cross-key checks and the Snakefile's ``wildcard_constraints`` all read :data:`NAME_PATTERN`, so a
name ``imagenot validate-config`` accepts is a name every rule's wildcard matches and every path
holds: no slash, dot, upper case, space or non-ASCII letter that would make a path or a dotted
settings section (``train.spaces.{space}``) mean something else.
"""

from __future__ import annotations

import re

# A lower-case ASCII letter, then lower-case letters, digits and underscores.
NAME_PATTERN = "[a-z][a-z0-9_]*"
TORCHVISION = "torchvision"
# Longest name: a path component well under every file system's limit, with room for suffixes.
NAME_MAX_LENGTH = 64
# Names the workflow gives a meaning of its own: ``torchvision`` is the source of protocols
# ft-torchvision / tl-torchvision (published ImageNet weights), so a dataset of that name would
# make ``ft-torchvision`` mean two things; ``imagenet_published`` labels the published ImageNet
# accuracies in accuracy.csv (a dataset of that name would merge with them).
PUBLISHED_DATASET = "imagenet_published"
"""Dataset label of the published torchvision ImageNet accuracies in accuracy.csv (the analyse
stage's; here, below every stage, because no dataset may take it as its name)."""
RESERVED_NAMES = (TORCHVISION, PUBLISHED_DATASET)

_NAME = re.compile(NAME_PATTERN)


def name_problem(name: object) -> str | None:
    """Why ``name`` is not a usable name (None when it is)."""
    if not isinstance(name, str):
        return f"{name!r} is not a string"
    if not _NAME.fullmatch(name):
        return f"{name!r} must match {NAME_PATTERN} (a lower-case letter, then a-z, 0-9, _)"
    if len(name) > NAME_MAX_LENGTH:
        return f"{name!r} is longer than {NAME_MAX_LENGTH} characters"
    if name in RESERVED_NAMES:
        return f"{name!r} is a reserved word ({', '.join(RESERVED_NAMES)})"
    return None


def name_schema(template: str | bool = True) -> dict:
    """The JSON schema keywords an ``x-name`` marker stands for: a name (``true``), or a string
    matching ``template`` with ``{name}`` standing for a name (``"st|(ft|tl)-{name}"``). Only a
    pattern (it applies to strings only): the schema states the type beside the marker."""
    name = f"(?!(?:{'|'.join(map(re.escape, RESERVED_NAMES))})$)(?=.{{1,{NAME_MAX_LENGTH}}}$){NAME_PATTERN}"
    if template is True:
        return {"pattern": f"^{name}$"}
    body = str(template).replace("{name}", f"(?:{NAME_PATTERN})")
    return {"pattern": f"^(?:{body})$"}

"""What ``snakemake --report`` trusts, checked before the workflow points anyone at it.

Snakemake's report reads each output's record in ``.snakemake/metadata`` and loads the record's
``conda_env`` (base64 of the job's conda env file) with PyYAML's unsafe loader
(``snakemake/report/__init__.py``, ``yaml.load(..., Loader=yaml.Loader)``): a record whose env
text holds a ``!!python/object/apply`` tag runs that Python code when the report is written. A
run's own records hold the env files its jobs ran in; a run copied from someone else holds
whatever they wrote. A text that loads with PyYAML's safe loader holds no such tag (the safe
loader refuses every Python tag), and the unsafe loader builds the same plain data from it,
running nothing; so :func:`untrusted` lists the records whose ``conda_env`` does not, and the
end of a run (``imagenot.run.summary_plan.report_line``) and ``make demo``'s report step (``python -m
imagenot.run.report_trust``) name them instead of the report command. docs/security.md has the
upstream reproduction.
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from pathlib import Path

import yaml

from imagenot.run.restamp import METADATA

_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _plain_yaml(encoded: object) -> bool:
    """Whether a record's ``conda_env`` is absent or base64 of UTF-8 text that loads as plain
    YAML (no Python tag)."""
    if encoded is None:
        return True
    if not isinstance(encoded, str):
        return False
    try:
        yaml.load(base64.b64decode(encoded, validate=True).decode("utf-8"), Loader=_SAFE_LOADER)
    except (binascii.Error, UnicodeDecodeError, yaml.YAMLError):
        return False
    return True


def untrusted(root: Path) -> list[Path]:
    """The records under ``root``'s ``.snakemake/metadata`` whose ``conda_env`` is not plain
    YAML (``snakemake --report`` would run code from it), sorted; a record that is not JSON
    holds no env (Snakemake skips it)."""
    folder = root / METADATA
    if not folder.is_dir():
        return []
    found = []
    for record in sorted(p for p in folder.rglob("*") if p.is_file()):
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(data, dict) and not _plain_yaml(data.get("conda_env")):
            found.append(record)
    return found


def refusal(root: Path, records: list[Path]) -> str:
    """One line: the report must not be written from these ``records`` (non-empty)."""
    first = records[0].relative_to(root) if records[0].is_relative_to(root) else records[0]
    return (
        f"{len(records)} record(s) of {METADATA} (first: {first}) hold a conda_env that is not "
        "plain YAML, which `snakemake --report` runs as Python code: delete them (or all of "
        f"{METADATA}, for a run you did not make; the report then lacks job runtimes) before "
        "writing the report (docs/security.md)"
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m imagenot.run.report_trust [DIR]``: exit 1 with :func:`refusal` when ``DIR``'s
    (default: here) metadata holds an untrusted record, else 0 and nothing printed."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(".")
    records = untrusted(root)
    if records:
        print(f"imagenot: {refusal(root, records)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

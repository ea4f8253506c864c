"""A workflow job runs the package of the checkout its workflow was launched from.

Why: the envs a job runs in (the clone's .venv, a conda env, an Apptainer image) provide the
dependencies; the code is the checkout's. An env that held its own copy of the package would keep
running that copy after the checkout changed (a model registered, a fix pulled), for as long as
the env exists. So rules/common.smk puts the checkout's package folder (``<clone>/workflow``) in
:data:`ENV`, every rule's shell line puts it first on ``PYTHONPATH`` and runs ``python -m
imagenot`` (:func:`imagenot.core.lifeline.job_prefix`; ``PYTHONPATH`` itself would not reach a conda
job: Snakemake removes it from a conda job's environment), and the command checks, before
anything else (:func:`check`), that the package it imported is that folder's. A job that cannot
see the checkout (an image without it mounted) would import another copy: it stops with one line
saying so.

A workflow with no local checkout (a module loaded from a URL) runs the package installed where
Snakemake runs: :func:`staged_package` copies it once into the working directory, and :data:`ENV`
names that copy, so a job in a conda env or an image (which hold the dependencies only) runs the
same code as Snakemake, checked the same way.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

# rules/common.smk sets it to the checkout's package folder (the folder holding ``imagenot/``)
ENV = "IMAGENOT_CHECKOUT"

# what a package folder holds that the code reads (pyproject's [tool.setuptools.packages.find]):
# the package and the config schemas beside it (imagenot.core.config.SCHEMA_DIR)
PACKAGE_PARTS = ("imagenot", "schemas")
# where, under the working directory, staged_package() keeps its copies
STAGED = Path(".snakemake") / "imagenot-package"
_SKIP = ("__pycache__", "*.pyc")


def package_digest(installed_dir: str | os.PathLike) -> str:
    """The first 16 hex digits of the SHA-256 of the package folder's files: each one's path and
    content (:data:`PACKAGE_PARTS`, compiled bytecode left out)."""
    installed_dir = Path(installed_dir)
    digest = hashlib.sha256()
    for path in sorted(p for part in PACKAGE_PARTS for p in (installed_dir / part).rglob("*")):
        rel = path.relative_to(installed_dir)
        if "__pycache__" in rel.parts or path.suffix == ".pyc" or not path.is_file():
            continue
        data = path.read_bytes()
        digest.update(f"{rel.as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:16]


def staged_package(
    installed_dir: str | os.PathLike, workdir: str | os.PathLike, version: str = ""
) -> Path:
    """The copy, under ``workdir`` (:data:`STAGED`), of the package folder ``installed_dir`` (the
    folder holding ``imagenot/`` and ``schemas/``), made on the first call: a folder named by
    ``version`` and the content's digest, so a changed package gets a new one. The copy is made
    in a temporary folder beside it and renamed into place: a copy cut short is never used, and
    of two processes copying at once, one copy stays."""
    installed_dir = Path(installed_dir)
    if not (installed_dir / "imagenot" / "__init__.py").is_file():
        raise SystemExit(f"imagenot: no package to stage at {installed_dir}/imagenot")
    name = "-".join(filter(None, [version, package_digest(installed_dir)]))
    root = Path(workdir) / STAGED
    target = root / name
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    try:
        for part in PACKAGE_PARTS:
            if (installed_dir / part).is_dir():
                shutil.copytree(
                    installed_dir / part, temp / part, ignore=shutil.ignore_patterns(*_SKIP)
                )
        try:
            temp.rename(target)
        except OSError:
            if not target.is_dir():  # not another process's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return target


def mismatch(wanted: str | None, imported: Path) -> str | None:
    """The one-line refusal when the package at ``imported`` (the ``imagenot`` folder) is not
    the checkout's ``wanted`` package folder; None when it is, or when nothing is wanted."""
    if not wanted:
        return None
    expected = Path(wanted) / "imagenot"
    if expected.is_dir() and expected.resolve() == imported.resolve():
        return None
    seen = "which this job cannot see" if not expected.is_dir() else "not first on its path"
    root = Path(wanted).parent
    return (
        f"imagenot: this job would run the package at {imported}, not the checkout "
        f"{root} its workflow was launched from ({seen}): make the checkout visible to the "
        f"job (an Apptainer image: add `--bind {root}` to the profile's apptainer-args, or "
        "rerun `.venv/bin/imagenot slurm-profile` from this clone; a cluster: keep the clone on a "
        "filesystem the nodes share)"
    )


def check() -> None:
    """Stop (exit status 1, one line) when this process imported another ``imagenot`` than the
    checkout's named in :data:`ENV`."""
    import imagenot

    problem = mismatch(os.environ.get(ENV), Path(imagenot.__file__).parent)
    if problem:
        raise SystemExit(problem)

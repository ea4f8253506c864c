"""A workflow job runs the package of the checkout its workflow was launched from.

Why: the envs a job runs in (the clone's .venv, a conda env, an Apptainer image) provide the
dependencies; the code is the checkout's. An env that held its own copy of the package would keep
running that copy after the checkout changed (a model registered, a fix pulled), for as long as
the env exists. So rules/common.smk puts the checkout's package folder (``<clone>/workflow``) in
:data:`ENV`, every rule's shell line puts it first on ``PYTHONPATH`` and runs ``python -m
imagenot`` (:func:`imagenot.lifeline.job_prefix`; ``PYTHONPATH`` itself would not reach a conda
job: Snakemake removes it from a conda job's environment), and the command checks, before
anything else (:func:`check`), that the package it imported is that folder's. A job that cannot
see the checkout (an image without it mounted) would import another copy: it stops with one line
saying so.

:data:`ENV` is empty where the workflow has no local checkout (a module loaded from a URL): the
package installed where the jobs run is the code, and nothing is checked.
"""

from __future__ import annotations

import os
from pathlib import Path

# rules/common.smk sets it to the checkout's package folder (the folder holding ``imagenot/``)
ENV = "IMAGENOT_CHECKOUT"


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
        "rerun `imagenot slurm-profile` from this clone; a cluster: keep the clone on a "
        "filesystem the nodes share)"
    )


def check() -> None:
    """Stop (exit status 1, one line) when this process imported another ``imagenot`` than the
    checkout's named in :data:`ENV`."""
    import imagenot

    problem = mismatch(os.environ.get(ENV), Path(imagenot.__file__).parent)
    if problem:
        raise SystemExit(problem)

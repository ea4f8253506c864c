"""imagenot: re-execute "ImageNot: a contrast with ImageNet preserves model rankings".

One subpackage per pipeline stage: ``demo`` (the embedded demo world), ``curate`` (LAION
captions to classes), ``acquire`` (images to datasets), ``train``, ``evaluate``, ``analyse``
(rankings statistics), ``figures``, ``diagnostics``, ``audit``, ``plan``, ``run``. Shared pieces
(config, settings, I/O, WordNet, the steps' declarations) live in ``core``; ``cli`` is the
command line.
"""


def __getattr__(name: str):
    """``imagenot.__version__``, read when asked (not at every job's import): pyproject.toml's
    ``version``, its one source. Read from the checkout the package is imported from when it
    lies in one (an editable install's recorded metadata keeps the version it was installed at),
    else from the installed distribution."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == "imagenot":
            return project["version"]
    from importlib.metadata import version

    return version("imagenot")

"""The one list of each kind of name: models, transformations, dataset kinds, figures, tables,
optimizers, schedulers, text encoders, NSFW filters, CUDA variants of the GPU envs.

Each list is a :class:`Registry` living beside the code it names (``REGISTRIES`` says where).
Everything else derives from it: the config schema (an ``x-registry: KIND`` marker that
:mod:`imagenot.core.config` replaces by the registry's names when it loads the schema), CLI
``choices=``, plan tuples and tests. So a name registered at run time (a plugin, a test)
validates and plans with no edit of the schema, the rules or the CLI.

No registry module imports torch: planning and config validation must stay fast (importing torch
takes seconds). Where the code behind a name needs torch (transformation kernels, optimizers,
model builders), the entry holds a cheap reference, e.g. a ``"module:function"`` string that
:func:`resolve` imports on first use.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

#: Environment variable naming the plugin modules (comma-separated) that every ``imagenot``
#: command imports first: set by :func:`load_plugins`, inherited by the workflow's jobs.
PLUGINS_ENV = "IMAGENOT_PLUGINS"


class RegistryError(KeyError, ValueError):
    """An unknown name, a name registered twice, or an entry that cannot serve the request (a
    model's input too small, weights that do not fit it): the one error of every registry.
    A KeyError for lookups, a ValueError for callers validating input."""

    def __str__(self) -> str:  # KeyError's str() would quote the message
        return str(self.args[0]) if self.args else ""


class Registry(dict):
    """An ordered ``name -> entry`` mapping with checked registration.

    A dict (existing code reads it as one: ``name in r``, ``r[name]``, iteration in registration
    order); :meth:`register` refuses a duplicate and :meth:`temporarily` undoes itself, so that
    tests and plugins cannot leak or silently replace entries.
    """

    def __init__(self, what: str, entries: Any = ()):
        super().__init__(entries)
        self.what = what

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self)

    def register(self, name: str, entry: Any) -> Any:
        """Add ``name``; a name already registered is an error (never a silent replacement)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.what} name must be a non-empty string, got {name!r}")
        if name in self:
            raise RegistryError(f"{self.what} {name!r} is already registered")
        self[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        self.entry(name)
        del self[name]

    def entry(self, name: str) -> Any:
        """The entry of ``name``; an unknown name is an error listing the registered ones."""
        try:
            return self[name]
        except KeyError:
            raise RegistryError(
                f"unknown {self.what} {name!r}; registered: {', '.join(self)}"
            ) from None

    @contextlib.contextmanager
    def temporarily(self, name: str, entry: Any) -> Iterator[Any]:
        """Register ``name`` for the duration of a ``with`` block (tests, one-off runs)."""
        self.register(name, entry)
        try:
            yield entry
        finally:
            self.pop(name, None)


#: Registry kind (the value of a schema's ``x-registry`` marker) -> ``"module:attribute"``.
REGISTRIES = Registry(
    "registry",
    {
        "models": "imagenot.train.registry:MODELS",
        "transforms": "imagenot.evaluate.transform_registry:TRANSFORMS",
        "dataset_kinds": "imagenot.acquire.kinds:DATASET_KINDS",
        "figures": "imagenot.figures.registry:WORKFLOW_FIGURES",
        "tables": "imagenot.figures.registry:WORKFLOW_TABLES",
        "report_figures": "imagenot.figures.registry:REPORT_FIGURES",
        "report_tables": "imagenot.figures.registry:REPORT_TABLES",
        "diagnostics_figures": "imagenot.diagnostics.plan:FIGURES",
        "audit_copies": "imagenot.audit.copies:COPIES",
        "image_encoders": "imagenot.diagnostics.encoders:IMAGE_ENCODERS",
        "optimizers": "imagenot.train.optim_registry:OPTIMIZERS",
        "schedulers": "imagenot.train.optim_registry:SCHEDULERS",
        "encoders": "imagenot.curate.encoders:ENCODERS",
        "nsfw_filters": "imagenot.curate.nsfw:NSFW_FILTERS",
        "cuda_variants": "imagenot.core.conda_envs:CUDA_VARIANTS",
    },
)


def resolve(ref: Any) -> Any:
    """``"package.module:attribute"`` imported (lazily: only the code that runs it pays for its
    imports); anything else is returned as it is."""
    if isinstance(ref, str) and ":" in ref:
        module, _, attribute = ref.partition(":")
        return getattr(importlib.import_module(module), attribute)
    return ref


def registry(kind: str) -> Registry:
    """The registry of ``kind`` (a key of :data:`REGISTRIES`)."""
    return resolve(REGISTRIES.entry(kind))


def names(kind: str) -> tuple[str, ...]:
    """The names registered in ``kind`` now (a name registered at run time included)."""
    return registry(kind).names()


def load_plugins(modules: Iterable[str]) -> list[str]:
    """Import plugin modules (config key ``plugins``), which register names through the
    registries, and export them in :data:`PLUGINS_ENV` so that the workflow's jobs (each an
    ``imagenot`` command, which calls :func:`load_env_plugins`) see the same names."""
    modules = list(modules)
    for module in modules:
        if not isinstance(module, str) or not module:
            raise ValueError(f"config key plugins: {module!r} is not a module name")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(f"config key plugins: cannot import {module!r}: {exc}") from exc
    known = [m for m in os.environ.get(PLUGINS_ENV, "").split(",") if m]
    os.environ[PLUGINS_ENV] = ",".join(dict.fromkeys(known + modules))
    return modules


def load_env_plugins() -> None:
    """Import the plugin modules named in :data:`PLUGINS_ENV` (a workflow job's view of the
    config's ``plugins``)."""
    for module in os.environ.get(PLUGINS_ENV, "").split(","):
        if module:
            importlib.import_module(module)

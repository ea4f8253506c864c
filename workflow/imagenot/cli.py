"""The ``imagenot`` command line: one subcommand per step declared in :data:`imagenot.core.steps.STEPS`,
its parser built from the declaration. Handlers import heavy libraries lazily so that
``imagenot --help`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time

from imagenot.core import job_usage, lifeline
from imagenot.core.io import setup_logging
from imagenot.core.steps import STEPS, add_parser

# The commands people run; the others are the workflow's steps, which its rules run (listed
# apart in `imagenot --help`, each with its own --help).
USER_COMMANDS = tuple(
    "validate-config plan preflight slurm-profile restamp rankings ci wordnet-stats".split()
)
DESCRIPTION = """\
Commands of the ImageNot reproduction package for people: check a config, see what a
run will cost, check a GPU, write the SLURM site profile, and ask whether rankings
transfer for any results table. The workflow itself runs with snakemake (README)."""


class _Version(argparse._VersionAction):
    """``--version``: the version is read when the flag is given, not at every command's start."""

    def __call__(self, parser, namespace, values, option_string=None):
        import imagenot

        self.version = f"imagenot {imagenot.__version__}"
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="imagenot",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version, help="print imagenot's version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--debug", action="store_true", help="show an error's Python traceback")
    subparsers = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", title="commands"
    )
    for step in STEPS.values():
        add_parser(subparsers, step)
    _user_facing(parser, subparsers)
    return parser


def _user_facing(parser: argparse.ArgumentParser, subparsers) -> None:
    """``imagenot --help`` lists the user commands; the workflow's steps (still runnable, each
    with its --help) are named apart. Every option of every command says its default."""
    import textwrap

    listed = subparsers._choices_actions  # argparse keeps no public handle on this list
    steps = [a.dest for a in listed if a.dest not in USER_COMMANDS]
    listed[:] = sorted(
        (a for a in listed if a.dest in USER_COMMANDS), key=lambda a: USER_COMMANDS.index(a.dest)
    )
    layout = {"initial_indent": "  ", "subsequent_indent": "  ", "break_on_hyphens": False}
    wrapped = textwrap.fill(", ".join(steps), 76, **layout)
    parser.epilog = f"workflow steps (run by the rules; `imagenot STEP --help`):\n{wrapped}"
    for name, command in subparsers.choices.items():
        for action in command._actions:
            if name in USER_COMMANDS and action.dest == "settings":
                action.help = argparse.SUPPRESS  # the rule's own interface, not for people
            if (
                not action.option_strings
                or action.nargs == 0  # a flag: store_true, --help, --version, ...
                or action.required
                or action.help == argparse.SUPPRESS
                or "default" in (action.help or "").lower()
            ):
                continue
            shown = "none" if action.default is None else "%(default)s"
            action.help = f"{action.help or ''} (default: {shown})".lstrip()


# The exit status of a command ended by Ctrl-C, as a shell reports a process ended by SIGINT.
INTERRUPTED_EXIT = 130
MEMORY_LIMIT_EXIT = 1  # the process's memory, not its input: not the bad-input status 2

# How the loader words a shared library it could not map (torch's libraries are gigabytes of
# address space), and the C library an allocation refused.
NO_MEMORY_WORDS = ("failed to map segment", "cannot allocate memory", "cannot map zero-fill")
# torch's CPU allocator refusing an allocation raises a plain RuntimeError whose message names it:
# "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you
# tried to allocate 10000000000 bytes. Error code 12 (Cannot allocate memory)" ("not enough
# memory" where malloc itself fails).
TORCH_CPU_ALLOCATOR = "DefaultCPUAllocator"


def memory_limits() -> list[str]:
    """The memory limits set on this process, each as ``ulimit`` shows it (``ulimit -v
    600000``: KiB), none where unlimited."""
    import resource

    limits = []
    for name, flag in (("RLIMIT_AS", "-v"), ("RLIMIT_DATA", "-d")):
        soft, _ = resource.getrlimit(getattr(resource, name))
        if soft != resource.RLIM_INFINITY:
            limits.append(f"ulimit {flag} {soft // 1024} ({name}, {soft / 2**20:,.0f} MiB)")
    return limits


def out_of_memory(exc: BaseException) -> str | None:
    """One line for a command that ran out of memory (``exc`` a MemoryError, or a library that
    could not be loaded for want of memory: ``ImportError: libtorch_cpu.so: failed to map
    segment from shared object`` under ``ulimit -v``), naming the process's memory limit; None
    for any other error. Also torch's own: its CPU allocator's RuntimeError (the memory limit
    reached once torch is loaded, :data:`TORCH_CPU_ALLOCATOR`) and ``torch.OutOfMemoryError``
    (a GPU's memory used up: torch's first line names the card's capacity), recognised without
    importing torch where no command loaded it. Why: under a limit every command that loads
    torch ended in a traceback whose last line does not say that a limit is the cause."""
    torch = sys.modules.get("torch")  # an error of torch's needs torch loaded: never import it
    gpu_error = getattr(torch, "OutOfMemoryError", None)
    if isinstance(gpu_error, type) and isinstance(exc, gpu_error):
        first = (str(exc).strip().splitlines() or ["out of memory"])[0]
        return (
            f"ran out of GPU memory: {first.rstrip('.')}. A smaller batch (training: "
            "train.max_batch_per_gpu) or a GPU with more memory"
        )
    words = str(exc).lower()
    torch_cpu = isinstance(exc, RuntimeError) and TORCH_CPU_ALLOCATOR in str(exc)
    if not (isinstance(exc, MemoryError) or torch_cpu) and not (
        isinstance(exc, ImportError | OSError) and any(w in words for w in NO_MEMORY_WORDS)
    ):
        return None
    what = "ran out of memory"
    if isinstance(exc, ImportError):  # the loader's words name the library: "libx.so: failed ..."
        library = str(exc).partition(":")[0] if ": " in str(exc) else exc.name
        what += f" loading {library or 'a library'}"
    elif torch_cpu:  # torch's words give the size: "you tried to allocate 10000000000 bytes"
        size = re.search(r"allocate (\d+) bytes", str(exc))
        what += f" allocating {int(size[1]) / 2**20:,.1f} MiB in torch" if size else " in torch"
    limits = memory_limits()
    if not limits:
        return f"{what}: no process memory limit is set, the machine's memory is used up"
    return (
        f"{what} under the process memory limit {' and '.join(limits)}: raise it (`ulimit -v "
        "unlimited`, or a job's mem_mb) or run where more memory is free"
    )


def _user_errors() -> tuple[type[BaseException], ...]:
    """What bad input raises: the message names the file, row or key (ValueError covers
    ConfigError, pyarrow's ArrowInvalid, JSON and Unicode decode errors; OSError covers missing
    files and truncated gzip; DeviceError a GPU job without a GPU). Anything else is a bug and
    keeps its traceback."""
    import pickle

    from imagenot.core.device import DeviceError

    extra: list[type[BaseException]] = [pickle.UnpicklingError, DeviceError]
    with contextlib.suppress(ImportError):  # a truncated or corrupt weights file
        from safetensors import SafetensorError

        extra.append(SafetensorError)
    return (ValueError, OSError, EOFError, KeyError, *extra)


def missing_package(module: str) -> str:
    """What to install when ``module`` cannot be imported: the toolbox's commands need the
    package's own dependencies, the workflow's steps its extra ``workflow``."""
    return (
        f"the Python package {module.partition('.')[0]!r} is not installed: the toolbox's "
        "commands need `pip install imagenot` (the clone or its URL); the workflow's, its "
        'extra: `make setup` in a clone, or `pip install "imagenot[workflow]"`'
    )


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand. Bad input ends in one line on stderr (``imagenot CMD: error: ...``)
    and exit code 2, with the traceback only under ``--debug``; a closed stdout (``| head``) is
    not an error; Ctrl-C is one line and exit code 130; running out of memory (a library too
    large for a process memory limit, ``ulimit -v``) is one line naming the limit and exit code
    1. In a workflow job the command dies with its job (:mod:`imagenot.core.lifeline`), and
    the last line on stderr is the job's own peak memory and CPU
    time (imagenot.core.job_usage), however the command ends: returned, failed, ``SystemExit``."""
    started = time.monotonic()
    if job_usage.enabled():  # a workflow job's command: it ends with its job (lifeline)
        lifeline.bind_to_parent()
    try:
        return _run(argv)
    finally:
        if job_usage.enabled():
            job_usage.report(started)


def _run(argv: list[str] | None) -> int:
    from imagenot.core.registries import load_env_plugins

    load_env_plugins()  # names a workflow job's plugins register (CLI choices derive from them)
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    try:
        result = args.func(args)
    except BrokenPipeError:
        # The reader went away: silence the flush at exit, as a Unix filter does.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        # Ctrl-C: the user's own stop, not a fault; one line and the shell's status for SIGINT
        # (128 + 2). Training jobs take SIGINT as SIGTERM and checkpoint (imagenot.train.cli).
        if args.debug:
            raise
        print(f"imagenot {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return INTERRUPTED_EXIT
    except Exception as exc:
        return _failed(args, exc)
    return int(result or 0)


def _failed(args: argparse.Namespace, exc: Exception) -> int:
    """The one line and exit status of a command that raised ``exc`` (``main``'s docstring);
    an error that is none of these is raised with its traceback, as is every error under
    ``--debug``."""
    if args.debug:
        raise exc
    message, status = out_of_memory(exc), MEMORY_LIMIT_EXIT
    if message is None and isinstance(exc, ModuleNotFoundError):
        # a package of another install than this one (the toolbox alone: no torch): one line
        # saying what to install, not a trace; a missing module of imagenot itself is a bug
        if not exc.name or exc.name.partition(".")[0] == "imagenot":
            raise exc
        message, status = missing_package(exc.name), 2
    elif message is None and isinstance(exc, _user_errors()):
        # a bare KeyError is a missing key; a registry's (also a ValueError) says its own words
        bare_key = isinstance(exc, KeyError) and not isinstance(exc, ValueError)
        message, status = f"missing key {exc}" if bare_key else str(exc), 2
    if message is None:
        raise exc
    print(f"imagenot {args.command}: error: {message}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())

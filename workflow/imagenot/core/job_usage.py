"""A job's own peak memory and CPU time, measured by the kernel and written as its last log line.

Why: Snakemake's benchmark files sample a job's process tree (every 0.5 s for 30 samples, then
every 30 s), so a short job is caught at a random moment of its life: the same job on the same
input measured 111 MB in one run and 646 MB in another, and the scale projection
(benchmarks/bench_scale.py) multiplied that noise up to laion2B-en. ``getrusage`` is exact: the
kernel keeps each process's high-water mark of resident memory (``ru_maxrss``) and its CPU time.

Every ``imagenot`` command run by a workflow job (rules/common.smk sets :data:`ENV`) ends by
writing one line to stderr (the job's log: every rule's shell line is ``imagenot ... > {log}
2>&1``), whether it returned, failed with a one-line error, exited through ``SystemExit``
(argparse) or raised::

    imagenot job-usage: {"peak_rss_mb": 646.2, "self_rss_mb": 646.2, "children_rss_mb": 0.0, ...}

What the figures are (Linux ``getrusage(2)``; MiB, as Snakemake's ``max_rss``):

- ``self_rss_mb``: the job process's own peak RSS (exact).
- ``children_rss_mb``: ``RUSAGE_CHILDREN``'s ``ru_maxrss``, the peak of the *largest single*
  descendant the job waited for (a child's figure includes its own waited-for children), not the
  sum of descendants that ran at the same time.
- ``workers``: how many descendants may run at once, as the job's code declared it
  (:func:`declare_workers`, e.g. the download's fetch process and its img2dataset processes);
  null when the job declared none.
- ``peak_rss_mb`` = self + max(workers, 1 if any child ran) x children: the job's process tree
  can never hold more at once (each process is at most the largest), so it is an upper bound of
  the tree's peak, as Snakemake's own figure (the sum of the tree's RSS) would be if sampled at
  the right moment; shared pages (libraries, forked memory) are counted once per process, as
  there. It is exact for a job without children. A job that runs several processes at once
  without declaring them would be under-counted: every command that starts worker processes
  declares them.
- ``rows_held``: for a streamed job, the most input rows it holds at once, as its code declared
  it (:func:`declare_rows_held`); null for a job that holds its whole input.
- ``arrow_peak_mb``: the most memory the job process's Arrow memory pool (pyarrow's default pool)
  held at once (``MemoryPool.max_memory``): the bytes Arrow asked for, not what the allocator
  kept resident, so the same job on the same input reports the same figure in every run (a
  curation selection: 226-228 MB in runs whose RSS peaks spread over 519-585 MB). Null when
  the job never imported pyarrow. A projection scales the data a job holds by this figure and
  keeps the rest of its peak (interpreter, libraries, the allocator's slack) as measured.
- ``cpu_s``: user + system CPU seconds of the job and its waited-for descendants (exact, where a
  sampled ``cpu_time`` misses the short jobs); ``wall_s``: seconds since the command started.

Not covered: a job killed by a signal it does not handle (the out-of-memory killer's SIGKILL)
writes no line; :func:`parse` then returns None and a reader falls back to Snakemake's sample.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import time

ENV = "IMAGENOT_JOB_USAGE"
PREFIX = "imagenot job-usage: "
_KIB_PER_MIB = 1024  # Linux reports ru_maxrss in KiB

_workers: int | None = None
_rows_held: int | None = None


def declare_workers(n: int) -> None:
    """Declare that up to ``n`` descendant processes of this job run at the same time (the
    largest declaration counts): the recorded peak then counts the largest one ``n`` times."""
    global _workers
    _workers = max(_workers or 0, int(n))


def declare_rows_held(n: int) -> None:
    """Declare that this job holds at most ``n`` rows of its input at once, whatever the
    input's size (a streamed job): a projection to a larger input scales the measured memory
    by held rows, not input rows (benchmarks/bench_scale.py)."""
    global _rows_held
    _rows_held = max(_rows_held or 0, int(n))


def usage(started: float | None = None) -> dict:
    """This process's figures now (the fields of the module docstring)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    self_mb = own.ru_maxrss / _KIB_PER_MIB
    children_mb = kids.ru_maxrss / _KIB_PER_MIB
    copies = max(_workers or 0, 1 if children_mb > 0 else 0)
    return {
        "peak_rss_mb": round(self_mb + copies * children_mb, 1),
        "self_rss_mb": round(self_mb, 1),
        "children_rss_mb": round(children_mb, 1),
        "workers": _workers,
        "rows_held": _rows_held,
        "arrow_peak_mb": _arrow_peak_mb(),
        "cpu_s": round(own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime, 3),
        "wall_s": None if started is None else round(time.monotonic() - started, 3),
    }


def _arrow_peak_mb() -> float | None:
    """The Arrow default pool's high-water mark (module docstring), if pyarrow was imported."""
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is None:
        return None
    return round(pyarrow.default_memory_pool().max_memory() / 2**20, 1)


def enabled() -> bool:
    """Whether this process runs as a workflow job (rules/common.smk sets :data:`ENV`)."""
    return os.environ.get(ENV, "") not in ("", "0")


def report(started: float | None = None, stream=None) -> None:
    """Write the usage line to ``stream`` (stderr); a closed stream is not an error."""
    stream = stream if stream is not None else sys.stderr
    with contextlib.suppress(OSError, ValueError):  # stderr closed: nothing to record into
        print(PREFIX + json.dumps(usage(started)), file=stream, flush=True)


def parse(text: str) -> dict | None:
    """The last usage line of a job's log text, or None if it has none."""
    found = None
    for line in text.splitlines():
        if line.startswith(PREFIX):
            try:
                found = json.loads(line[len(PREFIX) :])
            except json.JSONDecodeError:
                continue
    return found

"""CPU time of each test module, as a pytest plugin: where the test suite's time goes.

    PYTHONPATH=benchmarks .venv/bin/python -m pytest -p pytest_cpu [pytest args]

At the end it prints each module's wall time and CPU time (the test process's own plus that of
every child process it waited for: the Snakemake runs, the jobs they start), costliest first,
and writes them as JSON to ``$PYTEST_CPU_JSON`` if that is set (``<path>.<worker>``; ``modules``,
and ``tests``: each test's setup, call and teardown, keyed by node id). Under
pytest-xdist (``-n``) the workers measure and the controller prints nothing: set
``PYTEST_CPU_JSON`` and read one file per worker. Why CPU and not wall time: on 2 cores shared
by two workers, a module's wall time depends on what the other worker runs beside it; its CPU
time does not, and the suite's total CPU time over the core count bounds its wall time from
below.

What it cannot see: processes the test did not wait for (the loopback SLURM's jobs run under
``slurmd``), so ``tests/test_slurm.py``'s figure is the test process's share only.
"""

from __future__ import annotations

import json
import os
import resource
import time

_started: dict[str, tuple[float, float]] = {}
_totals: dict[str, list[float]] = {}
_tests: dict[str, list[float]] = {}  # node id -> [wall, CPU] of its setup, call and teardown


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _module(path: str) -> str:
    """The test module's file name: the key of every figure."""
    return os.path.basename(path)


def pytest_runtest_protocol(item, nextitem):
    name = _module(str(item.path))
    if name not in _started:
        _started[name] = (time.monotonic(), _cpu())
    _tests[item.nodeid] = [time.monotonic(), _cpu()]
    return None


def pytest_runtest_logfinish(nodeid, location):
    if nodeid in _tests:
        wall0, cpu0 = _tests[nodeid]
        _tests[nodeid] = [time.monotonic() - wall0, _cpu() - cpu0]
    name = _module(location[0])
    if name in _started:
        wall0, cpu0 = _started[name]
        _totals[name] = [time.monotonic() - wall0, _cpu() - cpu0]


def pytest_sessionfinish(session, exitstatus):
    if not _totals:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    path = os.environ.get("PYTEST_CPU_JSON")
    if path:
        with open(f"{path}.{worker}", "w") as out:
            json.dump({"modules": _totals, "tests": _tests}, out, indent=1, sort_keys=True)


def pytest_terminal_summary(terminalreporter):
    if not _totals:
        return
    terminalreporter.section("CPU time by test module (s): wall, CPU (own + waited-for children)")
    for name, (wall, cpu) in sorted(_totals.items(), key=lambda kv: -kv[1][1]):
        terminalreporter.write_line(f"{cpu:8.1f} CPU-s {wall:8.1f} s  {name}")
    total = sum(cpu for _, cpu in _totals.values())
    terminalreporter.write_line(f"{total:8.1f} CPU-s in all")

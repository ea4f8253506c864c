"""Why a download stops: its error, and why a process it spawns cannot start.

Apart from :mod:`imagenot.acquire.fetch` because both the fetch and img2dataset's watched
workers (:mod:`imagenot.acquire.guarded`, which the fetch installs) raise and explain these: one
module below both, so neither imports the other back.
"""

from __future__ import annotations

import pickle
import subprocess


class DownloadError(ValueError):
    """A download part could not be completed; the message says why and what a rerun does.

    A ValueError so that ``imagenot.cli.main`` prints it as one line (exit code 2)."""


START_CHECK = """
import pickle, sys
from multiprocessing import spawn
data = pickle.load(sys.stdin.buffer)
main = {k: data.pop(k) for k in ("init_main_from_name", "init_main_from_path") if k in data}
stage = "setting up"
try:
    spawn.prepare(data)
    if main:
        shown = main.get("init_main_from_path") or main.get("init_main_from_name")
        stage = (
            f"running the program's main module {shown} again, as every spawned process does "
            "(keep its work under if __name__ == '__main__':)"
        )
        spawn.prepare(main)
    stage = "importing img2dataset"
    import img2dataset
    import imagenot.acquire.guarded
except BaseException as exc:
    text = " ".join(str(exc).split())
    print(f"{stage}: {type(exc).__name__}" + (f": {text}" if text else ""))
    sys.exit(3)
"""
"""What a process spawned by this one does before its work (:func:`startup_problem`)."""
START_CHECK_TIMEOUT_S = 300


def startup_problem(name: str) -> str | None:
    """Why a process named ``name`` that this one spawns cannot start, as one line, or None
    where it can.

    A fresh interpreter does what multiprocessing's spawn does in a new process of that name
    (this process's path, folder and arguments; the program's main module run again as
    ``__mp_main__``), then
    imports what a download's processes import (img2dataset, :mod:`imagenot.acquire.guarded`),
    and reports the first exception with the step it failed in. Run where a spawned process
    has died: a failure the check cannot repeat (one that came and went) gives None."""
    from multiprocessing import spawn

    data = spawn.get_preparation_data(name)
    data.pop("authkey", None)  # not picklable outside a spawn; the check needs none
    try:
        done = subprocess.run(
            [spawn.get_executable(), "-c", START_CHECK],
            input=pickle.dumps(data),
            capture_output=True,
            timeout=START_CHECK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"starting a process did not end within {START_CHECK_TIMEOUT_S} s"
    if done.returncode == 0:
        return None
    out = done.stdout.decode(errors="replace").strip().splitlines()
    if done.returncode == 3 and out:
        return out[-1]
    err = done.stderr.decode(errors="replace").strip().splitlines()
    return f"a new process ended with code {done.returncode}" + (f": {err[-1]}" if err else "")

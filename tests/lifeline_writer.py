"""A slow job command for tests/test_lifeline.py: binds to its parent as a workflow job's
``imagenot`` command does (``imagenot.cli.main``), says it started, waits, then writes its output
through the one atomic writer.

Usage: ``python lifeline_writer.py OUT SECONDS [--ignore-term]``. ``--ignore-term`` stands for a
command that finishes a checkpoint on SIGTERM before it stops (the train jobs): it keeps running,
and only the write check stops it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from imagenot import lifeline
from imagenot.io import write_text

if __name__ == "__main__":
    out, seconds = Path(sys.argv[1]), float(sys.argv[2])
    if "--ignore-term" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    lifeline.bind_to_parent()
    Path(f"{out}.pid").write_text(str(os.getpid()))  # started (not an output)
    time.sleep(seconds)
    write_text("done\n", out)

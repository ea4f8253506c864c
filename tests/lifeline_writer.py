"""A job command for tests/test_lifeline.py that writes only when the test lets it: binds to its
parent as a workflow job's ``imagenot`` command does (``imagenot.cli.main``), says it started,
waits until the test creates ``OUT.go``, then writes its output through the one atomic writer.
The test decides when the write comes (after it has killed what it kills), so no timing decides
whether the write happens before or after a kill.

Usage: ``python lifeline_writer.py OUT [--ignore-term]``. ``--ignore-term`` stands for a
command that finishes a checkpoint on SIGTERM before it stops (the train jobs): it keeps running,
and only the write check stops it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from imagenot.core import lifeline
from imagenot.core.io import write_text

# how long a writer waits for its test's word before it gives up (writing nothing): a bound
# that only a test that stopped early reaches, never part of a check
LEFT_BEHIND_S = 600

if __name__ == "__main__":
    out = Path(sys.argv[1])
    if "--ignore-term" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    lifeline.bind_to_parent()
    Path(f"{out}.pid").write_text(str(os.getpid()))  # started (not an output)
    go = Path(f"{out}.go")
    deadline = time.monotonic() + LEFT_BEHIND_S
    while not go.exists():  # the test's word; polled, since a kill may come first
        if time.monotonic() > deadline:  # a test that stopped before its word: leave no process
            sys.exit(f"{go} never appeared: nothing written")
        time.sleep(0.05)
    write_text("done\n", out)

"""img2dataset's per-image fetch, with the limits a web crawl needs.

img2dataset reads each URL with ``urllib.request.urlopen`` and ``r.read()``: every scheme
urllib knows (``file://`` read local files into the dataset, ``ftp://``, redirects to them),
the whole body in memory whatever its size (a 400 MB body was held, 2.7 GB RSS), and only a
per-read socket timeout (a server sending one byte per second held the job for ever).
:class:`GuardedDownloader` is img2dataset's own ``Downloader`` whose worker processes fetch with
:func:`guarded_download_image` instead (same signature and return value, so everything else of
img2dataset is unchanged):

- only ``http`` and ``https`` URLs, and redirects only to them (``unsupported URL scheme``,
  reason ``unsupported_scheme``);
- at most ``max_bytes`` of body (``Content-Length`` checked first, then while reading; reason
  ``too_large``);
- an overall deadline of ``deadline`` seconds per image, from the request to the body's last
  byte (reason ``timeout``): a timer shuts the connection's socket down when it passes, which
  ends a read blocked on a server that sends headers one byte at a time, and the body loop
  checks it after every network read (``read1``: one read, never waiting for a full buffer).
  ``timeout`` still bounds each single read.

The limits travel to img2dataset's spawned workers inside the pickled downloader, and each
worker installs the guarded function in its own copy of ``img2dataset.downloader`` when it
starts a shard (img2dataset calls that module's ``download_image`` by name).

:func:`watched_distributor` is img2dataset's multiprocessing distributor (the same pool of
spawned workers, the same shard retries) that watches its workers: one that ends with an error
(it could not start, or died holding a batch) stops the download with one line saying why,
where multiprocessing's pool would start another for ever (a worker that cannot start) or wait
for ever for the lost batch.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import multiprocessing
import multiprocessing.pool
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import ClassVar
from urllib.parse import urlsplit

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
from img2dataset import downloader as _i2d

from imagenot.acquire.failures import DownloadError, startup_problem
from imagenot.acquire.settings import DownloadSettings

ALLOWED_SCHEMES = ("http", "https")
CHUNK = 1 << 16


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        scheme = urlsplit(newurl).scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            raise urllib.error.URLError(f"unsupported URL scheme {scheme!r} (redirect)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_STATE = threading.local()  # per download thread: the current image's deadline and timer


def _arm(sock: socket.socket) -> None:
    """Shut ``sock`` down when the current image's deadline passes (module docstring)."""
    _disarm()
    remaining = max(0.0, getattr(_STATE, "deadline_at", float("inf")) - time.monotonic())
    if remaining == float("inf"):
        return

    def fire() -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(remaining, fire)
    timer.daemon = True
    timer.start()
    _STATE.timer = timer


def _disarm() -> None:
    timer = getattr(_STATE, "timer", None)
    if timer is not None:
        timer.cancel()
        _STATE.timer = None


class _Deadline:
    """A connection whose socket :func:`_arm` shuts down at the image's deadline."""

    def connect(self):
        super().connect()
        _arm(self.sock)


class _DeadlineHTTPConnection(_Deadline, http.client.HTTPConnection):
    pass


class _DeadlineHTTPSConnection(_Deadline, http.client.HTTPSConnection):
    pass


class _DeadlineHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_DeadlineHTTPConnection, req)


class _DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        connection, context = _DeadlineHTTPSConnection, self._context
        return self.do_open(connection, req, context=context, check_hostname=self._check_hostname)


_OPENER = urllib.request.build_opener(
    _HttpOnlyRedirects, _DeadlineHTTPHandler, _DeadlineHTTPSHandler
)


def guarded_download_image(
    row,
    timeout,
    user_agent_token,
    disallowed_header_directives,
    *,
    max_bytes: int,
    deadline: float,
):
    """img2dataset's ``download_image`` with the limits of the module docstring."""
    key, url = row
    scheme = urlsplit(url or "").scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        return key, None, f"unsupported URL scheme {scheme!r}"
    agent = "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:72.0) Gecko/20100101 Firefox/72.0"
    if user_agent_token:
        agent += f" (compatible; {user_agent_token}; +https://github.com/rom1504/img2dataset)"
    start = time.monotonic()
    _STATE.deadline_at = start + deadline
    try:
        request = urllib.request.Request(url, data=None, headers={"User-Agent": agent})
        with _OPENER.open(request, timeout=timeout) as r:
            if disallowed_header_directives and _i2d.is_disallowed(
                r.headers, user_agent_token, disallowed_header_directives
            ):
                return key, None, "Use of image disallowed by X-Robots-Tag directive"
            length = r.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > max_bytes:
                return key, None, f"response too large: {length} bytes > {max_bytes}"
            buf = io.BytesIO()
            while chunk := r.read1(CHUNK):
                buf.write(chunk)
                if buf.tell() > max_bytes:
                    return key, None, f"response too large: over {max_bytes} bytes"
                if time.monotonic() - start > deadline:
                    return key, None, f"deadline of {deadline:g} s timed out"
        if time.monotonic() - start >= deadline:  # the timer cut the body short
            return key, None, f"deadline of {deadline:g} s timed out"
        buf.seek(0)
        return key, buf, None
    except Exception as err:  # img2dataset's contract: every failure is a message
        if time.monotonic() - start >= deadline:
            return key, None, f"deadline of {deadline:g} s timed out ({err})"
        return key, None, str(err)
    finally:
        _disarm()


class GuardedDownloader(_i2d.Downloader):
    """img2dataset's Downloader; its shards fetch with :func:`guarded_download_image`."""

    # set by the process that builds the downloader, copied per instance
    limits: ClassVar[dict] = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.guard_limits = dict(type(self).limits)

    def __call__(self, row):
        _i2d.download_image = functools.partial(guarded_download_image, **self.guard_limits)
        return super().__call__(row)


WATCH_S = 0.5
"""How often the distributor looks at its workers while no batch finishes."""


class _WatchedPool(multiprocessing.pool.Pool):
    """multiprocessing's Pool, keeping every worker process it starts in ``workers`` (the pool
    itself forgets a worker once it has ended)."""

    def __init__(self, *args, **kwargs):
        self.workers: list = []

        def process(ctx, *a, **k):
            worker = ctx.Process(*a, **k)
            self.workers.append(worker)
            return worker

        self.Process = process  # what the pool calls to start each worker
        super().__init__(*args, **kwargs)

    def failed_worker(self) -> tuple[str, int] | None:
        """(name, exit code) of a worker that ended with an error, or None; workers that ended
        well are forgotten here too (a long download starts thousands)."""
        for worker in list(self.workers):
            code = worker.exitcode
            if code == 0:
                self.workers.remove(worker)
            elif code is not None:
                return worker.name, code
        return None


def _worker_failure(name: str, code: int) -> str:
    """The one line of a download stopped by a worker that ended with exit code ``code``."""
    problem = startup_problem(name) if code > 0 else None  # a signal is no start failure
    if problem:
        return f"img2dataset's worker processes cannot start: {problem}"
    how = f"exit code {code}"
    if code < 0:
        with contextlib.suppress(ValueError):
            how = f"signal {signal.Signals(-code).name}" + (
                " (killed: out of memory?)" if code == -signal.SIGKILL else ""
            )
    return (
        f"img2dataset's worker process {name} ended with {how}: the batch it held would never "
        "finish, so the download stops; rerun the job (finished batches are kept)"
    )


def watched_distributor(processes_count, downloader, reader, _subjob_size, max_shard_retry):
    """img2dataset's ``multiprocessing_distributor`` (same signature, pool and retries) whose
    workers are watched (module docstring): :class:`imagenot.acquire.failures.DownloadError` with
    one line when one ends with an error."""
    from img2dataset.distributor import retrier

    ctx = multiprocessing.get_context("spawn")
    pool = _WatchedPool(processes_count, maxtasksperchild=5, context=ctx)
    try:

        def run(shards) -> list:
            failed = []
            results = pool.imap_unordered(downloader, shards)
            checked = time.monotonic()
            while True:
                try:
                    status, row = results.next(timeout=WATCH_S)
                except multiprocessing.TimeoutError:
                    status, row = None, None
                except StopIteration:
                    return failed
                if status is False:
                    failed.append(row)
                if status is None or time.monotonic() - checked > WATCH_S:
                    checked = time.monotonic()
                    failure = pool.failed_worker()
                    if failure is not None:
                        raise DownloadError(_worker_failure(*failure))

        retrier(run, run(reader), max_shard_retry)
    finally:
        pool.terminate()
        pool.join()


def install(settings: DownloadSettings) -> None:
    """Make ``img2dataset.download`` build a :class:`GuardedDownloader` with the download's
    limits (``acquire.max_response_bytes``, ``acquire.image_deadline_s``) and run it with
    :func:`watched_distributor`, in this process: the fetch child of
    :mod:`imagenot.acquire.fetch`."""
    import img2dataset  # noqa: F401 (loads img2dataset.main, whose name the package rebinds)

    GuardedDownloader.limits = {
        "max_bytes": int(settings.max_response_bytes),
        "deadline": float(settings.image_deadline_s),
    }
    sys.modules["img2dataset.main"].Downloader = GuardedDownloader
    sys.modules["img2dataset.main"].multiprocessing_distributor = watched_distributor

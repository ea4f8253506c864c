"""Fetching one download part with img2dataset into its work folder, and keeping that folder
honest.

img2dataset fetches the part into a work directory (webdataset, original bytes kept:
``disable_all_reencoding``), resuming shard by shard (``incremental_mode``) when a killed job is
rerun; its workers fetch through :mod:`imagenot.acquire.guarded`. URL prefixes in ``url_map``
are served from local directories on loopback HTTP ports while the job runs (the demo world,
local mirrors), so they take the same HTTP path as the web. What is done with the fetched
images (validation, the part's tar and status table): :mod:`imagenot.acquire.download`.

Faults:

- No orphans. The fetch (loopback servers and img2dataset with its worker processes) runs in a
  child process that leads a process group of its own (:func:`run_in_process_group`). The job's
  SIGTERM/SIGINT/SIGHUP kill that whole group before the job exits, and the child asks the
  kernel for a signal that kills the group when the job process is gone (SIGKILL, a crash:
  :func:`imagenot.core.lifeline.bind_to_parent`), so no
  img2dataset worker outlives its job and records URLs against a server that died with it.
- No endless restarts. A process the download spawns (the fetch child, img2dataset's workers)
  that cannot start, or a worker that dies, ends the download with one line saying why
  (:func:`startup_problem` finds it: a program whose main module fails when a spawned process
  runs it again, as multiprocessing's spawn does), where img2dataset's pool would start another
  worker for ever, or wait for ever for the batch a dead worker held.
- Stale work is recognised by content: the work folder records the sha256 of the part's
  (key, URL) rows it was made for (``selection.sha256``). Work made for another selection (a
  changed threshold, a new class list) is not resumed: its finished batches move to
  ``reuse/``, and only the rows they do not hold (same key and URL; transient failures are
  fetched again) go to a fresh img2dataset run, so lowering a threshold fetches only the new
  rows and nothing needs deleting by hand.
- A dead batch is not finished: an img2dataset shard of at least ``DEAD_BATCH_MIN_ROWS`` rows
  whose every URL failed with one identical network error or timeout message (a dead server,
  no network on a compute node: real web URLs fail in many different ways) loses its
  finished marker and files, and the job fails saying so; its rerun fetches the shard again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import json
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tarfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from imagenot.acquire import images
from imagenot.acquire.failures import DownloadError, startup_problem
from imagenot.acquire.settings import DownloadSettings
from imagenot.core import job_usage, lifeline
from imagenot.core.io import read_parquet, write_parquet, write_text

log = logging.getLogger(__name__)


# A shard of at least this many rows all failing with one identical network error is a dead
# server or no network, not dead URLs (below it, a few identical failures can be chance).
DEAD_BATCH_MIN_ROWS = 5
TRANSIENT_REASONS = ("timeout", "network_error")
# A folder whose `torch` fails to import (its module docstring says why): first on the path of
# the fetch child, whose path img2dataset's spawned processes take over.
WITHOUT_TORCH = str(Path(__file__).resolve().parents[1] / "resources" / "without_torch")


def selection_fingerprint(part_table: pa.Table) -> str:
    """sha256 of the part's (key, URL) rows in order: what its download work was made for."""
    rows = zip(part_table["key"].to_pylist(), part_table["URL"].to_pylist(), strict=True)
    return hashlib.sha256("".join(f"{key}\t{url}\n" for key, url in rows).encode()).hexdigest()


# ------------------------------------------------------------------------ process supervision


def _kill_group(pgid: int, proc=None, grace: float = 3.0) -> None:
    """SIGTERM the process group, give it ``grace`` seconds, then SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
        if proc is not None:
            proc.join(grace)
        os.killpg(pgid, signal.SIGKILL)


def _group_child(parent_pid: int, conn, target, args, kwargs) -> None:
    """Body of the supervised child: lead a new process group, die with the parent."""
    os.setsid()  # a new session and process group; every descendant inherits it
    if not logging.getLogger().handlers:
        from imagenot.core.io import setup_logging

        setup_logging(False)

    def kill_all(*_):
        os.killpg(0, signal.SIGKILL)  # this process, img2dataset's workers, everything

    signal.signal(signal.SIGTERM, kill_all)
    # the job process gone (SIGKILL, a crash): the kernel sends SIGTERM, which kills the group
    lifeline.bind_to_parent(signal.SIGTERM, parent_pid)
    try:
        target(*args, **kwargs)
    except BaseException as exc:
        conn.send(f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc))
        conn.close()
        os._exit(1)
    conn.send(None)
    conn.close()


def run_in_process_group(target, *args, **kwargs) -> None:
    """Run ``target(*args, **kwargs)`` in a spawned child leading its own process group.

    Why: img2dataset runs its downloads in worker processes; killed with the job's process
    alone they went on as orphans, against loopback servers that died with the job, and
    recorded every URL as refused. Here the job's SIGTERM/SIGINT/SIGHUP kill the whole group
    first, and the child's parent-death signal kills the group when the job process dies any
    other way.
    An exception in the child comes back as :class:`DownloadError` with its message.
    """
    ctx = multiprocessing.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_group_child,
        args=(os.getpid(), writer, target, args, kwargs),
        name="imagenot-fetch",
    )
    handlers = {}

    def stop(number, frame):
        _kill_group(proc.pid, proc)
        signal.signal(number, handlers.get(number, signal.SIG_DFL))
        os.kill(os.getpid(), number)  # die of the same signal, as without this handler

    proc.start()
    writer.close()
    try:
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGTERM, signal.SIGHUP):
                handlers[number] = signal.signal(number, stop)
        proc.join()
        message = None
        with contextlib.suppress(EOFError):  # a child that never ran its target sent nothing
            message = reader.recv() if reader.poll() else None
    finally:
        # interrupted (KeyboardInterrupt, no exit code yet), or the child failed: whatever it
        # started must not go on
        if proc.exitcode != 0:
            _kill_group(proc.pid, proc, grace=0.5)
        for number, handler in handlers.items():
            signal.signal(number, handler)
    if proc.exitcode != 0:
        if message is None and proc.exitcode > 0:  # it could not start: no target ran
            problem = startup_problem(proc.name)
            message = f"the download process could not start: {problem}" if problem else None
        raise DownloadError(message or f"the download process ended with code {proc.exitcode}")


def rewrite_urls(urls: list[str], mapping: Mapping[str, str]) -> list[str]:
    """Replace the first matching prefix of each URL (longest prefix first)."""
    prefixes = sorted(mapping, key=len, reverse=True)
    out = []
    for url in urls:
        prefix = next((p for p in prefixes if url is not None and url.startswith(p)), None)
        out.append(url if prefix is None else mapping[prefix] + url[len(prefix) :])
    return out


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@contextlib.contextmanager
def serve_directories(url_map: Mapping[str, str | os.PathLike]) -> Iterator[dict[str, str]]:
    """Serve each directory on 127.0.0.1 (ephemeral port); yield prefix -> loopback base URL.

    A value ``generate:<seed>[:<size>]`` serves a generated JPEG for every path instead (the
    scale world, whose millions of images are never rendered to disk).
    """
    from imagenot.acquire import generated

    servers = []
    mapping = {}
    try:
        for prefix, directory in url_map.items():
            if generated.is_generated(directory):
                handler = generated.generated_image_handler(*generated.parse_generated(directory))
            elif not Path(directory).is_dir():
                raise FileNotFoundError(f"url_map[{prefix!r}]: directory {directory} not found")
            else:
                handler = functools.partial(_QuietHandler, directory=str(directory))
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers.append(server)
            mapping[prefix] = f"http://127.0.0.1:{server.server_address[1]}/"
            log.info("serving %s for %s at %s", directory, prefix, mapping[prefix])
        yield mapping
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def fetch(
    part_table: pa.Table,
    work_dir: str | os.PathLike,
    settings: DownloadSettings,
    *,
    processes: int,
) -> Path:
    """Fetch every URL of ``part_table`` with img2dataset into ``work_dir``/img2dataset.

    Resumable: shards with an img2dataset ``_stats.json`` are skipped on a rerun; unfinished
    shards are redone from scratch (no duplicates). Work made for another selection is not
    resumed but kept for reuse, and dead batches are unmarked afterwards (module docstring). The fetch runs in its
    own process group (:func:`run_in_process_group`). Returns the img2dataset output folder.
    """
    work_dir = Path(work_dir)
    out = work_dir / "img2dataset"
    fingerprint = selection_fingerprint(part_table)
    marker = work_dir / "selection.sha256"
    made_for = marker.read_text().strip() if marker.is_file() else None
    if made_for != fingerprint and (out.exists() or made_for is not None):
        kept = _keep_for_reuse(out, work_dir / REUSE)
        log.warning(
            "%s: download work made for another selection (%s, now %s): not resumed; %d "
            "finished batch(es) kept for reuse, the rest fetched anew",
            work_dir,
            (made_for or "no fingerprint")[:12],
            fingerprint[:12],
            kept,
        )
        shutil.rmtree(out, ignore_errors=True)
        (work_dir / "input.parquet").unlink(missing_ok=True)
    work_dir.mkdir(parents=True, exist_ok=True)
    write_text(fingerprint + "\n", marker)
    url_of = dict(zip(part_table["key"].to_pylist(), part_table["URL"].to_pylist(), strict=True))
    reused = read_fetched(work_dir / REUSE, lambda m: reusable_row(m, url_of), with_bytes=False)
    if reused:
        log.info("%s: %d row(s) reused from earlier work", work_dir, len(reused))
        part_table = part_table.filter(
            pc.invert(pc.is_in(part_table["key"], pa.array(list(reused), pa.string())))
        )
    if part_table.num_rows:
        # processes running at once beside the job (its recorded peak counts each as the
        # largest): the fetch process, img2dataset's pool and its logger process, and
        # multiprocessing's resource tracker (spawn starts one)
        job_usage.declare_workers(max(1, processes) + 3)
        run_in_process_group(_fetch_here, part_table, work_dir, settings, processes=processes)
    unmark_dead_batches(out)
    return out


REUSE = "reuse"


def _keep_for_reuse(out: Path, reuse: Path) -> int:
    """Move the finished batches of stale work into ``reuse`` (names prefixed with a new
    generation number; the stats file, the done marker, last); return how many."""
    shards = _done_shards(out)
    reuse.mkdir(parents=True, exist_ok=True)
    generation = 1 + max(
        (int(p.name.split("-", 1)[0]) for p in reuse.glob("*_stats.json")), default=0
    )
    for shard in shards:
        for suffix in reversed(SHARD_FILES):  # the done marker last
            os.replace(out / f"{shard}{suffix}", reuse / f"{generation:03d}-{shard}{suffix}")
    return len(shards)


def reusable_row(m: Mapping, url_of: Mapping[str, str]) -> bool:
    """A row of earlier work stands for this selection's row: same key and URL, and not a
    transient failure (those are fetched again)."""
    url = m.get("sel_url") or m.get("url")  # work of older versions: the URL fetched
    return (
        url is not None
        and url_of.get(m.get("sel_key")) == url
        and not _transient(m.get("error_message"))
    )


def _fetch_here(
    part_table: pa.Table, work_dir: Path, settings: DownloadSettings, *, processes: int
) -> None:
    """The fetch itself, in this process: loopback servers, then img2dataset, whose workers
    fetch with :mod:`imagenot.acquire.guarded` (http(s) only, size cap, deadline)."""
    sys.path.insert(0, WITHOUT_TORCH)  # here and in every process img2dataset spawns
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    import img2dataset

    from imagenot.acquire import guarded

    s = settings
    guarded.install(s)

    out = work_dir / "img2dataset"
    with serve_directories(s.url_map) as mapping:
        urls = rewrite_urls(part_table["URL"].to_pylist(), mapping)
        n = part_table.num_rows
        text = part_table["TEXT"].to_pylist() if "TEXT" in part_table.column_names else [""] * n
        feed = pa.table(
            {
                "sel_key": part_table["key"],
                "sel_url": part_table["URL"],  # the selection's URL, before any rewriting
                "url": pa.array(urls, pa.string()),
                "caption": text,
            }
        )
        write_parquet(feed, work_dir / "input.parquet")
        img2dataset.download(
            url_list=str(work_dir / "input.parquet"),
            input_format="parquet",
            url_col="url",
            caption_col="caption",
            save_additional_columns=["sel_key", "sel_url"],
            output_format="webdataset",
            output_folder=str(out),
            processes_count=max(1, processes),
            thread_count=max(1, s.threads_per_process),
            timeout=s.timeout_s,
            retries=s.retries,
            number_sample_per_shard=s.images_per_download_shard,
            disable_all_reencoding=True,
            compute_hash="sha256",
            extract_exif=False,
            incremental_mode="incremental",
            user_agent_token=s.user_agent_token or None,  # "" = no token, as null
            max_shard_retry=2,
            enable_wandb=False,
        )


SHARD_FILES = ("_stats.json", ".parquet", ".tar")  # an img2dataset shard's, its done marker first


def _unmark_batches(folder: str | os.PathLike, failed: Callable[[list], bool]) -> list:
    """Forget the finished shards in ``folder`` whose rows' error messages ``failed`` judges
    failed (img2dataset's incremental mode fetches them again); return (shard, its messages,
    how long it took, as text) of each."""
    folder, unmarked = Path(folder), []
    for shard in _done_shards(folder):
        messages = read_parquet(folder / f"{shard}.parquet", columns=["error_message"])
        messages = messages["error_message"].to_pylist()
        if not failed(messages):
            continue
        seconds = ""
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            stats = json.loads((folder / f"{shard}_stats.json").read_text())
            seconds = f" in {stats['end_time'] - stats['start_time']:.1f} s"
        unmarked.append((shard, messages, seconds))
        for suffix in SHARD_FILES:
            (folder / f"{shard}{suffix}").unlink(missing_ok=True)
    return unmarked


def _transient(message: str | None) -> bool:
    return images.classify_fetch_error(message) in TRANSIENT_REASONS


def unmark_dead_batches(folder: str | os.PathLike) -> None:
    """Unmark every finished shard whose URLs all failed with one identical network error or
    timeout (module docstring), then fail naming them; do nothing when there is none."""
    dead = _unmark_batches(
        folder,
        lambda messages: (
            len(messages) >= DEAD_BATCH_MIN_ROWS
            and None not in messages
            and len(set(messages)) == 1
            and _transient(messages[0])
        ),
    )
    if dead:
        shard, messages, seconds = dead[0]
        raise DownloadError(
            f"{folder}: {len(dead)} download batch(es) failed entirely with one network error "
            f"(first: shard {shard}, all {len(messages)} URLs{seconds}: {messages[0]!r}): a dead "
            "server or no network, not dead URLs; unfinished, a rerun fetches them again"
        )


def _done_shards(folder: Path) -> list[str]:
    return sorted(p.name[: -len("_stats.json")] for p in folder.glob("*_stats.json"))


def read_fetched(
    folder: Path, wanted: Callable[[dict], bool], with_bytes: bool = True
) -> dict[str, dict]:
    """Finished img2dataset rows in ``folder`` that ``wanted`` accepts, by selection key, with
    their batch name (``_shard``) and, ``with_bytes``, their image bytes (``_bytes``)."""
    fetched: dict[str, dict] = {}
    for shard in _done_shards(folder):
        meta = [m for m in read_parquet(folder / f"{shard}.parquet").to_pylist() if wanted(m)]
        by_i2d_key = {m["key"]: m for m in meta}
        if meta and with_bytes:
            with tarfile.open(folder / f"{shard}.tar") as tar:
                for member in tar:
                    stem, _, ext = member.name.rpartition(".")
                    if ext == "jpg" and stem in by_i2d_key:
                        by_i2d_key[stem]["_bytes"] = tar.extractfile(member).read()
        for m in meta:
            m["_shard"] = shard
            fetched[m["sel_key"]] = m
    return fetched


def unmark_transient_batches(folder: str | os.PathLike) -> int:
    """Unmark the finished batches in ``folder`` whose rows failed mostly by timeouts or
    network errors, so that a rerun fetches them again; return how many."""
    return len(_unmark_batches(folder, lambda ms: sum(map(_transient, ms)) * 2 > len(ms)))

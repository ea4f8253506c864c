"""Faults and reruns of the download step, nothing lost and nothing wrong accepted.

- a killed download job (SIGTERM, SIGKILL) leaves no process behind: img2dataset's workers
  and the loopback servers die with it, and no batch is recorded as finished;
- a batch whose URLs all fail with one network error (a dead server) is not recorded as
  finished, and the rerun with the server back fetches everything;
- a part below ``acquire.min_success_rate`` fails before writing anything, saying why;
- download work made for another selection (a lower threshold) is not resumed but reused:
  only the new rows are fetched, not a dead end;
- downloads are http(s) only, size-capped and deadlined; EXIF orientation is applied; resizing
  extreme aspect ratios is bounded.
"""

from __future__ import annotations

import functools
import http.server
import io
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import ClassVar

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import download_settings
from PIL import Image

from imagenot.acquire.download import DownloadError, download_part
from imagenot.acquire.files import DownloadFiles


def _jpeg(colour=(200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 24), colour).save(buf, format="JPEG")
    return buf.getvalue()


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder; paths under /hang/ never answer (count the requests)."""

    hung = 0
    served: ClassVar[list[str]] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/hang/"):
            type(self).hung += 1
            time.sleep(120)
            return None
        type(self).served.append(self.path)
        return super().do_GET()


def _serve(root, port=0):
    srv = http.server.ThreadingHTTPServer(
        ("127.0.0.1", port), functools.partial(_Handler, directory=str(root))
    )
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def www(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    for i in range(12):
        (root / f"good-{i}.jpg").write_bytes(_jpeg((20 * i, 100, 50)))
    srv = _serve(root)
    yield f"http://127.0.0.1:{srv.server_address[1]}/", root
    srv.shutdown()
    srv.server_close()


def _selection(urls: list[str]) -> pa.Table:
    n = len(urls)
    return pa.table(
        {
            "key": [f"s-{i:09d}" for i in range(n)],
            "URL": urls,
            "TEXT": ["a caption"] * n,
            "wnid": ["n00000001"] * n,
            "similarity": pa.array([0.9] * n, pa.float32()),
        }
    )


def _download(tmp_path, urls, **validate):
    sel = tmp_path / "selection.parquet"
    pq.write_table(_selection(urls), sel)
    return download_part(
        DownloadFiles(sel, tmp_path / "part.parquet", tmp_path / "part.tar"),
        download_settings(
            download_parts=1, threads_per_process=4, timeout_s=3, retries=0, images_per_download_shard=100, image_size=16,
            **{"min_success_rate": 0.0, "max_unreachable_fraction": None, **validate},
        ),
        part=0,
        work_dir=tmp_path / "work",
        processes=1,
    )  # fmt: skip


def _download_cmd(sel, tmp_path, work, **acquire) -> list[str]:
    """The rule's ``imagenot acquire-download`` command line on one part, its settings built as
    the rule builds them from ``acquire`` keys on top of the schema's defaults."""
    from imagenot.acquire.settings import DownloadSettings
    from imagenot.core.config import validate_config
    from imagenot.core.settings import to_json

    config = validate_config({"acquire": {"download_parts": 1, "image_size": 16, **acquire}})
    cmd = [sys.executable, "-m", "imagenot.cli", "acquire-download", "--selection", str(sel)]
    cmd += ["--part", "0", "--work-dir", str(work), "--status", str(tmp_path / "part.parquet")]
    cmd += ["--tar", str(tmp_path / "part.tar")]
    return [*cmd, "--processes", "1", "--settings", to_json(DownloadSettings.from_config(config))]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killed_download_job_leaves_no_process_and_no_finished_batch(tmp_path, www, sig):
    base, _ = www
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "m.jpg").write_bytes(_jpeg())
    urls = [base + f"hang/{i}.jpg" for i in range(8)] + ["http://mirror.invalid/m.jpg"]
    sel = tmp_path / "selection.parquet"
    pq.write_table(_selection(urls), sel)
    work = tmp_path / "work"
    cmd = _download_cmd(
        sel,
        tmp_path,
        work,
        timeout_s=100,
        threads_per_process=4,
        url_map={"http://mirror.invalid/": str(mirror)},
    )
    _Handler.hung = 0
    job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while _Handler.hung < 4:  # img2dataset's worker threads are downloading (and hang)
            assert job.poll() is None, job.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "img2dataset never started downloading"
            time.sleep(0.2)
        family = psutil.Process(job.pid).children(recursive=True)
        assert len(family) >= 2  # the fetch process and img2dataset's worker(s) at least
        job.send_signal(sig)
        job.wait(timeout=30)
        # a bound, not a timing assertion: the processes end within a second when the job
        # takes its family down, and never when it does not
        deadline = time.monotonic() + 90
        while not all(_gone(p.pid) for p in family) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [(p.pid, p.name()) for p in family if not _gone(p.pid)]
        assert not left, f"processes outlived the killed job: {left}"
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode != 0
    assert not list(work.glob("img2dataset/*_stats.json"))  # no batch recorded as finished
    assert not (tmp_path / "part.parquet").exists()


def test_dead_server_batch_is_not_finished_and_the_rerun_fetches_it(tmp_path):
    with socket.socket() as s:  # a port with no server behind it: every URL is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    urls = [f"http://127.0.0.1:{port}/good-{i}.jpg" for i in range(8)]
    sel = tmp_path / "selection.parquet"
    pq.write_table(_selection(urls), sel)
    cmd = _download_cmd(sel, tmp_path, tmp_path / "work", timeout_s=3, retries=0)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr[-3000:]
    last = run.stderr.strip().splitlines()[-1]  # one line, no traceback (imagenot.cli.main)
    assert last.startswith("imagenot acquire-download: error: ") and "Traceback" not in run.stderr
    assert "failed entirely with one network error" in last and "Connection refused" in last
    assert not list((tmp_path / "work").glob("img2dataset/*_stats.json"))
    assert not (tmp_path / "part.parquet").exists()
    root = tmp_path / "www"
    root.mkdir()
    for i in range(8):
        (root / f"good-{i}.jpg").write_bytes(_jpeg())
    srv = _serve(root, port)  # the server is back
    try:
        status = _download(tmp_path, urls)
    finally:
        srv.shutdown()
        srv.server_close()
    assert status["reason"].to_pylist() == ["success"] * 8


def test_part_below_the_success_floor_fails_before_writing(tmp_path, www):
    base, _ = www
    urls = [base + f"good-{i}.jpg" for i in range(10)] + [base + f"no-{i}.jpg" for i in range(50)]
    with pytest.raises(
        DownloadError, match=r"10 of 60 images .* acquire.min_success_rate 0.5 \(http_error 50"
    ):
        _download(tmp_path, urls, min_success_rate=0.5)
    assert not (tmp_path / "part.parquet").exists() and not (tmp_path / "part.tar").exists()
    # dead URLs (404) are not transient: the fetched work is kept, a lower floor reuses it
    status = _download(tmp_path, urls, min_success_rate=0.1)
    assert status["reason"].to_pylist().count("success") == 10


def test_download_work_for_another_selection_is_redone(tmp_path, www, caplog):
    """docs/reruns.md: a lower threshold selects more rows for the same part; the work
    folder made for the earlier selection is not resumed as if complete (a dead end): its rows
    are reused (same key and URL) and only the new rows are fetched."""
    base, _ = www
    urls = [base + f"good-{i}.jpg" for i in range(12)]
    first = _download(tmp_path, urls[:6])
    assert first.num_rows == 6
    _Handler.served.clear()
    with caplog.at_level("INFO", logger="imagenot.acquire.fetch"):
        second = _download(tmp_path, urls)
    assert second["reason"].to_pylist() == ["success"] * 12
    assert sorted(_Handler.served) == sorted(f"/good-{i}.jpg" for i in range(6, 12))
    messages = [r.getMessage() for r in caplog.records]
    assert any("another selection" in m and "1 finished batch(es) kept" in m for m in messages)
    by_key = {r["key"]: r["sha256"] for r in second.to_pylist()}
    assert all(by_key[r["key"]] == r["sha256"] for r in first.to_pylist())
    # a key whose URL changed is fetched again, not taken from the earlier work
    _Handler.served.clear()
    third = _download(tmp_path, [*urls[:11], base + "good-0.jpg"])
    assert third["reason"].to_pylist() == ["success"] * 12
    assert _Handler.served == ["/good-0.jpg"]


class _HostileHandler(http.server.BaseHTTPRequestHandler):
    """/big: a body over the cap without Content-Length; /trickle: one body byte per 0.2 s;
    /slow-headers: one header byte per 0.2 s."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/slow-headers":
            try:
                self.wfile.write(b"HTTP/1.0 200 OK\r\nX-Slow: ")
                for _ in range(200):
                    self.wfile.write(b"a")
                    self.wfile.flush()
                    time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        self.send_response(200)
        self.send_header("Content-Type", "image/jpeg")
        self.end_headers()
        try:
            if self.path == "/big":
                for _ in range(64):
                    self.wfile.write(b"\xff" * 4096)
            elif self.path == "/trickle":
                for _ in range(200):
                    self.wfile.write(b"\xff")
                    self.wfile.flush()
                    time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            pass


def test_downloads_are_http_only_size_capped_and_deadlined(tmp_path, www):
    """A file:// URL read local files into the dataset; a 400 MB body was held in memory;
    a server sending one byte per second held the job."""
    base, root = www
    (root / "large.jpg").write_bytes(_jpeg() + b"\0" * 70_000)  # Content-Length over the cap
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(_jpeg())
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HostileHandler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    hostile = f"http://127.0.0.1:{srv.server_address[1]}"
    urls = [
        base + "good-0.jpg",
        f"file://{secret}",
        "ftp://127.0.0.1/x.jpg",
        base + "large.jpg",
        f"{hostile}/big",
        f"{hostile}/trickle",
        f"{hostile}/slow-headers",
    ]
    sel = tmp_path / "selection.parquet"
    pq.write_table(_selection(urls), sel)
    # the deadline far from both sides: the good file arrives in milliseconds, the trickling
    # ones would take 40 s
    try:
        status = download_part(
            DownloadFiles(sel, tmp_path / "part.parquet", tmp_path / "part.tar"),
            download_settings(
                download_parts=1, threads_per_process=6, timeout_s=5, retries=0, images_per_download_shard=100,
                max_response_bytes=65_536, image_deadline_s=3, image_size=16,
                min_success_rate=0.0, max_unreachable_fraction=None,
            ),
            part=0,
            work_dir=tmp_path / "work",
            processes=1,
        )  # fmt: skip
    finally:
        srv.shutdown()
        srv.server_close()
    reasons = status["reason"].to_pylist()
    assert reasons == [
        "success",
        "unsupported_scheme",
        "unsupported_scheme",
        "too_large",
        "too_large",
        "timeout",
        "timeout",
    ], list(zip(reasons, status["detail"].to_pylist(), strict=True))
    assert all("deadline" in detail for detail in status["detail"].to_pylist()[5:])


def _exif_rotated_jpeg() -> bytes:
    """A 40x20 JPEG (left red, right blue) whose EXIF says: rotate 90 degrees clockwise."""
    img = Image.new("RGB", (40, 20), (255, 0, 0))
    img.paste((0, 0, 255), (20, 0, 40, 20))
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: the stored image is rotated 90 degrees counter-clockwise
    buf = io.BytesIO()
    img.save(buf, format="JPEG", exif=exif.tobytes(), quality=95)
    return buf.getvalue()


def test_exif_orientation_is_applied():
    from imagenot.acquire.images import validate_image

    res = validate_image(
        _exif_rotated_jpeg(), size=16, resize_mode="border", max_pixels=10**6, min_size=1,
        quality=95,
    )  # fmt: skip
    assert res.reason == "success" and (res.width, res.height) == (40, 20)
    out = np.asarray(Image.open(io.BytesIO(res.jpeg)).convert("RGB")).astype(int)
    # displayed upright: 20 wide, 40 tall, red on top (the stored left), blue below
    top, bottom = out[4, 8], out[12, 8]
    assert top[0] > 200 and top[2] < 60, top
    assert bottom[2] > 200 and bottom[0] < 60, bottom
    assert out[8, 1].min() > 200 and out[8, 14].min() > 200  # white borders left and right


def test_resize_of_an_extreme_aspect_ratio_is_bounded(monkeypatch):
    from imagenot.acquire import images

    sizes = []
    resize = Image.Image.resize

    def recording(self, size, *args, **kwargs):
        sizes.append(tuple(size))
        return resize(self, size, *args, **kwargs)

    monkeypatch.setattr(Image.Image, "resize", recording)
    strip = Image.new("RGB", (20_000, 4), (10, 200, 10))
    strip.paste((200, 10, 10), (9_998, 0, 10_002, 4))  # the centre square is red
    out = images.resize_square(strip, 64, "center_crop")
    assert out.size == (64, 64) and max(w * h for w, h in sizes) <= 64 * 64
    assert np.asarray(out)[32, 32].tolist()[0] > 150
    bordered = images.resize_square(strip, 64, "border")
    assert bordered.size == (64, 64) and max(w * h for w, h in sizes) <= 64 * 64


def test_which_rows_of_earlier_work_are_reused():
    from imagenot.acquire.fetch import reusable_row

    url_of = {"k1": "http://a/1.jpg", "k2": "http://a/2.jpg"}
    row = {"sel_key": "k1", "sel_url": "http://a/1.jpg", "url": "http://127.0.0.1:9/1.jpg"}
    assert reusable_row({**row, "error_message": None}, url_of)
    assert reusable_row({**row, "error_message": "HTTP Error 404: Not Found"}, url_of)
    assert not reusable_row({**row, "error_message": "The read operation timed out"}, url_of)
    assert not reusable_row({**row, "sel_url": "http://a/other.jpg"}, url_of)  # URL changed
    assert not reusable_row({**row, "sel_key": "k3"}, url_of)  # not selected now
    # work of an older version (no sel_url): the URL it fetched must be the selection's
    assert reusable_row({"sel_key": "k2", "url": "http://a/2.jpg"}, url_of)
    assert not reusable_row({"sel_key": "k1", "url": "http://127.0.0.1:9/1.jpg"}, url_of)


def test_an_unreachable_part_marks_its_failed_batches_for_refetch(tmp_path):
    """The reachability check (acquire.max_unreachable_fraction) needs no manual step either:
    the batches that failed by network errors are fetched again on the rerun."""
    import json

    from imagenot.acquire.download import check_reachable

    folder = tmp_path / "img2dataset"
    folder.mkdir()
    refused = "<urlopen error [Errno 111] Connection refused>"
    for shard, messages in {"00000": [refused] * 15 + [None] * 5, "00001": [None] * 20}.items():
        pq.write_table(pa.table({"error_message": pa.array(messages, pa.string())}),
                       folder / f"{shard}.parquet")  # fmt: skip
        (folder / f"{shard}.tar").write_bytes(b"")
        (folder / f"{shard}_stats.json").write_text(json.dumps({"count": 20}))
    with pytest.raises(DownloadError, match=r"download_on: local.*1 batch\(es\) .* fetched again"):
        check_reachable({"network_error": 38, "success": 2}, 0, 0.9, tmp_path)
    assert sorted(p.name for p in folder.glob("*_stats.json")) == ["00001_stats.json"]

"""Download + validation through a real loopback HTTP server, bad input included."""

from __future__ import annotations

import functools
import http.server
import io
import threading
import urllib.request

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import download_settings
from PIL import Image

from imagenot.acquire import images
from imagenot.acquire.download import download_part, part_of, reason_counts
from imagenot.acquire.fetch import rewrite_urls, serve_directories
from imagenot.acquire.files import DownloadFiles
from imagenot.core.dataset import ManifestDataset


def _encoded(fmt: str, size=(40, 30), colour=(200, 30, 30), mode="RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, colour).save(buf, format=fmt)
    return buf.getvalue()


def _bad_world(root):
    """Files served by the test server, and the expected reason of each."""
    jpeg = _encoded("JPEG")
    buf = io.BytesIO()
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (200, 200, 3), dtype=np.uint8)).save(buf, format="JPEG")
    noisy = buf.getvalue()
    files = {
        "good.jpg": (jpeg, "success"),
        "good.png": (_encoded("PNG", colour=(10, 200, 10, 128), mode="RGBA"), "success"),
        "good.webp": (_encoded("WEBP", colour=(10, 10, 200)), "success"),
        "grey.png": (_encoded("PNG", colour=90, mode="L"), "success"),
        "truncated.jpg": (noisy[: len(noisy) // 2], "corrupt"),
        "header-only.jpg": (noisy[:300], "corrupt"),
        "page.jpg": (b"<!doctype html><html><body>Not here</body></html>", "not_an_image"),
        "bomb.png": (_encoded("PNG", size=(3000, 3000), colour=0, mode="L"), "decompression_bomb"),
        "tiny.jpg": (_encoded("JPEG", size=(4, 4)), "too_small"),
    }
    for name, (data, _) in files.items():
        (root / name).write_bytes(data)
    expected = {name: reason for name, (_, reason) in files.items()}
    expected["missing.jpg"] = "http_error"
    expected["slow/x.jpg"] = "timeout"
    return expected


class _SlowHandler(http.server.SimpleHTTPRequestHandler):
    """A ``/slow/`` request is never answered while the test runs (it waits for the fixture's
    end): its timeout is certain however loaded the machine, and the other files have the whole
    timeout to arrive."""

    released = threading.Event()

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.startswith("/slow/"):
            self.released.wait()
        return super().do_GET()


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    expected = _bad_world(root)
    handler = functools.partial(_SlowHandler, directory=str(root))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _SlowHandler.released.clear()
    yield f"http://127.0.0.1:{srv.server_address[1]}/", expected
    _SlowHandler.released.set()
    srv.shutdown()
    srv.server_close()


def _selection(base: str, names: list[str]) -> pa.Table:
    return pa.table(
        {
            "key": [f"s-{i:09d}" for i in range(len(names))],
            "URL": [base + n for n in names],
            "TEXT": names,
            "wnid": ["n001"] * len(names),
            "similarity": pa.array(np.linspace(0.9, 0.5, len(names)), pa.float32()),
        }
    )


def test_bad_input_ends_in_statistics(tmp_path, server):
    base, expected = server
    names = sorted(expected)
    sel = tmp_path / "selection.parquet"
    pq.write_table(_selection(base, names), sel)
    status = download_part(
        DownloadFiles(sel, tmp_path / "part.parquet", tmp_path / "part.tar"),
        download_settings(
            download_parts=1, threads_per_process=4, timeout_s=3, retries=0, images_per_download_shard=100, image_size=16,
            max_image_pixels=1_000_000, min_image_size=8, min_success_rate=0.0, max_unreachable_fraction=None,
        ),
        part=0,
        work_dir=tmp_path / "work",
        processes=1,
    )  # fmt: skip
    by_key = {r["key"]: r for r in status.to_pylist()}
    for i, name in enumerate(names):
        assert by_key[f"s-{i:09d}"]["reason"] == expected[name], name
    counts = {r["reason"]: r["count"] for r in reason_counts(status, "0")}
    assert counts["success"] == 4 and counts["http_error"] == 1 and counts["timeout"] == 1
    assert sum(counts.values()) == len(names)
    # good images arrive intact: decodable, 16x16 RGB, colour preserved
    blob = (tmp_path / "part.tar").read_bytes()
    for i, name in enumerate(names):
        row = by_key[f"s-{i:09d}"]
        if name == "good.jpg":
            jpeg = blob[row["offset"] : row["offset"] + row["length"]]
            img = np.asarray(Image.open(io.BytesIO(jpeg)))
            assert img.shape == (16, 16, 3)
            assert abs(int(img[..., 0].mean()) - 200) < 6
        if name == "grey.png":
            assert row["mode"] == "L"
    assert pq.read_table(tmp_path / "part.parquet").num_rows == len(names)


def test_rerun_resumes_without_duplicates(tmp_path, server):
    base, _ = server
    names = ["good.jpg", "good.png", "good.webp", "missing.jpg"] * 3
    table = _selection(base, names)
    sel = tmp_path / "selection.parquet"
    pq.write_table(table, sel)
    settings = download_settings(
        download_parts=1, threads_per_process=2, timeout_s=10, retries=0, images_per_download_shard=10, image_size=16,
        min_success_rate=0.0, max_unreachable_fraction=None,
    )  # fmt: skip
    kwargs = {"part": 0, "work_dir": tmp_path / "work", "processes": 1}
    args = (DownloadFiles(sel, tmp_path / "p.parquet", tmp_path / "p.tar"), settings)
    first = download_part(*args, **kwargs)
    # simulate a job killed inside the second img2dataset shard: its stats file is missing
    stats = sorted((tmp_path / "work" / "img2dataset").glob("*_stats.json"))
    assert len(stats) == 2
    stats[-1].unlink()
    second = download_part(*args, **kwargs)
    assert second.num_rows == len(names) == first.num_rows
    assert len(set(second["key"].to_pylist())) == len(names)
    assert first.select(["key", "reason", "sha256"]).equals(
        second.select(["key", "reason", "sha256"])
    )


def test_url_map_serves_directory(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jpg").write_bytes(b"abc")
    with serve_directories({"http://demo-world.invalid/": tmp_path}) as mapping:
        [url] = rewrite_urls(["http://demo-world.invalid/a/x.jpg"], mapping)
        assert url.startswith("http://127.0.0.1:")
        assert urllib.request.urlopen(url, timeout=5).read() == b"abc"
    with (
        pytest.raises(FileNotFoundError, match="not found"),
        serve_directories({"x": tmp_path / "n"}),
    ):
        pass


def test_parts_are_stable_and_cover_all_keys():
    keys = [f"k{i}" for i in range(1000)]
    parts = part_of(keys, 7)
    assert set(parts.tolist()) == set(range(7))
    assert (part_of(keys[::-1], 7)[::-1] == parts).all()


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("HTTP Error 404: Not Found", "http_error"),
        ("The read operation timed out", "timeout"),
        ("<urlopen error [Errno 111] Connection refused>", "network_error"),
        (None, "success"),
    ],
)
def test_classify_fetch_error(message, reason):
    assert images.classify_fetch_error(message) == reason


def test_mode_rules():
    cmyk = _encoded("JPEG", mode="CMYK", colour=(0, 255, 255, 0))
    res = images.validate_image(
        cmyk, size=8, resize_mode="center_crop", max_pixels=10**6, min_size=1, quality=95
    )
    assert res.reason == "success" and res.mode == "CMYK"
    arr = np.asarray(Image.open(io.BytesIO(res.jpeg)))
    assert arr[..., 0].mean() > 200 and arr[..., 1].mean() < 60
    i16 = Image.fromarray(np.full((10, 10), 65535, np.uint16))
    assert np.asarray(images.to_rgb(i16)).min() == 255
    assert ManifestDataset  # imported for the API check of the module


PLANTED_MAIN = """
import multiprocessing
import os
import sys

if __name__ == "__mp_main__":  # run again by a process the download spawned
    if multiprocessing.current_process().name.startswith(os.environ["PLANT_IN"]):
        raise RuntimeError("planted: this process cannot start")

if __name__ == "__main__":
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, os.environ["TESTS"])
    from conftest import download_settings

    from imagenot.acquire.download import download_part
    from imagenot.acquire.fetch import DownloadError
    from imagenot.acquire.files import DownloadFiles

    root = os.environ["ROOT"]
    os.makedirs(f"{root}/www", exist_ok=True)
    pq.write_table(
        pa.table(
            {
                "key": ["s-0", "s-1"],
                "URL": ["http://planted.invalid/a.jpg", "http://planted.invalid/b.jpg"],
                "wnid": ["n0", "n0"],
                "similarity": pa.array([0.5, 0.5], pa.float32()),
            }
        ),
        f"{root}/sel.parquet",
    )
    settings = download_settings(
        download_parts=1, threads_per_process=1, retries=0, min_success_rate=0.0,
        max_unreachable_fraction=None, url_map={"http://planted.invalid/": f"{root}/www"},
    )
    try:
        download_part(
            DownloadFiles(f"{root}/sel.parquet", f"{root}/p.parquet", f"{root}/p.tar"), settings,
            part=0, work_dir=f"{root}/work", processes=2,
        )
    except DownloadError as exc:
        print(f"refused: {exc}")
        sys.exit(2)
    print("downloaded")
"""


@pytest.mark.parametrize(
    ("plant_in", "says"),
    [
        ("SpawnPoolWorker", "img2dataset's worker processes cannot start: "),
        ("imagenot-fetch", "the download process could not start: "),
    ],
)
def test_a_download_whose_processes_cannot_start_ends_with_one_line(tmp_path, plant_in, says):
    """A program whose main module fails when a spawned process runs it again (as
    multiprocessing's spawn does): img2dataset's pool would start worker after worker for ever,
    and the fetch child would end without a word. The download ends, saying why in one line.
    (The subprocess timeout is a safety net for the test run only.)"""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "planted_main.py"
    script.write_text(PLANTED_MAIN)
    env = {
        **os.environ,
        "PLANT_IN": plant_in,
        "ROOT": str(tmp_path),
        "TESTS": str(Path(__file__).parent),
    }
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stdout.strip().splitlines()[-1]  # img2dataset prints its progress before
    assert line.startswith(f"refused: {says}running the program's main module {script}"), line
    assert line.endswith("RuntimeError: planted: this process cannot start"), line
